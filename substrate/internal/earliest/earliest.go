// Package earliest keeps the earliest of the moments noted by concurrent
// reads: when what a live reader was shown next changes by the clock
// alone (substrate/wait.go's Foresight). Which moments count (the
// timers of what the reader may see) is the core's rule; this only keeps
// the least of them.
package earliest

import (
	"sync"
	"time"
)

// Moment is the earliest moment noted (zero: none). The zero value is
// ready; it is safe for concurrent use.
type Moment struct {
	mu sync.Mutex
	t  time.Time
}

// Note notes t (a zero t notes nothing).
func (m *Moment) Note(t time.Time) {
	if t.IsZero() {
		return
	}
	m.mu.Lock()
	if m.t.IsZero() || t.Before(m.t) {
		m.t = t
	}
	m.mu.Unlock()
}

// Get is the earliest moment noted (zero: none).
func (m *Moment) Get() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.t
}
