package substrate

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// Timer is a lifecycle on a state entry, an action or a view (seed 001
// §State; reference §4.4). Exactly one clock: ms after it is set, an
// absolute time, or a number of ticks (writes to tick_on). With effect
// "delete" (the default) the item is live until the clock runs out; with
// "enable" it is dormant until then.
type Timer struct {
	MS     int64  `json:"ms,omitempty"`
	At     string `json:"at,omitempty"`
	Ticks  int64  `json:"ticks,omitempty"`
	TickOn string `json:"tick_on,omitempty"`
	Effect string `json:"effect,omitempty"`
}

// maxTimer bounds timers so that a typo cannot make something immortal in
// all but name.
const maxTimer = 366 * 24 * time.Hour

func (t *Timer) validate(field string) error {
	bad := func(f string, a ...any) error {
		return errs.New(errs.InvalidField, "%s: "+f, append([]any{field}, a...)...).
			WithHint(`give exactly one clock: {"ms": 60000}, {"at": "2026-01-02T15:04:05Z"} or {"ticks": 3, "tick_on": "_shared.turn"}, and optionally "effect": "delete" or "enable"`)
	}
	clocks := 0
	if t.MS != 0 {
		clocks++
		if t.MS < 0 || time.Duration(t.MS)*time.Millisecond > maxTimer {
			return bad("ms must be between 1 and %d", maxTimer.Milliseconds())
		}
	}
	if t.At != "" {
		clocks++
		if _, err := time.Parse(time.RFC3339, t.At); err != nil {
			return bad("at %q is not an RFC 3339 time", t.At)
		}
	}
	if t.Ticks != 0 || t.TickOn != "" {
		clocks++
		if t.Ticks <= 0 || t.TickOn == "" {
			return bad("ticks needs a positive count and tick_on naming <scope>.<key>")
		}
		if !strings.Contains(normalizeTickOn(t.TickOn), ".") {
			return bad("tick_on %q must name <scope>.<key>", t.TickOn)
		}
	}
	if clocks != 1 {
		return bad("has %d clocks", clocks)
	}
	switch t.Effect {
	case "":
		t.Effect = "delete"
	case "delete", "enable":
	default:
		return bad("effect %q is not delete or enable", t.Effect)
	}
	return nil
}

// normalizeTickOn accepts "state.<scope>.<key>" and "<scope>.<key>".
func normalizeTickOn(s string) string { return strings.TrimPrefix(s, "state.") }

// timerState is a started timer as stored in the timer_* columns.
type timerState struct {
	JSON      json.RawMessage
	ExpiresAt *time.Time
	TicksLeft *int64
	TickOn    *string
	Effect    *string
	StartedAt *time.Time
}

// start turns a timer definition into its running state at now.
func (t *Timer) start(now time.Time) *timerState {
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
		n, on := t.Ticks, normalizeTickOn(t.TickOn)
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
