package readmarks

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The tests' own table of agents' marks, and the statement that writes
// them as the core's (substrate/readpath.go) writes the agents': the
// package knows no table but the one its owner's statement names.
const (
	sqlTestTable = `CREATE TABLE marks_test (room_id text, id text, last_context_seq bigint NOT NULL DEFAULT 0,
		context_reads bigint NOT NULL DEFAULT 0, last_seen_seq bigint NOT NULL DEFAULT 0, PRIMARY KEY (room_id, id))`
	sqlTestMarks = `UPDATE marks_test AS a SET last_context_seq = greatest(a.last_context_seq, v.seq),
		context_reads = a.context_reads + v.reads, last_seen_seq = greatest(a.last_seen_seq, v.up_to)
	FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[]) AS v(room_id, id, seq, reads, up_to)
	WHERE a.room_id = v.room_id AND a.id = v.id
	RETURNING a.room_id, a.id, a.context_reads`
)

// marksTable makes the tests' table with agent a of room in it, and marks
// that write there.
func marksTable(t *testing.T, db *store.DB, room string) *Marks {
	t.Helper()
	if _, err := db.Exec(context.Background(), sqlTestTable); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(context.Background(), `INSERT INTO marks_test (room_id, id) VALUES ($1, 'a')`, room); err != nil {
		t.Fatal(err)
	}
	return New(db, sqlTestMarks, slog.New(slog.DiscardHandler))
}

// reportedReads is agent a's context_reads as a read reports it: the
// row's count with the marks laid over.
func reportedReads(t *testing.T, s *Marks, db *store.DB, room string) int64 {
	t.Helper()
	a := agentRows{{ID: "a"}}
	if err := db.QueryRow(context.Background(), `SELECT last_context_seq, last_seen_seq, context_reads FROM marks_test WHERE room_id = $1 AND id = 'a'`, room).
		Scan(&a[0].LastContextSeq, &a[0].LastSeenSeq, &a[0].ContextReads); err != nil {
		t.Fatal(err)
	}
	s.Overlay(room, a)
	return a[0].ContextReads
}

func rowReads(t *testing.T, db *store.DB, room string) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(context.Background(), `SELECT context_reads FROM marks_test WHERE room_id = $1 AND id = 'a'`, room).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A write whose COMMIT went unanswered is neither retried blindly (the
// row would count it twice) nor dropped: the writer asks the server.
// Played with a transaction the test runs as the writer would, then
// commits or rolls back, and the writer told the COMMIT went unanswered.
func TestReadMarksWriteInDoubtIsSettledByTheServer(t *testing.T) {
	db := pgtest.NewPool(t, 2)
	const room = "marks-doubt"
	s := marksTable(t, db, room)
	t.Cleanup(s.Close)
	ctx := context.Background()
	k := markKey{room, "a"}
	// write runs the writer's transaction for the marks in flight up to
	// COMMIT, then commits (or rolls back), and leaves the write in doubt.
	write := func(commit bool) {
		t.Helper()
		batch := s.take()
		if batch == nil {
			t.Fatal("no marks to write")
		}
		lctx, tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		var xact string
		m := batch[k]
		if err := tx.QueryRow(lctx, sqlTestMarks, []string{room}, []string{"a"}, []int64{m.seq}, []int64{m.reads}, []int64{m.upTo}).Scan(new(string), new(string), &n); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(lctx, `SELECT pg_current_xact_id()::text`).Scan(&xact); err != nil {
			t.Fatal(err)
		}
		s.wrote(map[markKey]int64{k: n})
		if commit {
			err = tx.Commit(lctx)
		} else {
			err = tx.Rollback(lctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		s.doubt = xact
		s.mu.Unlock()
	}
	// The background writer must not take the marks first: the test is
	// the writer (and Close finds it done).
	s.Hold()

	s.Add(room, "a", Mark{Seq: 1, UpTo: 1, Reads: 1})
	write(true)
	if got := reportedReads(t, s, db, room); got != 1 {
		t.Fatalf("a committed write in doubt: a read reports %d, want 1", got)
	}
	if err := s.settle(ctx); err != nil {
		t.Fatal(err)
	}
	if got, row := reportedReads(t, s, db, room), rowReads(t, db, room); got != 1 || row != 1 {
		t.Fatalf("a committed write settled: a read reports %d, the row %d; want 1, 1", got, row)
	}
	if n := s.pendingReads(room); n != 0 {
		t.Fatalf("a committed write settled: %d reads queued again", n)
	}

	s.Add(room, "a", Mark{Seq: 2, UpTo: 2, Reads: 1})
	write(false)
	s.Add(room, "a", Mark{Seq: 3, UpTo: 3, Reads: 1})
	if s.take() != nil {
		t.Fatal("marks taken for a write while another's outcome is unknown")
	}
	if got := reportedReads(t, s, db, room); got != 3 {
		t.Fatalf("a rolled back write in doubt: a read reports %d, want 3", got)
	}
	// The writer's next flush settles the write, then writes its marks
	// with the newer ones.
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, row := reportedReads(t, s, db, room), rowReads(t, db, room); got != 3 || row != 3 {
		t.Fatalf("a rolled back write settled and written again: a read reports %d, the row %d; want 3, 3", got, row)
	}
}

// pendingReads is the room's context reads queued or in flight in this
// process (the tests' view of what the writer has yet to land).
func (r *Marks) pendingReads(room string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, m := range []map[markKey]readMark{r.inflight, r.pending} {
		for k, q := range m {
			if k.room == room {
				n += q.reads
			}
		}
	}
	return n
}
