package substrate

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// A request that arrives while a batch runs is answered by the next
// batch, never by the one already running (which began before it, and
// may have read the room before the write its caller just made). Played
// with a batch held open: the late request gets the second batch's answer.
func TestCoalescerNeverAnswersWithABatchBegunBeforeTheRequest(t *testing.T) {
	var runs atomic.Int64
	hold := make(chan struct{})
	started := make(chan struct{}, 4)
	c := &coalescer[string, struct{}, int64]{run: func(ctx context.Context, _ string, reqs []struct{}) ([]int64, error) {
		n := runs.Add(1)
		started <- struct{}{}
		if n == 1 {
			<-hold
		}
		out := make([]int64, len(reqs))
		for i := range out {
			out[i] = n
		}
		return out, nil
	}}
	ctx := context.Background()
	first := make(chan int64)
	go func() { r, _ := c.do(ctx, "room", struct{}{}); first <- r }()
	<-started // batch 1 is running
	late := make(chan int64)
	go func() { r, _ := c.do(ctx, "room", struct{}{}); late <- r }()
	time.Sleep(20 * time.Millisecond) // the late request is queued
	close(hold)
	if r := <-first; r != 1 {
		t.Fatalf("the first request was answered by batch %d", r)
	}
	if r := <-late; r != 2 {
		t.Fatalf("a request that arrived while batch 1 ran was answered by batch %d, want 2", r)
	}
}

// Each reader of a shared presence read gets rows of its own: the read
// marks are laid over them per read.
func TestPresenceReadsAreEachReadersOwn(t *testing.T) {
	db := pgtest.NewPool(t, 2)
	s := New(db, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	room, err := s.CreateRoom(ctx, CreateRoomRequest{ID: "presence-own"})
	if err != nil {
		t.Fatal(err)
	}
	pr, _ := s.Authenticate(ctx, room.Token)
	if _, err := s.Join(ctx, pr, "presence-own", JoinRequest{ID: "a", Name: "A"}); err != nil {
		t.Fatal(err)
	}
	out, err := newPresenceReads(db).run(ctx, "presence-own", make([]struct{}, 2))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || len(out[0].agents) != 1 || out[0].agents[0].ID != "a" {
		t.Fatalf("presence read: %+v", out)
	}
	out[0].agents[0].ContextReads = 99
	if out[1].agents[0].ContextReads == 99 {
		t.Fatal("two readers share the rows of one presence read")
	}
	if _, err := newPresenceReads(db).run(ctx, "no-such-room", make([]struct{}, 1)); err == nil {
		t.Fatal("a room that does not exist read without error")
	}
}
