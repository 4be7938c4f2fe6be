// Package tokenmemory remembers, for a while, what the core's lookup of a
// bearer token answered, per room and token hash (issue 32: the lookup
// was a round trip of every invocation). What is remembered, for how long
// and when a remembered answer may be acted on are the core's rules
// (substrate/authority.go: AuthenticateInvoke, which verifies a
// remembered token again under the room lock); this only keeps values
// until they expire.
package tokenmemory

import (
	"sync"
	"time"
)

// maxEntries bounds the memory; when full, it starts afresh.
const maxEntries = 8192

// Memory holds values by room and token hash (32 bytes). The zero value
// is ready; it is safe for concurrent use.
type Memory[V any] struct {
	mu sync.Mutex
	m  map[key]entry[V]
}

type key struct {
	room string
	hash [32]byte
}

type entry[V any] struct {
	v     V
	until time.Time
}

// Get is the value remembered for room and hash h (32 bytes), unless it
// expired by now.
func (t *Memory[V]) Get(room string, h []byte, now time.Time) (v V, ok bool) {
	k := key{room: room, hash: [32]byte(h)}
	t.mu.Lock()
	e, ok := t.m[k]
	if ok && !now.Before(e.until) {
		delete(t.m, k)
		ok = false
	}
	t.mu.Unlock()
	if !ok {
		return v, false
	}
	return e.v, true
}

// Put remembers v for room and hash h (32 bytes) until until; nothing
// when until has passed.
func (t *Memory[V]) Put(room string, h []byte, v V, until time.Time) {
	if !time.Now().Before(until) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil || len(t.m) >= maxEntries {
		t.m = map[key]entry[V]{}
	}
	t.m[key{room: room, hash: [32]byte(h)}] = entry[V]{v: v, until: until}
}

// Forget drops what is remembered for room and h (nothing for a hash
// that is not 32 bytes).
func (t *Memory[V]) Forget(room string, h []byte) {
	if len(h) != 32 {
		return
	}
	t.mu.Lock()
	delete(t.m, key{room: room, hash: [32]byte(h)})
	t.mu.Unlock()
}
