package substrate_test

import (
	"context"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// A mutation's time is taken once it holds the room lock, so time goes in
// step with seq: a mutation that queued behind another stamps its entries
// no earlier than the one committed before it, and no earlier than that
// one's commit. (It used to be the transaction's start, before the wait:
// a queued write was stamped up to the whole wait too early, and its
// timers started early by as much.)
func TestQueuedMutationTimeAfterLock(t *testing.T) {
	// Three connections: the two mutations and the test's own row lock
	// (with two, the second mutation would wait for a connection instead
	// of the room lock).
	db := pgtest.NewPool(t, 3)
	svc := substrate.New(db, substrate.Options{})
	defer svc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "clock"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	write := func(key string) substrate.Entry {
		res, err := svc.WriteState(ctx, admin, "clock", []substrate.Write{{Scope: "_shared", Key: key, Value: []byte(`1`)}}, true)
		if err != nil {
			t.Error(err)
			return substrate.Entry{}
		}
		return res.Entries[0]
	}
	write("first")
	// The first mutation takes the room lock, then waits for this row lock
	// on its entry: it holds the room lock for as long as hold does.
	hctx, hold, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(hctx, `SELECT 1 FROM state WHERE room_id = 'clock' AND scope = '_shared' AND key = 'first' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	firstDone, secondDone := make(chan substrate.Entry, 1), make(chan substrate.Entry, 1)
	go func() { firstDone <- write("first") }()
	time.Sleep(200 * time.Millisecond) // the first holds the room lock
	go func() { secondDone <- write("second") }()
	time.Sleep(300 * time.Millisecond) // the second queues behind it
	var released time.Time
	if err := hold.QueryRow(hctx, `SELECT clock_timestamp()`).Scan(&released); err != nil {
		t.Fatal(err)
	}
	if err := hold.Commit(hctx); err != nil {
		t.Fatal(err)
	}
	first, second := <-firstDone, <-secondDone
	if t.Failed() {
		return
	}
	if second.Revision <= first.Revision {
		t.Fatalf("the queued write committed first: revisions %d, %d", first.Revision, second.Revision)
	}
	if second.UpdatedAt.Before(first.UpdatedAt) || second.UpdatedAt.Before(released) {
		t.Fatalf("the queued write is stamped %s, before the write committed ahead of it (stamped %s, lock released at %s)",
			second.UpdatedAt.Format(time.RFC3339Nano), first.UpdatedAt.Format(time.RFC3339Nano), released.Format(time.RFC3339Nano))
	}
}
