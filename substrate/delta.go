package substrate

// The write path records, in every mutation's _audit entry, the state
// delta it made (seed 000 §7.7): the trajectory, a key's history and
// the replay (substrate/trajectory) read them back through AuditPage and
// KeyLog.

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate/delta"
	"github.com/syncsubstrate/sync/substrate/timer"
)

// DeltaValueCap is the most a delta stores of one value (delta.ValueCap).
const DeltaValueCap = delta.ValueCap

// Delta is one entry a mutation changed: its value and version before
// and after. Before is absent when the entry did not exist (or was not
// live: its timer had run out); After is absent when the mutation deleted
// it. An append entry has SortKey and no before.
type Delta struct {
	Scope         string          `json:"scope"`
	Key           string          `json:"key"`
	SortKey       *int64          `json:"sort_key,omitempty"`
	Before        json.RawMessage `json:"before,omitempty"`
	After         json.RawMessage `json:"after,omitempty"`
	VersionBefore int64           `json:"version_before"`
	VersionAfter  int64           `json:"version_after"`
	// RevisionBefore is the seq of the mutation that wrote the row this
	// one replaced (0: there was none), linking a key's versions.
	RevisionBefore int64 `json:"revision_before,omitempty"`
	// Timer is the entry's lifecycle after the write, when it has one.
	Timer *DeltaTimer `json:"timer,omitempty"`
	// Gated: the entry had an enabled expression after the write (before
	// it, for a delete), so its values are not everyone's to read back.
	Gated bool `json:"gated,omitempty"`
	// Gate is that enabled expression: a key's history shows a gated
	// version to a reader the current gate admits only when it was the
	// same gate (another may have hidden it from them).
	Gate string `json:"gate,omitempty"`
}

// DeltaTimer is a written entry's timer as stored: what a replay needs to
// decide whether the entry is live at a later seq.
type DeltaTimer struct {
	Effect    string     `json:"effect"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	TicksLeft *int64     `json:"ticks_left,omitempty"`
	TickOn    *string    `json:"tick_on,omitempty"`
}

// prior is a row as a mutation first read it.
type prior struct {
	r    *row
	live bool
}

// notePrior remembers the rows a mutation read before it changes them:
// the first read of an entry wins, so a delta spans the whole mutation.
func (m *mutation) notePrior(cur map[entryKey]*row, live func(*row) *row) {
	if len(cur) == 0 {
		return
	}
	if m.before == nil {
		m.before = make(map[entryKey]prior, len(cur))
	}
	for k, r := range cur {
		if _, seen := m.before[k]; !seen {
			m.before[k] = prior{r: r, live: live(r) != nil}
		}
	}
}

// delta is the change the pending writes make, in write order. It costs
// no statement: the old rows were read to compute the writes.
func (m *mutation) delta() []Delta {
	out := make([]Delta, 0, len(m.pending))
	for _, w := range m.pending {
		r := w.r
		d := Delta{Scope: r.Scope, Key: r.Key, SortKey: r.SortKey}
		if b, ok := m.before[entryKey{r.Scope, r.Key}]; ok && b.r != nil {
			d.RevisionBefore = b.r.Revision
			if b.live {
				d.Before, d.VersionBefore = delta.Capped(b.r.Value), b.r.Version
			}
			if d.SortKey == nil {
				d.SortKey = b.r.SortKey
			}
		}
		if w.del {
			if b, ok := m.before[entryKey{r.Scope, r.Key}]; ok && b.r != nil && b.r.enabled != nil {
				d.Gated, d.Gate = true, *b.r.enabled
			}
		} else {
			if r.enabled != nil {
				d.Gated, d.Gate = true, *r.enabled
			}
			d.After, d.VersionAfter = delta.Capped(r.Value), r.Version
			if t := r.timer; t != nil && t.Effect != nil {
				d.Timer = &DeltaTimer{Effect: *t.Effect, ExpiresAt: t.ExpiresAt, TicksLeft: t.TicksLeft, TickOn: t.TickOn}
			}
		}
		if what := memoryOf(r.Scope, r.Key); what != "" {
			d.Before, d.After = delta.Redacted(d.Before, what), delta.Redacted(d.After, what)
		}
		out = append(out, d)
	}
	return out
}

// Operational memory (reservedMemory): keys of an agent's own scope
// that a feature keeps for that agent alone (the loom's loom:…: trace,
// pins, stashes, thoughts). The audit records that such an entry
// changed, never what it holds (a replay restores its shape, not its
// text), whether or not the Service wires the feature.

// MemoryOf is what the entry is when it is a feature's operational memory
// (reservedMemory: "loom memory"), "" when it is not: pages fold such
// entries away with the room's other internals.
func MemoryOf(scope, key string) string { return memoryOf(scope, key) }

// memoryOf is what the entry is when it is operational memory ("" when
// it is not).
func memoryOf(scope, key string) string {
	if strings.HasPrefix(scope, "_") {
		return ""
	}
	for prefix, r := range reservedMemory {
		if strings.HasPrefix(key, prefix) {
			return r.What
		}
	}
	return ""
}

// capAny is an action's result as the audit stores it.
func capAny(v any) json.RawMessage { return delta.CappedAny(v) }

// timerState is a row's started timer (package timer has its rule); the
// core's files read it through these.
type timerState timer.State

// startTimer turns a timer definition into its running state at now.
func startTimer(t *Timer, now time.Time) *timerState { return (*timerState)(timer.Start(t, now)) }

// live reports whether the item is visible at now.
func (ts *timerState) live(now time.Time) bool { return (*timer.State)(ts).Live(now) }

// nextChange is when the timer next changes visibility by the clock alone
// (zero if never).
func (ts *timerState) nextChange(now time.Time) time.Time { return (*timer.State)(ts).NextChange(now) }

// describe is the timer as shown to clients; describeCooldown an
// action's cooldown.
func (ts *timerState) describe(now time.Time) map[string]any { return (*timer.State)(ts).Describe(now) }

func (ts *timerState) describeCooldown(now time.Time) map[string]any {
	return (*timer.State)(ts).DescribeCooldown(now)
}
