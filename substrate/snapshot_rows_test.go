package substrate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// An append may take the key of an entry whose timer ran out. The cached
// snapshot the next write reads its rows from must then know the key holds
// a log entry, not the expired value: a replace is refused as it would be
// on a fresh server, and the log entry is not overwritten.
func TestAppendOverExpiredEntryStaysAppendOnly(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures})
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "snaprows"})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := svc.Authenticate(ctx, room.Token)
	if _, err := svc.RegisterAction(ctx, p, "snaprows", substrate.ActionDef{ID: "overwrite",
		Writes: []substrate.WriteTemplate{{Key: "k", Value: []byte(`"overwritten"`)}}}); err != nil {
		t.Fatal(err)
	}
	write := func(w substrate.Write) error {
		_, err := svc.WriteState(ctx, p, "snaprows", []substrate.Write{w}, false)
		return err
	}
	if err := write(substrate.Write{Scope: "_shared", Key: "k", Value: []byte(`"brief"`), Timer: &substrate.Timer{MS: 1}}); err != nil {
		t.Fatal(err)
	}
	// A read caches the room's snapshot; the writes below advance it.
	if _, err := svc.Eval(ctx, p, "snaprows", `size(state._shared)`, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // Stays: brief's 1 ms timer runs out on the real clock
	if err := write(substrate.Write{Scope: "_shared", Key: "k", Value: []byte(`"logged"`), Append: true}); err != nil {
		t.Fatal(err)
	}
	// Invocations read their rows from the cached snapshot.
	_, err = svc.Invoke(ctx, p, "snaprows", "overwrite", nil)
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != errs.AppendOnly {
		t.Fatalf("replacing the appended entry: got %v, want %s", err, errs.AppendOnly)
	}
	got, err := svc.ReadState(ctx, p, "snaprows", substrate.ReadQuery{Scope: "_shared", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Entries) != 1 || string(got.Entries[0].Value) != `"logged"` || got.Entries[0].SortKey == nil {
		t.Fatalf("the appended entry reads %+v, want the log entry \"logged\"", got.Entries)
	}
}
