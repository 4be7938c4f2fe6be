package substrate

import (
	"encoding/json"
	"time"

	"github.com/syncsubstrate/sync/substrate/defs"
)

// timerState is a started timer as stored in the timer_* columns.
type timerState struct {
	JSON      json.RawMessage
	ExpiresAt *time.Time
	TicksLeft *int64
	TickOn    *string
	Effect    *string
	StartedAt *time.Time
}

// startTimer turns a timer definition into its running state at now.
func startTimer(t *Timer, now time.Time) *timerState {
	raw, _ := json.Marshal(t)
	ts := &timerState{JSON: raw, Effect: &t.Effect, StartedAt: &now}
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

func (ts *timerState) expired(now time.Time) bool {
	if ts.ExpiresAt != nil && !now.Before(*ts.ExpiresAt) {
		return true
	}
	return ts.TicksLeft != nil && *ts.TicksLeft <= 0
}

// live reports whether the item is visible at now.
func (ts *timerState) live(now time.Time) bool {
	if ts == nil || ts.Effect == nil {
		return true
	}
	if *ts.Effect == "enable" {
		return ts.expired(now)
	}
	return !ts.expired(now)
}

// nextChange is when the timer next changes visibility by the clock alone
// (zero if never).
func (ts *timerState) nextChange(now time.Time) time.Time {
	if ts == nil || ts.ExpiresAt == nil || !now.Before(*ts.ExpiresAt) {
		return time.Time{}
	}
	return *ts.ExpiresAt
}

// describeCooldown is an action's cooldown as shown to clients: until
// when (or for how many ticks) the action cannot be invoked, without the
// timer mechanics behind it (an entry that deletes itself).
func (ts *timerState) describeCooldown(now time.Time) map[string]any {
	d := ts.describe(now)
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

// describe is the timer as shown to clients: its definition plus what is
// left of it.
func (ts *timerState) describe(now time.Time) map[string]any {
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
