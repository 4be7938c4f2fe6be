// Package memo keeps answers the core computed, keyed by what the core
// says decides them, so that the same question is answered once: Table
// for answers that depend on the key alone, process-wide (what an
// expression's source names: substrate/defs/facts.go), and Bounded and
// Map for answers kept with one room snapshot (the changes since a seq:
// waitdelta.go's unseenAt; the gated or timed messages per message
// count: msgcount.go's hiddenMessages; both held in snapshot.go), and
// Until for one answer that holds until a moment its computation names
// (a snapshot's live entries, until a timer next changes them:
// snapshot.go's live).
//
// None of them decides anything: a miss is computed by the caller's func (or
// by the caller before Keep), and a bound reached only means the answer
// is computed again.
package memo

import (
	"sync"
	"time"
)

// Table keeps one answer per key for as long as fewer than its bound are
// kept; past it, the table starts over (keys are few per room, rooms
// many). It is safe for concurrent use.
type Table[K comparable, V any] struct {
	mu  sync.RWMutex
	m   map[K]V
	max int
}

// NewTable returns an empty table of at most max answers.
func NewTable[K comparable, V any](max int) *Table[K, V] {
	return &Table[K, V]{m: map[K]V{}, max: max}
}

// Get returns the answer for k, computing it with compute on a miss
// (outside the table's lock: two readers may compute the same answer).
func (t *Table[K, V]) Get(k K, compute func(K) V) V {
	t.mu.RLock()
	v, ok := t.m[k]
	t.mu.RUnlock()
	if ok {
		return v
	}
	v = compute(k)
	t.mu.Lock()
	if len(t.m) >= t.max {
		t.m = map[K]V{}
	}
	t.m[k] = v
	t.mu.Unlock()
	return v
}

// Bounded keeps a bounded number of answers (Keep); past the bound, new
// ones are not kept. The zero value is empty and ready; it is safe for
// concurrent use.
type Bounded[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]V
}

// Get returns the answer kept for k.
func (b *Bounded[K, V]) Get(k K) (V, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[k]
	return v, ok
}

// Keep keeps v for k while fewer than max answers are kept.
func (b *Bounded[K, V]) Keep(k K, v V, max int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[K]V{}
	}
	if len(b.m) < max {
		b.m[k] = v
	}
}

// Map keeps every answer it is given, for the life of what holds it (a
// snapshot: one per message count the janitor leaves it at). The zero
// value is empty and ready; it is safe for concurrent use.
type Map[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]V
}

// Get returns the answer kept for k.
func (m *Map[K, V]) Get(k K) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[k]
	return v, ok
}

// Keep keeps v for k.
func (m *Map[K, V]) Keep(k K, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[K]V{}
	}
	m.m[k] = v
}

// Until keeps one answer until the moment its computation said it stops
// holding (zero: for the life of what holds it). The zero value is empty
// and ready; it is safe for concurrent use. A miss is computed under its
// lock, so concurrent askers share one computation, and every asker
// before the moment gets the same answer (a pointer answer is the same
// pointer: callers compare it to tell whether the answer changed).
type Until[V any] struct {
	mu    sync.Mutex
	v     V
	until time.Time
	ok    bool
}

// Get returns the answer kept when it still holds at now; else compute
// computes it at now, with the moment it stops holding (zero: never),
// and it is kept.
func (u *Until[V]) Get(now time.Time, compute func(now time.Time) (V, time.Time)) V {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ok && (u.until.IsZero() || now.Before(u.until)) {
		return u.v
	}
	u.v, u.until = compute(now)
	u.ok = true
	return u.v
}
