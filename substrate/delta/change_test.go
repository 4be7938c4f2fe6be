package delta_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/substrate/delta"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/timer"
)

func TestRecord(t *testing.T) {
	gate, old := "state._shared.open", "false"
	del := "delete"
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	seven := int64(7)
	after := delta.Version{Scope: "ann", Key: "k", Value: json.RawMessage(`2`), Version: 2, Revision: 9}
	prev := delta.Version{Scope: "ann", Key: "k", Value: json.RawMessage(`1`), Version: 1, Revision: 4, SortKey: &seven}
	big := json.RawMessage(`"` + strings.Repeat("x", delta.ValueCap) + `"`)
	for _, c := range []struct {
		name    string
		after   delta.Version
		before  *delta.Before
		deleted bool
		memory  string
		check   func(delta.Change) bool
	}{
		{name: "new entry", after: after,
			check: func(d delta.Change) bool {
				return d.Before == nil && d.VersionBefore == 0 && d.RevisionBefore == 0 && string(d.After) == "2" && d.VersionAfter == 2
			}},
		{name: "replaced", after: after, before: &delta.Before{Version: prev, Live: true},
			check: func(d delta.Change) bool {
				return string(d.Before) == "1" && d.VersionBefore == 1 && d.RevisionBefore == 4 && d.SortKey != nil && *d.SortKey == 7
			}},
		{name: "replaced an entry not live", after: after, before: &delta.Before{Version: prev},
			check: func(d delta.Change) bool { return d.Before == nil && d.VersionBefore == 0 && d.RevisionBefore == 4 }},
		{name: "deleted", after: delta.Version{Scope: "ann", Key: "k"}, before: &delta.Before{Version: delta.Version{Value: json.RawMessage(`1`), Version: 1, Gate: &old}, Live: true}, deleted: true,
			check: func(d delta.Change) bool { return d.After == nil && d.VersionAfter == 0 && d.Gated && d.Gate == old }},
		{name: "gated after", after: delta.Version{Scope: "ann", Key: "k", Value: json.RawMessage(`1`), Version: 1, Gate: &gate}, before: &delta.Before{Version: delta.Version{Gate: &old}, Live: true},
			check: func(d delta.Change) bool { return d.Gated && d.Gate == gate }},
		{name: "timer", after: delta.Version{Value: json.RawMessage(`1`), Timer: &timer.State{Effect: &del, ExpiresAt: &at}},
			check: func(d delta.Change) bool {
				return d.Timer != nil && d.Timer.Effect == "delete" && d.Timer.ExpiresAt.Equal(at)
			}},
		{name: "memory", after: after, before: &delta.Before{Version: prev, Live: true}, memory: "loom memory",
			check: func(d delta.Change) bool {
				return strings.Contains(string(d.Before), "loom memory") && strings.Contains(string(d.After), "loom memory") && d.VersionAfter == 2
			}},
		{name: "capped", after: delta.Version{Value: big, Version: 1},
			check: func(d delta.Change) bool { return strings.Contains(string(d.After), "_truncated") }},
	} {
		if d := delta.Record(c.after, c.before, c.deleted, c.memory); !c.check(d) {
			b, _ := json.Marshal(d)
			t.Errorf("%s: recorded %s", c.name, b)
		}
	}
}

func TestTimerLive(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var none *delta.Timer
	for _, c := range []struct {
		name string
		t    *delta.Timer
		at   time.Time
		want bool
	}{
		{"no timer", none, at, true},
		{"delete before", &delta.Timer{Effect: "delete", ExpiresAt: &at}, at.Add(-time.Second), true},
		{"delete after", &delta.Timer{Effect: "delete", ExpiresAt: &at}, at, false},
		{"enable before", &delta.Timer{Effect: "enable", ExpiresAt: &at}, at.Add(-time.Second), false},
		{"enable after", &delta.Timer{Effect: "enable", ExpiresAt: &at}, at.Add(time.Second), true},
	} {
		if got := c.t.Live(c.at); got != c.want {
			t.Errorf("%s: live %v, want %v", c.name, got, c.want)
		}
	}
	if none.Describe(at) != nil {
		t.Error("no timer described")
	}
}

func TestTimeout(t *testing.T) {
	for _, c := range []struct {
		asked, want time.Duration
		capped      bool
	}{
		{0, 30 * time.Second, false},
		{-1, 30 * time.Second, false},
		{time.Second, time.Second, false},
		{time.Minute, time.Minute, false},
		{time.Hour, time.Minute, true},
	} {
		got, note := delta.Timeout(c.asked, 30*time.Second, time.Minute)
		if got != c.want || (note != "") != c.capped {
			t.Errorf("Timeout(%v) = %v, %q; want %v, capped %v", c.asked, got, note, c.want, c.capped)
		}
	}
}

func TestMarksOf(t *testing.T) {
	agents := []envelope.Presence{{ID: "bob", ContextReads: 9}, {ID: "ann", ContextReads: 2, LastContextSeq: 5, LastSeenSeq: 3}}
	if m := delta.MarksOf(agents, "ann"); m == nil || *m != (delta.Marks{ContextReads: 2, LastContextSeq: 5, LastSeenSeq: 3}) {
		t.Errorf("ann's marks %+v", m)
	}
	if m := delta.MarksOf(agents, "cat"); m != nil {
		t.Errorf("marks %+v for an agent not in the room", m)
	}
}
