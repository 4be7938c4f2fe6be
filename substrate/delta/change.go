package delta

import (
	"encoding/json"
	"time"

	"github.com/syncsubstrate/sync/substrate/timer"
)

// Change is one entry a mutation changed, as its _audit entry records it
// (the core's Delta): its value and version before and after. Before is
// absent when the entry did not exist (or was not live: its timer had run
// out); After is absent when the mutation deleted it. An append entry has
// SortKey and no before.
type Change struct {
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
	Timer *Timer `json:"timer,omitempty"`
	// Gated: the entry had an enabled expression after the write (before
	// it, for a delete), so its values are not everyone's to read back.
	Gated bool `json:"gated,omitempty"`
	// Gate is that enabled expression: a key's history shows a gated
	// version to a reader the current gate admits only when it was the
	// same gate (another may have hidden it from them).
	Gate string `json:"gate,omitempty"`
}

// Timer is a written entry's timer as stored: what a replay needs to
// decide whether the entry is live at a later seq.
type Timer struct {
	Effect    string     `json:"effect"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	TicksLeft *int64     `json:"ticks_left,omitempty"`
	TickOn    *string    `json:"tick_on,omitempty"`
}

// Version is a row as a record reads it: the one a write left, or the
// one it replaced.
type Version struct {
	Scope, Key string
	SortKey    *int64
	Value      json.RawMessage
	Version    int64
	Revision   int64
	Gate       *string // the enabled expression (nil: none)
	Timer      *timer.State
}

// Before is the version a mutation replaced, as it first read it: Live
// is false when its timer had run out (it was not there to be seen).
type Before struct {
	Version
	Live bool
}

// Record is the change one write made: after is the row written (for a
// delete, the row's key), before the one it replaced (nil: none), memory
// what the entry is when it is operational memory ("" when it is not:
// then its values are recorded, capped at ValueCap, else only their
// sizes).
func Record(after Version, before *Before, deleted bool, memory string) Change {
	d := Change{Scope: after.Scope, Key: after.Key, SortKey: after.SortKey}
	if before != nil {
		d.RevisionBefore = before.Revision
		if before.Live {
			d.Before, d.VersionBefore = Capped(before.Value), before.Version.Version
		}
		if d.SortKey == nil {
			d.SortKey = before.SortKey
		}
	}
	if deleted {
		if before != nil && before.Gate != nil {
			d.Gated, d.Gate = true, *before.Gate
		}
	} else {
		if after.Gate != nil {
			d.Gated, d.Gate = true, *after.Gate
		}
		d.After, d.VersionAfter = Capped(after.Value), after.Version
		if t := after.Timer; t != nil && t.Effect != nil {
			d.Timer = &Timer{Effect: *t.Effect, ExpiresAt: t.ExpiresAt, TicksLeft: t.TicksLeft, TickOn: t.TickOn}
		}
	}
	if memory != "" {
		d.Before, d.After = Redacted(d.Before, memory), Redacted(d.After, memory)
	}
	return d
}

// state is t as a running timer.
func (t *Timer) state() *timer.State {
	if t == nil {
		return nil
	}
	eff := t.Effect
	return &timer.State{Effect: &eff, ExpiresAt: t.ExpiresAt, TicksLeft: t.TicksLeft, TickOn: t.TickOn}
}

// Live reports whether an entry with timer t shows at time at (nil: it
// has no timer, always).
func (t *Timer) Live(at time.Time) bool { return t.state().Live(at) }

// Describe is timer t as a state read shows it at time at (nil: none).
func (t *Timer) Describe(at time.Time) map[string]any { return t.state().Describe(at) }
