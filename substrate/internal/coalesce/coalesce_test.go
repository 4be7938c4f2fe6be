package coalesce

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// A request that arrives while a batch runs is answered by the next
// batch, never by the one already running (which began before it, and
// may have read the room before the write its caller just made). Played
// with a batch held open: the late request gets the second batch's answer.
func TestCoalescerNeverAnswersWithABatchBegunBeforeTheRequest(t *testing.T) {
	var runs atomic.Int64
	hold := make(chan struct{})
	started := make(chan struct{}, 4)
	c := &Batcher[string, struct{}, int64]{Run: func(ctx context.Context, _ string, reqs []struct{}) ([]int64, error) {
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
	go func() { r, _ := c.Do(ctx, "room", struct{}{}); first <- r }()
	<-started // batch 1 is running
	late := make(chan int64)
	go func() { r, _ := c.Do(ctx, "room", struct{}{}); late <- r }()
	time.Sleep(20 * time.Millisecond) // the late request is queued
	close(hold)
	if r := <-first; r != 1 {
		t.Fatalf("the first request was answered by batch %d", r)
	}
	if r := <-late; r != 2 {
		t.Fatalf("a request that arrived while batch 1 ran was answered by batch %d, want 2", r)
	}
}
