package groupcommit_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate/internal/groupcommit"
)

// lockRoom takes room r's lock on a connection of the test's own and
// returns what releases it. The lock is released when the test ends too,
// before the pool closes: a test that fails while a leader waits for the
// lock then fails in seconds, instead of hanging in the pool's Close
// (which waits for every connection, the lock's and the blocked
// leader's) until the binary's timeout.
func (f *fixture) lockRoom() (release func()) {
	f.t.Helper()
	ctx := context.Background()
	lctx, tx, err := f.db.Begin(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(lctx)) })
	if _, err := tx.Exec(lctx, `SELECT FROM gc_rooms WHERE id = 'r' FOR UPDATE`); err != nil {
		f.t.Fatal(err)
	}
	return func() {
		if err := tx.Commit(lctx); err != nil {
			f.t.Fatal(err)
		}
	}
}

// receive is the answer on ch, or a failure within d: a caller that is
// never answered fails the test instead of hanging it.
func receive(t *testing.T, ch <-chan answer, d time.Duration, who string) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(d):
		t.Fatalf("%s was not answered within %v", who, d)
		return answer{}
	}
}

// A caller that queued before the leader took its first batch (the
// leader still waiting for a connection) and is gone before that batch
// is taken is skipped like one that queued behind a running transaction.
// This is the order TestGroupCallerGoneBeforeItsTurn once ran into under
// load, without waiting for it: there, the leader took both callers at
// once, the queue never held the one caller the test waited for, and the
// test hung in the pool's Close with the room still locked.
func TestGroupCallerGoneBeforeTheFirstBatch(t *testing.T) {
	// One connection, held by the test: the leader waits in the pool, its
	// own invocation still queued.
	db := pgtest.NewPool(t, 1)
	if _, err := db.Exec(context.Background(), schema); err != nil {
		t.Fatal(err)
	}
	c := &core{}
	g := groupcommit.New(groupcommit.Config[item, view]{DB: db, Log: slog.New(slog.DiscardHandler),
		Open: func(room string) groupcommit.Txn[item, view] { return &txn{c: c, room: room} }})
	f := &fixture{t: t, db: db, c: c, g: g}
	release := f.lockRoom()

	ctx := context.Background()
	first := make(chan answer, 1)
	go func() { seq, err := g.Do(ctx, "r", item{"a"}); first <- answer{seq, err} }()
	pgtest.Eventually(t, 10*time.Second, func() bool { leading, n := g.Queued("r"); return leading && n == 1 }, "the first caller to lead")
	gone, cancel := context.WithCancel(ctx)
	second := make(chan answer, 1)
	go func() { seq, err := g.Do(gone, "r", item{"gone"}); second <- answer{seq, err} }()
	pgtest.Eventually(t, 10*time.Second, func() bool { _, n := g.Queued("r"); return n == 2 }, "the second caller to queue behind the leader")
	cancel()
	release()

	if a := receive(t, first, 10*time.Second, "the leader"); a.err != nil || a.seq != 1 {
		t.Fatalf("the leader: seq %d, err %v", a.seq, a.err)
	}
	if a := receive(t, second, 10*time.Second, "the caller gone before its turn"); !errors.Is(a.err, context.Canceled) {
		t.Fatalf("the caller gone before its turn: seq %d, err %v", a.seq, a.err)
	}
	if items, _ := f.stored(); !slices.Equal(items, []string{"1:a"}) {
		t.Fatalf("stored %v, want only a", items)
	}
}
