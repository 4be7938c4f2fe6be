// Package buildcache keeps, for one room state, what the core's read
// rules computed per reader authority, so that readers with the same
// authority share one computation: whole context builds (Builds, for
// substrate/snapshot.go's buildShared) and the results of entry-level
// `enabled` gates (Gates, for substrate/roomctx.go's gate pass, kept on
// the liveState of substrate/snapshot.go).
//
// It decides nothing a reader sees. The core computes the key (who the
// reader is, the scopes it reads and what the read rules hide within
// them) and the value; this package only stores the value under that
// key, within bounds: a number of authorities, and a number of entries
// in all, bounded by the size of the room itself (authorities are free
// to make, the room's size is what its writers paid for). A value past
// the bounds is not kept, and the core computes it per read, as without
// the cache.
package buildcache

import (
	"reflect"
	"sync"
	"unsafe"
)

// MaxAuthorities bounds the authorities one state keeps builds, or gate
// results, for.
const MaxAuthorities = 256

// MinEntries is what the values one state keeps may hold in all (copied
// entries of builds; gate results) however small the state: see allowed.
const MinEntries = 4096

// allowed is how many entries the values kept for a state of size live
// entries may hold in all: as many as the state has, or MinEntries.
func allowed(size int) int { return max(size, MinEntries) }

// Builds keeps one value per authority key. The zero value is empty and
// ready; it is safe for concurrent use. Values are shared between readers:
// the core keeps them read-only.
type Builds[V any] struct {
	mu     sync.Mutex
	m      map[string]V
	copies int // the entries the kept values hold in maps of their own
}

// Get returns the value kept under key.
func (b *Builds[V]) Get(key string) (V, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[key]
	return v, ok
}

// Keep keeps v under key unless a value is kept there already, MaxAuthorities
// are kept, or its copies (entries held in maps the state does not own:
// Copied) would take the kept values past what a state of size live
// entries allows. It reports whether v was kept.
func (b *Builds[V]) Keep(key string, v V, copies, size int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]V{}
	}
	if _, dup := b.m[key]; dup || len(b.m) >= MaxAuthorities || b.copies+copies > allowed(size) {
		return false
	}
	b.m[key] = v
	b.copies += copies
	return true
}

// Copied counts the entries of states held in maps that are not own's:
// what a kept value adds to memory beyond the state it was computed
// from. A map several states share counts once.
func Copied(own map[string]map[string]any, states ...map[string]any) int {
	owned := make(map[unsafe.Pointer]bool, len(own))
	for _, m := range own {
		owned[reflect.ValueOf(m).UnsafePointer()] = true
	}
	seen := map[unsafe.Pointer]bool{}
	n := 0
	for _, st := range states {
		for _, v := range st {
			m, ok := v.(map[string]any)
			if !ok {
				continue
			}
			ptr := reflect.ValueOf(m).UnsafePointer()
			if owned[ptr] || seen[ptr] {
				continue
			}
			seen[ptr] = true
			n += len(m)
		}
	}
	return n
}

// Gates keeps, per authority key, results per item R (an entry): those
// that depend on nothing that changes without a new state (Results,
// KeepResults), and those valid for one time quantum (Timed, KeepTimed).
// The zero value is empty and ready; it is safe for concurrent use. The
// maps it returns are shared: read-only.
type Gates[R comparable, V any] struct {
	mu      sync.Mutex
	pure    map[string]map[R]V
	timed   map[string]quantum[R, V]
	entries int // the results pure and timed hold
}

// quantum is results valid during quantum q.
type quantum[R comparable, V any] struct {
	q   int64
	res map[R]V
}

// Results returns the results kept for key (nil when none).
func (g *Gates[R, V]) Results(key string) map[R]V {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pure[key]
}

// Timed returns the results kept for key in quantum q (nil when none).
func (g *Gates[R, V]) Timed(key string, q int64) map[R]V {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t, ok := g.timed[key]; ok && t.q == q {
		return t.res
	}
	return nil
}

// full reports whether fresh results for a new key (or more for a kept
// one) are past the bounds for a state of size live entries; mu is held.
func (g *Gates[R, V]) full(known bool, authorities, fresh, size int) bool {
	return !known && authorities >= MaxAuthorities || g.entries+fresh > allowed(size)
}

// KeepResults keeps fresh results for key alongside those already kept,
// unless that takes the results past the bounds for a state of size
// live entries.
func (g *Gates[R, V]) KeepResults(key string, fresh map[R]V, size int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.pure[key]
	if g.full(old != nil, len(g.pure), len(fresh), size) {
		return
	}
	g.entries += len(fresh)
	m := make(map[R]V, len(old)+len(fresh))
	for r, v := range old {
		m[r] = v
	}
	for r, v := range fresh {
		m[r] = v
	}
	if g.pure == nil {
		g.pure = map[string]map[R]V{}
	}
	g.pure[key] = m
}

// KeepTimed keeps fresh results for key in quantum q, replacing those of
// an earlier quantum. Past the bounds, the quanta that are over go first
// (rather than refuse new readers for the state's lifetime).
func (g *Gates[R, V]) KeepTimed(key string, q int64, fresh map[R]V, size int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	old, ok := g.timed[key]
	if g.full(ok, len(g.timed), len(fresh), size) {
		for k, t := range g.timed {
			if t.q != q {
				g.entries -= len(t.res)
				delete(g.timed, k)
			}
		}
		old, ok = g.timed[key]
		if g.full(ok, len(g.timed), len(fresh), size) {
			return
		}
	}
	m := make(map[R]V, len(fresh))
	if ok && old.q == q {
		for r, v := range old.res {
			m[r] = v
		}
	}
	for r, v := range fresh {
		m[r] = v
	}
	if g.timed == nil {
		g.timed = map[string]quantum[R, V]{}
	}
	if ok {
		g.entries -= len(old.res)
	}
	g.entries += len(m)
	g.timed[key] = quantum[R, V]{q: q, res: m}
}
