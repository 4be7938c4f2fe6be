package groupcommit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate/internal/groupcommit"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The tests' own core: a room row with a seq, and items each invocation
// appends at the next seq. PostgreSQL refuses an item "boom" (a trigger,
// so the refusal comes from the pipeline) and the COMMIT of a
// transaction that wrote "doom" (a deferred constraint trigger). The
// package knows none of it: it sees only the Txn below.
const schema = `CREATE TABLE gc_rooms (id text PRIMARY KEY, seq bigint NOT NULL);
	CREATE TABLE gc_items (room text NOT NULL, seq bigint NOT NULL, value text NOT NULL, PRIMARY KEY (room, seq));
	CREATE FUNCTION gc_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.value = 'boom' THEN RAISE EXCEPTION 'boom refused'; END IF;
		IF NEW.value = 'lost' THEN RAISE EXCEPTION 'connection to the remote node lost' USING ERRCODE = '08006'; END IF;
		RETURN NEW; END $$;
	CREATE TRIGGER gc_refuse BEFORE INSERT ON gc_items FOR EACH ROW EXECUTE FUNCTION gc_refuse();
	CREATE FUNCTION gc_doom() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.value = 'doom' THEN RAISE EXCEPTION 'doom refused at commit'; END IF; RETURN NULL; END $$;
	CREATE CONSTRAINT TRIGGER gc_doom AFTER INSERT ON gc_items DEFERRABLE INITIALLY DEFERRED
		FOR EACH ROW EXECUTE FUNCTION gc_doom();
	INSERT INTO gc_rooms VALUES ('r', 0)`

// item is one invocation: append value. "bad" is refused by the core's
// own judgement; "count" first reads, on its own, how many items the
// room holds (a read the group's view lacks).
type item struct{ value string }

// view is the group's view of the room: its seq.
type view struct{ seq int64 }

// core is the tests' core, recording what the transactions published and
// what each "count" read.
type core struct {
	mu        sync.Mutex
	published []int64
	counted   []int64
}

type txn struct {
	c           *core
	room        string
	seq, rowSeq int64
}

func (t *txn) Reads(first bool, _ []item) []groupcommit.Stmt {
	if !first {
		return nil
	}
	return []groupcommit.Stmt{{SQL: `SELECT seq FROM gc_rooms WHERE id = $1 FOR UPDATE`, Args: []any{t.room},
		Read: func(br pgx.BatchResults) error {
			err := br.QueryRow().Scan(&t.seq)
			t.rowSeq = t.seq
			return err
		}}}
}

func (t *txn) Eval(ctx context.Context, q groupcommit.Querier, it item) (groupcommit.Evaluated, error) {
	switch it.value {
	case "bad":
		return groupcommit.Evaluated{}, errors.New("bad: refused by the core")
	case "count":
		var n int64
		if err := q.QueryRow(ctx, `SELECT count(*) FROM gc_items WHERE room = $1`, t.room).Scan(&n); err != nil {
			return groupcommit.Evaluated{}, err
		}
		t.c.mu.Lock()
		t.c.counted = append(t.c.counted, n)
		t.c.mu.Unlock()
	}
	seq := t.seq + 1
	if it.value == "unsave" {
		// The savepoint goes before the refused insert: the rollback to
		// it fails (3B001), as it did on Citus under a killed worker.
		return groupcommit.Evaluated{
			Stmts: []*pgx.QueuedQuery{{SQL: `RELEASE SAVEPOINT invocation`},
				{SQL: `INSERT INTO gc_items VALUES ($1, $2, 'boom')`, Arguments: []any{t.room, seq}}},
			Seq: seq, Advance: func() { t.seq = seq },
		}, nil
	}
	return groupcommit.Evaluated{
		Stmts:   []*pgx.QueuedQuery{{SQL: `INSERT INTO gc_items VALUES ($1, $2, $3)`, Arguments: []any{t.room, seq, it.value}}},
		Seq:     seq,
		Advance: func() { t.seq = seq },
	}, nil
}

func (t *txn) View() view     { return view{t.seq} }
func (t *txn) SetView(v view) { t.seq = v.seq }

func (t *txn) Sync() []groupcommit.Stmt {
	if t.rowSeq == t.seq {
		return nil
	}
	was := t.rowSeq
	t.rowSeq = t.seq
	return []groupcommit.Stmt{{SQL: `UPDATE gc_rooms SET seq = $2 WHERE id = $1`, Args: []any{t.room, t.seq}, Undo: func() { t.rowSeq = was }}}
}

func (t *txn) Commit() []groupcommit.Stmt { return nil }

func (t *txn) Committed() {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.c.published = append(t.c.published, t.seq)
}

