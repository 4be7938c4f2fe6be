package substrate

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// readMarksRoom is a room with agent a joined, and a's principal.
func readMarksRoom(t *testing.T, s *Service, room string) *Principal {
	t.Helper()
	ctx := context.Background()
	r, err := s.CreateRoom(ctx, CreateRoomRequest{ID: room})
	if err != nil {
		t.Fatal(err)
	}
	pr, _ := s.Authenticate(ctx, r.Token)
	j, err := s.Join(ctx, pr, room, JoinRequest{ID: "a", Name: "A"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Authenticate(ctx, j.Token)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// reportedReads is agent a's context_reads as a read in this process
// reports it: the rows' count with the marks laid over.
func reportedReads(t *testing.T, s *Service, room string) int64 {
	t.Helper()
	h, err := s.readPresence(context.Background(), room)
	if err != nil {
		t.Fatal(err)
	}
	s.marks.overlay(room, h.agents)
	for _, a := range h.agents {
		if a.ID == "a" {
			return a.ContextReads
		}
	}
	t.Fatal("agent a is not in the room")
	return 0
}

func rowReads(t *testing.T, db *store.DB, room string) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(context.Background(), `SELECT context_reads FROM agents WHERE room_id = $1 AND id = 'a'`, room).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Many concurrent reads of one agent over two connections, the writer
// writing their marks meanwhile: every count a read in this process
// reports lies between the reads finished before it and those begun
// after it (a read counted twice goes over), and at the end the count
// reported and the row are the number of reads.
func TestReadMarksCountExactUnderConcurrentReads(t *testing.T) {
	db := pgtest.NewPool(t, 2)
	s := New(db, Options{})
	// The server's answer to a write's COMMIT takes a while: reads that
	// read the rows meanwhile find its reads there and still in flight.
	s.marks.committed = func() { time.Sleep(3 * time.Millisecond) }
	closed := false
	t.Cleanup(func() {
		if !closed {
			s.Close()
		}
	})
	const room, readers, each = "marks-count", 12, 25
	a := readMarksRoom(t, s, room)
	ctx := context.Background()
	var begun, finished atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, readers)
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				begun.Add(1)
				if _, err := s.Context(ctx, a, room, ContextRequest{Only: []string{"agents"}}); err != nil {
					errc <- err
					return
				}
				finished.Add(1)
			}
		}()
	}
	stop := make(chan struct{})
	go func() { wg.Wait(); close(stop) }()
	checks := 0
	for running := true; running; checks++ {
		select {
		case <-stop:
			running = false
		default:
		}
		lo := finished.Load()
		got := reportedReads(t, s, room)
		hi := begun.Load()
		if got < lo || got > hi {
			t.Fatalf("check %d: a read reports %d context reads; %d had finished before it and %d begun after it", checks, got, lo, hi)
		}
	}
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	const total = readers * each
	if got := reportedReads(t, s, room); got != total {
		t.Fatalf("after %d reads a read reports %d", total, got)
	}
	// The count stays exact once the writer has caught up.
	time.Sleep(3 * readMarksEvery)
	if got := reportedReads(t, s, room); got != total {
		t.Fatalf("after %d reads, written, a read reports %d", total, got)
	}
	s.Close()
	closed = true
	if got := rowReads(t, db, room); got != total {
		t.Fatalf("after %d reads the row holds %d", total, got)
	}
	t.Logf("%d reads, %d checks of the count meanwhile", total, checks)
}

// A write whose COMMIT went unanswered is neither retried blindly (the
// row would count it twice) nor dropped: the writer asks the server.
// Played with a transaction the test runs as the writer would, then
// commits or rolls back, and the writer told the COMMIT went unanswered.
func TestReadMarksWriteInDoubtIsSettledByTheServer(t *testing.T) {
	db := pgtest.NewPool(t, 2)
	s := New(db, Options{})
	t.Cleanup(s.Close)
	const room = "marks-doubt"
	readMarksRoom(t, s, room)
	ctx := context.Background()
	k := markKey{room, "a"}
	// write runs the writer's transaction for the marks in flight up to
	// COMMIT, then commits (or rolls back), and leaves the write in doubt.
	write := func(commit bool) {
		t.Helper()
		batch := s.marks.take()
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
		if err := tx.QueryRow(lctx, sqlMarkReads, []string{room}, []string{"a"}, []int64{m.seq}, []int64{m.reads}, []int64{m.upTo}).Scan(new(string), new(string), &n); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(lctx, `SELECT pg_current_xact_id()::text`).Scan(&xact); err != nil {
			t.Fatal(err)
		}
		s.marks.wrote(map[markKey]int64{k: n})
		if commit {
			err = tx.Commit(lctx)
		} else {
			err = tx.Rollback(lctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		s.marks.mu.Lock()
		s.marks.doubt = xact
		s.marks.mu.Unlock()
	}
	// The background writer must not take the marks first: the test is
	// the writer (and Close finds it done).
	s.marks.mu.Lock()
	s.marks.started = true
	s.marks.mu.Unlock()
	t.Cleanup(func() { close(s.marks.done) }) // runs before s.Close

	s.addReadMark(room, "a", readMark{seq: 1, upTo: 1, reads: 1})
	write(true)
	if got := reportedReads(t, s, room); got != 1 {
		t.Fatalf("a committed write in doubt: a read reports %d, want 1", got)
	}
	if err := s.settleReadMarks(ctx); err != nil {
		t.Fatal(err)
	}
	if got, row := reportedReads(t, s, room), rowReads(t, db, room); got != 1 || row != 1 {
		t.Fatalf("a committed write settled: a read reports %d, the row %d; want 1, 1", got, row)
	}
	if n := s.marks.pendingReads(room); n != 0 {
		t.Fatalf("a committed write settled: %d reads queued again", n)
	}

	s.addReadMark(room, "a", readMark{seq: 2, upTo: 2, reads: 1})
	write(false)
	s.addReadMark(room, "a", readMark{seq: 3, upTo: 3, reads: 1})
	if s.marks.take() != nil {
		t.Fatal("marks taken for a write while another's outcome is unknown")
	}
	if got := reportedReads(t, s, room); got != 3 {
		t.Fatalf("a rolled back write in doubt: a read reports %d, want 3", got)
	}
	// The writer's next flush settles the write, then writes its marks
	// with the newer ones.
	if err := s.flushReadMarks(ctx); err != nil {
		t.Fatal(err)
	}
	if got, row := reportedReads(t, s, room), rowReads(t, db, room); got != 3 || row != 3 {
		t.Fatalf("a rolled back write settled and written again: a read reports %d, the row %d; want 3, 3", got, row)
	}
}

// pendingReads is the room's context reads queued or in flight in this
// process (the tests' view of what the writer has yet to land).
func (r *readMarks) pendingReads(room string) int64 {
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
