package substrate

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// A read's vocabulary usage is the usage at the read's seq: it was read
// after the read's transaction, from the table as it was by then, so an
// invocation committed in between was in it (since_your_last_read named
// an invocation whose effects the read did not show), and it was cached
// with the snapshot for every read at that seq.
func TestReadUsageIsAtTheReadsSeq(t *testing.T) {
	s := New(pgtest.New(t), Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	room, err := s.CreateRoom(ctx, CreateRoomRequest{ID: "u"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := s.Authenticate(ctx, room.Token)
	if _, err := s.RegisterAction(ctx, admin, "u", ActionDef{ID: "bump", Writes: []WriteTemplate{{Key: "n", Value: json.RawMessage(`1`)}}}); err != nil {
		t.Fatal(err)
	}
	rc, err := s.readCtx(ctx, admin, "u", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Invoke(ctx, admin, "u", "bump", nil); err != nil {
		t.Fatal(err)
	}
	u, err := (&Read{s: s, rc: rc, room: "u"}).Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b := u[UsageKey("action", "bump")]; b != nil && b.LastUsedSeq > rc.snap.seq {
		t.Fatalf("the usage of a read at seq %d holds a use at seq %d", rc.snap.seq, b.LastUsedSeq)
	}
}
