// Package viewmemo keeps the values of views the core evaluated for one
// room state, so that every reader of an unchanged room shares one
// evaluation of a view whose value is the same for all of them: a
// context read's views (substrate/views.go) and the views the lobby
// shows every lister (substrate/lobbyops.go's PublicView), kept on the
// liveState of substrate/snapshot.go.
//
// It decides nothing a reader sees. Which views may be shared, and what
// decides their value (the view, which evaluation made it, the message
// count it saw), are the core's: the core builds the key and evaluates
// the value, and this package only stores the value under that key,
// within bounds: a number of values, and their size in all, bounded by
// the size of the room state itself (a view reading messages.count is
// kept once per count, which messages' timers change one after the other
// without a new state). A value past the bounds is not kept, and the
// core evaluates it per read, as without the memo.
package viewmemo

import "sync"

// MaxEntries bounds the values one state keeps.
const MaxEntries = 4096

// MinNodes is what the values one state keeps may hold in all (Nodes)
// however small the state: see allowed.
const MinNodes = 1 << 14

// allowed is how many nodes the values kept for a state of size live
// entries may hold in all: as many as the state has, or MinNodes. A
// value is a copy of what a view returned; a view returning a whole
// scope, kept per message count, would otherwise keep a copy of the
// scope per count (substrate's TestAttackViewMemoDoesNotMultiplyTheRoom).
func allowed(size int) int { return max(size, MinNodes) }

// Memo keeps one value per key. The zero value is empty and ready; it is
// safe for concurrent use. Values are shared between readers: the core
// keeps them read-only.
type Memo[K comparable, V any] struct {
	mu    sync.Mutex
	m     map[K]V
	nodes int // what the kept values hold in all
}

// Get returns the value kept under k.
func (m *Memo[K, V]) Get(k K) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[k]
	return v, ok
}

// Keep keeps v, of nodes nodes (Nodes of what it holds), under k unless
// a value is kept there already, MaxEntries are kept, or it would take
// the values kept past what a state of size live entries allows. It
// reports whether v was kept.
func (m *Memo[K, V]) Keep(k K, v V, nodes, size int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.m[k]; dup || len(m.m) >= MaxEntries || m.nodes+nodes > allowed(size) {
		return false
	}
	if m.m == nil {
		m.m = map[K]V{}
	}
	m.m[k] = v
	m.nodes += nodes
	return true
}

// Nodes counts a value's nodes: one for it, and those of each element of
// a list or entry of a map (what copying it costs).
func Nodes(v any) int {
	n := 1
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			n += Nodes(e)
		}
	case []any:
		for _, e := range x {
			n += Nodes(e)
		}
	}
	return n
}
