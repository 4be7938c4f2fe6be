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
	svc := substrate.New(db, substrate.Options{Features: testFeatures})
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
	// A failure below must not leave the row locked: the pool's close
	// would wait for the mutations forever.
	t.Cleanup(func() { _ = hold.Rollback(context.Background()) })
	// lockWaits waits until n sessions of the test's database wait for a
	// lock. (Sleeping 200 ms for the first to hold the room lock let a
	// starved first goroutine come after the second on a loaded machine:
	// the second then committed first.)
	lockWaits := func(n int) {
		t.Helper()
		var got int
		pgtest.Eventually(t, 20*time.Second, func() bool {
			// pg_stat_activity is read once per transaction unless cleared.
			if _, err := hold.Exec(hctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
				t.Fatal(err)
			}
			if err := hold.QueryRow(hctx, pgtest.LockWaits()).Scan(&got); err != nil {
				t.Fatal(err)
			}
			return got == n
		}, "%d sessions to wait for a lock (%v do)", n, func() any { return got })
	}
	firstDone, secondDone := make(chan substrate.Entry, 1), make(chan substrate.Entry, 1)
	go func() { firstDone <- write("first") }()
	lockWaits(1) // the first holds the room lock and waits for hold's row lock
	go func() { secondDone <- write("second") }()
	lockWaits(2) // the second queues behind it for the room lock
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

// A feature's reads inside a mutation judge timers at the mutation's
// time, as the write path does: an entry whose TTL ran out while the
// mutation waited for the room lock is gone for Get and List too (with
// the database's now(), the transaction's start, it was still there,
// while Apply judged it absent).
func TestRoomTxReadsJudgeTimersAtTheMutationsTime(t *testing.T) {
	db := pgtest.NewPool(t, 3)
	svc := substrate.New(db, substrate.Options{Features: testFeatures})
	defer svc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "ttl"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	if _, err := svc.MutateRoom(ctx, admin, "ttl", func(tx *substrate.RoomTx) error {
		audit, err := tx.Apply([]substrate.Op{{Scope: "feat.x", Key: "hold", Value: []byte(`1`), TTL: 400 * time.Millisecond}}, "test")
		tx.Audit(map[string]any{"kind": "test", "writes": audit})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	hctx, hold, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(hctx, `SELECT 1 FROM rooms WHERE id = 'ttl' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	type seen struct {
		get, list bool
		err       error
	}
	done := make(chan seen, 1)
	go func() {
		var s seen
		_, s.err = svc.MutateRoom(ctx, admin, "ttl", func(tx *substrate.RoomTx) error {
			_, ok, err := tx.Get("feat.x", "hold")
			if err != nil {
				return err
			}
			kvs, err := tx.List(substrate.ListQuery{Scope: "feat.x", Prefix: "h"})
			s.get, s.list = ok, len(kvs) > 0
			tx.Audit(map[string]any{"kind": "test"})
			return err
		})
		done <- s
	}()
	// Stays: the TTL running out on the real clock while the mutation
	// waits is what this checks.
	time.Sleep(800 * time.Millisecond)
	if err := hold.Commit(hctx); err != nil {
		t.Fatal(err)
	}
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	if s.get || s.list {
		t.Fatalf("an entry whose TTL ran out during the lock wait was read as live (Get %v, List %v)", s.get, s.list)
	}
}
