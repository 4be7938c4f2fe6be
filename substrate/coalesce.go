package substrate

import (
	"context"
	"sync"
	"time"
)

// coalescer runs requests for one key together: requests that arrive while
// a batch for their key runs join the next batch, which starts when that
// one ends, and one call of run answers them all. A request is never
// answered by a batch that began before it arrived, so what a batch reads
// is at least as new as what each of its requests would have read alone:
// ten thousand waits woken by one commit make one query, not ten thousand,
// and none of them sees the room as it was before its wake-up.
type coalescer[K comparable, Q, R any] struct {
	// run answers reqs (in order: out[i] answers reqs[i]) or fails them
	// all. Its context is not the callers': it outlives any one of them.
	run func(ctx context.Context, key K, reqs []Q) ([]R, error)
	// max caps a batch (a query's parameter list); 0 is no cap.
	max int

	mu    sync.Mutex
	slots map[K]*coalesceSlot[Q, R]
}

type coalesceSlot[Q, R any] struct {
	running bool
	pending []*coalesceBatch[Q, R] // gathering, oldest first; all but the last full
}

type coalesceBatch[Q, R any] struct {
	reqs []Q
	out  []R
	err  error
	done chan struct{}
}

// coalesceTimeout bounds a batch's query, which no caller's context
// cancels (the others would lose their answer with it).
const coalesceTimeout = 30 * time.Second

// do answers q with the next batch for key.
func (c *coalescer[K, Q, R]) do(ctx context.Context, key K, q Q) (R, error) {
	c.mu.Lock()
	if c.slots == nil {
		c.slots = map[K]*coalesceSlot[Q, R]{}
	}
	s := c.slots[key]
	if s == nil {
		s = &coalesceSlot[Q, R]{}
		c.slots[key] = s
	}
	var b *coalesceBatch[Q, R]
	if n := len(s.pending); n > 0 && (c.max <= 0 || len(s.pending[n-1].reqs) < c.max) {
		b = s.pending[n-1]
	} else {
		b = &coalesceBatch[Q, R]{done: make(chan struct{})}
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
func (c *coalescer[K, Q, R]) runLoop(key K, s *coalesceSlot[Q, R], b *coalesceBatch[Q, R]) {
	for b != nil {
		rctx, cancel := context.WithTimeout(context.Background(), coalesceTimeout)
		b.out, b.err = c.run(rctx, key, b.reqs)
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