type fixture struct {
	t  *testing.T
	db *store.DB
	c  *core
	g  *groupcommit.Group[item, view]
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db := pgtest.New(t) // 2 connections: the group's and the test's lock
	if _, err := db.Exec(context.Background(), schema); err != nil {
		t.Fatal(err)
	}
	if pgtest.Citus() {
		// The room's rows on a worker, as the core's are: the group's
		// savepoints and pipelined statements then go through the
		// coordinator to it.
		if _, err := db.Exec(context.Background(), `SELECT create_distributed_table('gc_rooms', 'id');
			SELECT create_distributed_table('gc_items', 'room', colocate_with => 'gc_rooms')`); err != nil {
			t.Fatal(err)
		}
	}
	c := &core{}
	g := groupcommit.New(groupcommit.Config[item, view]{DB: db, Log: slog.New(slog.DiscardHandler),
		Open: func(room string) groupcommit.Txn[item, view] { return &txn{c: c, room: room} }})
	return &fixture{t: t, db: db, c: c, g: g}
}

type answer struct {
	seq int64
	err error
}

// queued runs values as invocations of room r while the test holds the
// room lock, each once the one before is queued: the first leads and
// waits for the lock, the others share its second round in their order.
func (f *fixture) queued(values ...string) []answer {
	f.t.Helper()
	ctx := context.Background()
	release := f.lockRoom()
	answers := make([]chan answer, len(values))
	for i, v := range values {
		answers[i] = make(chan answer, 1)
		go func() {
			seq, err := f.g.Do(ctx, "r", item{v})
			answers[i] <- answer{seq, err}
		}()
		pgtest.Eventually(f.t, 30*time.Second, func() bool {
			leading, n := f.g.Queued("r")
			return leading && n == i
		}, "invocation %d to queue", i)
	}
	release()
	out := make([]answer, len(values))
	for i := range answers {
		out[i] = <-answers[i]
	}
	return out
}

