// Package readcache keeps the newest version of a bounded number of
// values, each named by a key and a sequence number. It makes the read
// path fast: an unchanged room is read from the snapshot this process
// already holds instead of from its rows (substrate/snapshot.go owns it;
// substrate/readpath.go's readRoomCached is the read it serves).
//
// It decides nothing of what a reader sees. The core computes the key
// (which incarnation of which room), the sequence number a read must
// match (the room's seq read in the reader's own statement) and, once a
// value is returned, whether it is ready for that read; the cache only
// stores what the core put and returns it for the exact key and sequence
// number it was put under.
package readcache

import "sync"

// Cache holds at most a bound of keys, each with the newest value put for it.
// The zero Cache is not usable; New makes one.
type Cache[V any] struct {
	mu      sync.Mutex
	entries map[string]entry[V]
	max     int
}

type entry[V any] struct {
	seq int64
	v   V
}

// New is a cache of at most n keys (at least one).
func New[V any](n int) *Cache[V] {
	return &Cache[V]{entries: map[string]entry[V]{}, max: max(1, n)}
}

// Get is the value put for key at seq; ok is false when the cache holds
// none, or holds the key at another sequence number.
func (c *Cache[V]) Get(key string, seq int64) (v V, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, found := c.entries[key]; found && e.seq == seq {
		return e.v, true
	}
	return v, false
}

// Put keeps v as key's value at seq, unless the cache holds the key at a
// later sequence number already (a slow writer never replaces a newer
// version). Full, it forgets one arbitrary key first.
func (c *Cache[V]) Put(key string, seq int64, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, found := c.entries[key]; found && old.seq > seq {
		return
	}
	if len(c.entries) >= c.max {
		for k := range c.entries {
			delete(c.entries, k)
			break
		}
	}
	c.entries[key] = entry[V]{seq: seq, v: v}
}

// Len is the number of keys held.
func (c *Cache[V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
