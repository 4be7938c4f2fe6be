package timer_test

import (
	"testing"
	"time"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/timer"
)

func TestLiveAndNextChange(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	later := now.Add(time.Minute)
	for _, c := range []struct {
		name       string
		def        defs.Timer
		at         time.Time
		live       bool
		nextChange time.Time
	}{
		{name: "delete, running", def: defs.Timer{MS: 60000, Effect: "delete"}, at: now, live: true, nextChange: later},
		{name: "delete, run out", def: defs.Timer{MS: 60000, Effect: "delete"}, at: later, live: false},
		{name: "enable, running", def: defs.Timer{MS: 60000, Effect: "enable"}, at: now, live: false, nextChange: later},
		{name: "enable, run out", def: defs.Timer{MS: 60000, Effect: "enable"}, at: later.Add(time.Second), live: true},
		{name: "at", def: defs.Timer{At: later.Format(time.RFC3339), Effect: "delete"}, at: now, live: true, nextChange: later},
		{name: "ticks left", def: defs.Timer{Ticks: 2, Effect: "delete"}, at: later, live: true},
		{name: "no ticks left", def: defs.Timer{Ticks: 0, Effect: "delete"}, at: now, live: false},
	} {
		ts := timer.Start(&c.def, now)
		if got := ts.Live(c.at); got != c.live {
			t.Errorf("%s: live %v, want %v", c.name, got, c.live)
		}
		if got := ts.NextChange(c.at); !got.Equal(c.nextChange) {
			t.Errorf("%s: next change %v, want %v", c.name, got, c.nextChange)
		}
	}
	var none *timer.State
	if !none.Live(now) || !none.NextChange(now).IsZero() || none.Describe(now) != nil {
		t.Error("no timer: always live, never changes, not described")
	}
}

func TestDescribeCooldown(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	d := timer.Start(&defs.Timer{MS: 1500, Effect: "delete"}, now).DescribeCooldown(now)
	if _, ok := d["effect"]; ok || d["until"] == nil || d["expires_at"] != nil || d["ms_left"] != int64(1500) {
		t.Errorf("cooldown shown as %v", d)
	}
}

func TestEarliest(t *testing.T) {
	a, b := time.Unix(10, 0), time.Unix(20, 0)
	for _, c := range []struct{ x, y, want time.Time }{
		{a, b, a}, {b, a, a}, {time.Time{}, b, b}, {a, time.Time{}, a}, {time.Time{}, time.Time{}, time.Time{}},
	} {
		if got := timer.Earliest(c.x, c.y); !got.Equal(c.want) {
			t.Errorf("Earliest(%v, %v) = %v, want %v", c.x, c.y, got, c.want)
		}
	}
}
