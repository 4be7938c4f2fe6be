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
	rc, err := s.readCtx(admittedCtx(t, s, ctx, admin, "u"), admin, "u", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Invoke(ctx, admin, "u", "bump", nil); err != nil {
		t.Fatal(err)
	}
	u, err := s.salienceRead(rc, "u").Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b := u[UsageKey("action", "bump")]; b != nil && b.LastUsedSeq > rc.snap.seq {
		t.Fatalf("the usage of a read at seq %d holds a use at seq %d", rc.snap.seq, b.LastUsedSeq)
	}
}

// A Read of a snapshot whose usage was not read with it (one a mutation
// advanced, say) is refused, not loaded late: Usage loaded it then,
// outside any read's transaction, so it could hold uses committed after
// the read's seq. Every read the salience gets goes through readRoom,
// which reads it in its transaction: a context read right after an
// invocation (the snapshot that invocation advanced) has it.
func TestReadUsageNeverLoadedLate(t *testing.T) {
	s := New(pgtest.New(t), Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	room, err := s.CreateRoom(ctx, CreateRoomRequest{ID: "late"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := s.Authenticate(ctx, room.Token)
	if _, err := s.RegisterAction(ctx, admin, "late", ActionDef{ID: "bump", Writes: []WriteTemplate{{Key: "n", Value: json.RawMessage(`1`)}}}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Invoke(ctx, admin, "late", "bump", nil)
	if err != nil {
		t.Fatal(err)
	}
	bare := &snapshot{room: "late", seq: res.Seq}
	if u, err := s.salienceRead(&roomCtx{snap: bare}, "late").Usage(ctx); err == nil || u != nil || bare.usage != nil {
		t.Fatalf("the usage of a snapshot that holds none was loaded late (%v, err %v)", u, err)
	}

	// The long way (the snapshot the invocation advanced has no usage),
	// then the cached snapshot.
	for range 2 {
		rc, err := s.readCtx(admittedCtx(t, s, ctx, admin, "late"), admin, "late", true)
		if err != nil {
			t.Fatal(err)
		}
		u, err := s.salienceRead(rc, "late").Usage(ctx)
		if err != nil || rc.snap.seq != res.Seq {
			t.Fatalf("a read at seq %d after the invocation at %d: usage err %v", rc.snap.seq, res.Seq, err)
		}
		if b := u[UsageKey("action", "bump")]; b == nil || b.LastUsedSeq != res.Seq {
			t.Fatalf("the read at seq %d misses the invocation's use: %+v", rc.snap.seq, b)
		}
	}
	if _, err := s.Context(ctx, admin, "late", ContextRequest{Depth: "lean", MessagesLimit: 20}); err != nil {
		t.Fatalf("a context read after the invocation: %v", err)
	}
}

// admittedCtx is ctx admitted to the room's expression budget for p, as
// the public entries admit before they read (readCtx refuses a context
// that was not); the admission ends with the test.
func admittedCtx(t *testing.T, s *Service, ctx context.Context, p *Principal, roomID string) context.Context {
	t.Helper()
	ctx, done, err := s.work(ctx, p, roomID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(done)
	return ctx
}
