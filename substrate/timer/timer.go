// Package timer is a started timer's rule: what a timer definition
// (defs.Timer) becomes when an entry, action or view is written with it,
// when it hides or shows what it is on, when that next changes by the
// clock alone, and how it is shown to clients. The core stores it in the
// timer_* columns and reads it back; this package sees only the timer.
package timer

import (
	"encoding/json"
	"time"

	"github.com/syncsubstrate/sync/substrate/defs"
)

// State is a started timer as stored in the timer_* columns.
type State struct {
	JSON      json.RawMessage
	ExpiresAt *time.Time
	TicksLeft *int64
	TickOn    *string
	Effect    *string
	StartedAt *time.Time
}

// Start turns a timer definition into its running state at now.
func Start(t *defs.Timer, now time.Time) *State {
	raw, _ := json.Marshal(t)
	ts := &State{JSON: raw, Effect: &t.Effect, StartedAt: &now}
	switch {
	case t.MS != 0:
		at := now.Add(time.Duration(t.MS) * time.Millisecond)
		ts.ExpiresAt = &at
	case t.At != "":
		at, _ := time.Parse(time.RFC3339, t.At)
		ts.ExpiresAt = &at
	default:
		n, on := t.Ticks, defs.NormalizeTickOn(t.TickOn)
		ts.TicksLeft, ts.TickOn = &n, &on
	}
	return ts
}

// Expired reports whether the timer has run out at now.
func (ts *State) Expired(now time.Time) bool {
	if ts.ExpiresAt != nil && !now.Before(*ts.ExpiresAt) {
		return true
	}
	return ts.TicksLeft != nil && *ts.TicksLeft <= 0
}

// Live reports whether the item is visible at now.
func (ts *State) Live(now time.Time) bool {
	if ts == nil || ts.Effect == nil {
		return true
	}
	if *ts.Effect == "enable" {
		return ts.Expired(now)
	}
	return !ts.Expired(now)
}

// Enables reports whether the timer shows its item when it runs out.
func (ts *State) Enables() bool { return ts != nil && ts.Effect != nil && *ts.Effect == "enable" }

// NextChange is when the timer next changes visibility by the clock alone
// (zero if never).
func (ts *State) NextChange(now time.Time) time.Time {
	if ts == nil || ts.ExpiresAt == nil || !now.Before(*ts.ExpiresAt) {
		return time.Time{}
	}
	return *ts.ExpiresAt
}

// DescribeCooldown is an action's cooldown as shown to clients: until
// when (or for how many ticks) the action cannot be invoked, without the
// timer mechanics behind it (an entry that deletes itself).
func (ts *State) DescribeCooldown(now time.Time) map[string]any {
	d := ts.Describe(now)
	if d == nil {
		return nil
	}
	delete(d, "effect")
	if at, ok := d["expires_at"]; ok {
		delete(d, "expires_at")
		d["until"] = at
	}
	return d
}

// Describe is the timer as shown to clients: its definition plus what is
// left of it.
func (ts *State) Describe(now time.Time) map[string]any {
	if ts == nil || ts.Effect == nil {
		return nil
	}
	d := map[string]any{"effect": *ts.Effect}
	if ts.ExpiresAt != nil {
		d["expires_at"] = ts.ExpiresAt.UTC().Format(time.RFC3339Nano)
		if left := ts.ExpiresAt.Sub(now); left > 0 {
			d["ms_left"] = left.Milliseconds()
		}
	}
	if ts.TicksLeft != nil {
		d["ticks_left"] = *ts.TicksLeft
		d["tick_on"] = *ts.TickOn
	}
	return d
}

// Earliest is the earlier of two moments, zero standing for none.
func Earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}