// stored is the room's items in seq order, as "seq:value", and its row's
// seq.
func (f *fixture) stored() ([]string, int64) {
	f.t.Helper()
	ctx := context.Background()
	rows, err := f.db.Query(ctx, `SELECT seq, value FROM gc_items WHERE room = 'r' ORDER BY seq`)
	if err != nil {
		f.t.Fatal(err)
	}
	var items []string
	var seq int64
	var v string
	if _, err := pgx.ForEachRow(rows, []any{&seq, &v}, func() error {
		items = append(items, fmt.Sprintf("%d:%s", seq, v))
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
	if err := f.db.QueryRow(ctx, `SELECT seq FROM gc_rooms WHERE id = 'r'`).Scan(&seq); err != nil {
		f.t.Fatal(err)
	}
	return items, seq
}

// One transaction carries every queued invocation; each failure takes
// only itself, whether the core refuses it or PostgreSQL refuses its
// statement after the ones before it went out: the others are applied at
// consecutive seqs, the view goes back before a refused one (those after
// it are evaluated again), an invocation's own read after a refusal sees
// no trace of it, the shared row is written where the last one left it,
// and the transaction's view is published once, after its commit.
func TestGroupFailuresTakeOnlyThemselves(t *testing.T) {
	f := newFixture(t)
	got := f.queued("a", "b", "boom", "c", "bad", "count", "d")
	want := []answer{{1, nil}, {2, nil}, {0, errors.New("boom refused")}, {3, nil}, {0, errors.New("bad: refused by the core")}, {4, nil}, {5, nil}}
	for i, w := range want {
		g := got[i]
		if g.seq != w.seq || (g.err == nil) != (w.err == nil) || g.err != nil && !strings.Contains(g.err.Error(), w.err.Error()) {
			t.Errorf("invocation %d: seq %d, err %v; want seq %d, err %v", i, g.seq, g.err, w.seq, w.err)
		}
	}
	items, rowSeq := f.stored()
	if want := []string{"1:a", "2:b", "3:c", "4:count", "5:d"}; !slices.Equal(items, want) || rowSeq != 5 {
		t.Errorf("stored %v at row seq %d; want %v at 5", items, rowSeq, want)
	}
	f.c.mu.Lock()
	counted, published := slices.Clone(f.c.counted), slices.Clone(f.c.published)
	f.c.mu.Unlock()
	if len(counted) == 0 || counted[len(counted)-1] != 3 {
		t.Errorf("count's own read saw %v items, want 3 last (a, b, c)", counted)
	}
	if !slices.Equal(published, []int64{5}) {
		t.Errorf("published %v, want [5] once", published)
	}
	if s := f.g.Stats(); s.Batches != 1 || s.Largest != 7 || s.Redone == 0 {
		t.Errorf("stats %+v: want one transaction of 7 with invocations evaluated again", s)
	}
}

// A transaction whose COMMIT PostgreSQL refuses fails every invocation in
// it, and publishes nothing.
func TestGroupFailedCommitFailsEveryInvocation(t *testing.T) {
	f := newFixture(t)
	for i, a := range f.queued("a", "doom", "b") {
		if a.err == nil || a.seq != 0 {
			t.Errorf("invocation %d of the refused commit: seq %d, err %v", i, a.seq, a.err)
		}
	}
	if items, rowSeq := f.stored(); len(items) != 0 || rowSeq != 0 {
		t.Errorf("after the refused commit: %v at row seq %d", items, rowSeq)
	}
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if len(f.c.published) != 0 {
		t.Errorf("a refused commit published %v", f.c.published)
	}
}

// A caller whose context ended before its turn is answered with that and
// nothing of it is done; the others are.
func TestGroupCallerGoneBeforeItsTurn(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	release := f.lockRoom()
	first := make(chan answer, 1)
	go func() { seq, err := f.g.Do(ctx, "r", item{"a"}); first <- answer{seq, err} }()
	// The leader has taken its own invocation (none queued) and waits for
	// the lock: only then does the next caller queue behind its
	// transaction. Waiting for "leading" alone let the second caller
	// queue before the leader's first take, which took both.
	pgtest.Eventually(t, 10*time.Second, func() bool { leading, n := f.g.Queued("r"); return leading && n == 0 }, "the first caller to lead and wait for the lock")
	gone, cancel := context.WithCancel(ctx)
	second := make(chan answer, 1)
	go func() { seq, err := f.g.Do(gone, "r", item{"gone"}); second <- answer{seq, err} }()
	pgtest.Eventually(t, 10*time.Second, func() bool { _, n := f.g.Queued("r"); return n == 1 }, "the second caller to queue")
	cancel()
	release()
	if a := <-first; a.err != nil || a.seq != 1 {
		t.Fatalf("the leader: seq %d, err %v", a.seq, a.err)
	}
	if a := <-second; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("the caller gone before its turn: seq %d, err %v", a.seq, a.err)
	}
	if items, _ := f.stored(); !slices.Equal(items, []string{"1:a"}) {
		t.Fatalf("stored %v, want only a", items)
	}
}

// When the rollback to an invocation's savepoint fails (the savepoint is
// gone: SQLSTATE 3B001, as Citus answered once a worker was killed), the
// transaction cannot go on: every invocation in it fails, at once, and
// nothing of it is stored.
func TestBrokenBySavepointsFailure(t *testing.T) {
	f := newFixture(t)
	done := make(chan []answer, 1)
	go func() { done <- f.queued("a", "unsave", "b", "count") }()
	var got []answer
	select {
	case got = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the invocations of a transaction whose savepoint failed were not answered in 20 s")
	}
	for i, a := range got {
		if a.err == nil || a.seq != 0 {
			t.Errorf("invocation %d of the broken transaction: seq %d, err %v", i, a.seq, a.err)
		}
	}
	if items, rowSeq := f.stored(); len(items) != 0 || rowSeq != 0 {
		t.Errorf("after the broken transaction: %v at row seq %d", items, rowSeq)
	}
	// The group goes on: the next invocation has a transaction of its own.
	if seq, err := f.g.Do(context.Background(), "r", item{"after"}); err != nil || seq != 1 {
		t.Errorf("after the broken transaction: seq %d, err %v", seq, err)
	}
}

// A statement that fails because a connection of the transaction is gone
// (class 08: how Citus reports the coordinator's connection to the
// room's worker lost, after which a rollback to the savepoint may still
// answer) fails every invocation of the transaction, at once: the writes
// of those before it went with the connection, and those after it would
// meet the same loss one by one.
func TestLostConnectionFailsTheGroup(t *testing.T) {
	f := newFixture(t)
	done := make(chan []answer, 1)
	go func() { done <- f.queued("a", "b", "lost", "c", "count") }()
	var got []answer
	select {
	case got = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the invocations of a transaction whose connection was lost were not answered in 20 s")
	}
	for i, a := range got {
		if a.err == nil || a.seq != 0 || !strings.Contains(a.err.Error(), "remote node lost") {
			t.Errorf("invocation %d of the transaction whose connection was lost: seq %d, err %v", i, a.seq, a.err)
		}
	}
	if items, rowSeq := f.stored(); len(items) != 0 || rowSeq != 0 {
		t.Errorf("after the lost transaction: %v at row seq %d", items, rowSeq)
	}
	if s := f.g.Stats(); s.Redone != 0 {
		t.Errorf("stats %+v: invocations evaluated again after the connection was lost", s)
	}
}
