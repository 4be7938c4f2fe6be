// Package coalesce runs requests for one key together, one call answering
// a batch of them: it makes the round trips of many readers of one room at
// one moment (the waits one commit woke, the agents reading its presence)
// cost one statement. It decides nothing of what a reader sees: the
// caller's run computes each answer (the rules are the core's: wait.go for
// the waits' batches, readpath.go for the shared presence read); the
// batcher only guarantees that an answer was computed after its request
// arrived.
package coalesce

import (
	"context"
	"sync"
	"time"
)

// Batcher runs requests for one key together: requests that arrive while
// a batch for their key runs join the next batch, which starts when that
// one ends, and one call of Run answers them all. A request is never
// answered by a batch that began before it arrived, so what a batch reads
// is at least as new as what each of its requests would have read alone:
// ten thousand waits woken by one commit make one query, not ten thousand,
// and none of them sees the room as it was before its wake-up.
//
// The zero value with Run set is ready to use.
type Batcher[K comparable, Q, R any] struct {
	// Run answers reqs (in order: out[i] answers reqs[i]) or fails them
	// all. Its context is not the callers': it outlives any one of them,
	// and is bounded by Timeout. Required.
	Run func(ctx context.Context, key K, reqs []Q) ([]R, error)
	// Max caps a batch (a query's parameter list); 0, the default, is no
	// cap.
	Max int

	mu    sync.Mutex
	slots map[K]*slot[Q, R]
}

type slot[Q, R any] struct {
	running bool
	pending []*batch[Q, R] // gathering, oldest first; all but the last full
}

type batch[Q, R any] struct {
	reqs []Q
	out  []R
	err  error
	done chan struct{}
}

// Timeout bounds a batch's run, which no caller's context cancels (the
// others would lose their answer with it).
const Timeout = 30 * time.Second

// Do answers q with the next batch for key.
func (c *Batcher[K, Q, R]) Do(ctx context.Context, key K, q Q) (R, error) {
	c.mu.Lock()
	if c.slots == nil {
		c.slots = map[K]*slot[Q, R]{}
	}
	s := c.slots[key]
	if s == nil {
		s = &slot[Q, R]{}
		c.slots[key] = s
	}
	var b *batch[Q, R]
	if n := len(s.pending); n > 0 && (c.Max <= 0 || len(s.pending[n-1].reqs) < c.Max) {
		b = s.pending[n-1]
	} else {
		b = &batch[Q, R]{done: make(chan struct{})}
		s.pending = append(s.pending, b)
	}
	i := len(b.reqs)
	b.reqs = append(b.reqs, q)
	if !s.running {
		s.running = true
		s.pending = s.pending[1:]
		c.mu.Unlock()
		go c.runLoop(key, s, b)
	} else {
		c.mu.Unlock()
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		var zero R
		return zero, ctx.Err()
	}
	if b.err != nil {
		var zero R
		return zero, b.err
	}
	return b.out[i], nil
}

// runLoop runs b, then each batch that gathered meanwhile, until none did.
// It runs in its own goroutine: a caller is answered when its batch is
// done, not when the batches after it are.
func (c *Batcher[K, Q, R]) runLoop(key K, s *slot[Q, R], b *batch[Q, R]) {
	for b != nil {
		rctx, cancel := context.WithTimeout(context.Background(), Timeout)
		b.out, b.err = c.Run(rctx, key, b.reqs)
		cancel()
		close(b.done)
		c.mu.Lock()
		b = nil
		if len(s.pending) > 0 {
			b = s.pending[0]
			s.pending = s.pending[1:]
		} else {
			s.running = false
			if c.slots[key] == s {
				delete(c.slots, key)
			}
		}
		c.mu.Unlock()
	}
}
