package write_test

import (
	"encoding/json"
	"testing"

	"github.com/syncsubstrate/sync/substrate/write"
)

func TestWithheld(t *testing.T) {
	n := json.Number("1")
	ops := []write.Op{
		{Scope: "ann", Key: "set", Value: json.RawMessage(`1`)},
		{Scope: "ann", Key: "merged", Merge: json.RawMessage(`{}`)},
		{Scope: "ann", Key: "added", Increment: &n},
		{Scope: "ann", Key: "gone", Delete: true},
		// Set, then merged: the response shows what the writer did not
		// give whole.
		{Scope: "ann", Key: "both", Value: json.RawMessage(`{}`)},
		{Scope: "ann", Key: "both", Merge: json.RawMessage(`{"a":1}`)},
	}
	withheld := write.Withheld(ops)
	for _, c := range []struct {
		key   string
		gated bool
		want  bool
	}{
		{"set", true, false},
		{"merged", true, true},
		{"merged", false, false},
		{"added", true, true},
		{"gone", true, false},
		{"both", true, true},
		{"unwritten", true, false},
	} {
		if got := withheld("ann", c.key, c.gated); got != c.want {
			t.Errorf("withheld(%s, gated %v) = %v, want %v", c.key, c.gated, got, c.want)
		}
	}
}

func TestShown(t *testing.T) {
	e := write.Entry{Scope: "ann", Key: "k", Value: json.RawMessage(`1`), Version: 2}
	if got := write.Shown(e, true); got.Value != nil || !got.Withheld {
		t.Errorf("withheld entry shown as %+v", got)
	}
	if got := write.Shown(e, false); string(got.Value) != "1" || got.Withheld {
		t.Errorf("entry shown as %+v", got)
	}
	e.Version, e.Value = 0, nil
	if got := write.Shown(e, true); got.Withheld {
		t.Errorf("deleted entry marked withheld: %+v", got)
	}
}
