package substrate

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate/internal/readmarks"
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
	s.marks.Overlay(room, presenceRows(h.agents))
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
	s.marks.Committed = func() { time.Sleep(3 * time.Millisecond) }
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
	time.Sleep(3 * readmarks.Every)
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
