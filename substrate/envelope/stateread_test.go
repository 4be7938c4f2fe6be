package envelope_test

import (
	"testing"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/write"
)

func TestCheckReadQuery(t *testing.T) {
	ann := &authority.Principal{Kind: authority.KindAgent, RoomID: "r", AgentID: "ann", Grants: []string{"bob"}}
	for _, c := range []struct {
		name    string
		q       envelope.ReadQuery
		scope   string
		limit   int
		refused errs.Code
	}{
		{name: "default page", q: envelope.ReadQuery{}, limit: 100},
		{name: "page capped", q: envelope.ReadQuery{Limit: 900}, limit: 500},
		{name: "page kept", q: envelope.ReadQuery{Limit: 7}, limit: 7},
		{name: "self resolved", q: envelope.ReadQuery{Scope: "self"}, scope: "ann", limit: 100},
		{name: "granted", q: envelope.ReadQuery{Scope: "bob", Key: "k"}, scope: "bob", limit: 100},
		{name: "communal", q: envelope.ReadQuery{Scope: "_shared"}, scope: "_shared", limit: 100},
		{name: "key without scope", q: envelope.ReadQuery{Key: "k"}, refused: errs.InvalidField},
		{name: "private scope", q: envelope.ReadQuery{Scope: "cat"}, refused: errs.ScopeDenied},
	} {
		q := c.q
		err := envelope.CheckReadQuery(ann, &q, 500)
		if c.refused != "" {
			if err == nil || errs.From(err).Code != c.refused {
				t.Errorf("%s: got %v, want %s", c.name, err, c.refused)
			}
			continue
		}
		if err != nil || q.Scope != c.scope || q.Limit != c.limit {
			t.Errorf("%s: got %+v, %v; want scope %q limit %d", c.name, q, err, c.scope, c.limit)
		}
	}
}

func TestVisibleEntriesAndDropEntry(t *testing.T) {
	ann := &authority.Principal{Kind: authority.KindAgent, RoomID: "r", AgentID: "ann"}
	vis, err := authority.VisibilityOf(nil, ann, nil)
	if err != nil {
		t.Fatal(err)
	}
	entries := []write.Entry{{Scope: "ann", Key: "a"}, {Scope: "cat", Key: "b"}, {Scope: "_shared", Key: "c"}, {Scope: "ann", Key: "d"}}
	gated := []envelope.GatedEntry{{At: 1, Enabled: "hidden"}, {At: 2, Enabled: "c"}, {At: 3, Enabled: "d"}}
	kept, keptGated := envelope.VisibleEntries(vis, entries, gated)
	if got := keys(kept); got != "a c d" {
		t.Fatalf("kept %q, want the entries ann may read", got)
	}
	if len(keptGated) != 2 || keptGated[0] != (envelope.GatedEntry{At: 1, Enabled: "c"}) || keptGated[1] != (envelope.GatedEntry{At: 2, Enabled: "d"}) {
		t.Fatalf("gated %+v, want c and d re-indexed", keptGated)
	}
	kept, keptGated = envelope.DropEntry(kept, keptGated, 1)
	if got := keys(kept); got != "a d" {
		t.Fatalf("after drop %q", got)
	}
	if len(keptGated) != 1 || keptGated[0] != (envelope.GatedEntry{At: 1, Enabled: "d"}) {
		t.Fatalf("gated after drop %+v, want d at 1", keptGated)
	}
}

func keys(entries []write.Entry) string {
	s := ""
	for i, e := range entries {
		if i > 0 {
			s += " "
		}
		s += e.Key
	}
	return s
}

func TestGateEntries(t *testing.T) {
	one, two := int64(1), int64(2)
	entries := func() []write.Entry {
		return []write.Entry{
			{Scope: "_shared", Key: "open"},  // gated, in the state: shown
			{Scope: "_shared", Key: "shut"},  // gated, not in the state
			{Scope: "_shared", Key: "plain"}, // not gated
			{Scope: "_log", Key: "a", SortKey: &one},
			{Scope: "_log", Key: "b", SortKey: &two},
		}
	}
	gated := []envelope.GatedEntry{{At: 0, Enabled: "x"}, {At: 1, Enabled: "x"}, {At: 3, Enabled: "on"}, {At: 4, Enabled: "off"}}
	state := map[string]any{"_shared": map[string]any{"open": 1, "plain": 1}}
	eval := func(src string) (bool, uint64) { return src == "on", 10 }
	for _, c := range []struct {
		name         string
		spent, limit uint64
		mark         bool
		want         string
	}{
		{name: "shown as the context would", limit: 100, want: "open plain a"},
		{name: "budget spent: append entries fail closed", spent: 100, limit: 100, want: "open plain"},
		{name: "budget spent on the first", spent: 85, limit: 100, want: "open plain a"},
		{name: "marked, none dropped", limit: 100, mark: true, want: "open shut plain a b"},
	} {
		got := envelope.GateEntries(entries(), gated, state, c.spent, c.limit, eval, c.mark)
		if keys(got) != c.want {
			t.Errorf("%s: shown %q, want %q", c.name, keys(got), c.want)
		}
		if c.mark && (!got[1].Gated || !got[1].Disabled || !got[0].Gated || got[0].Disabled || got[2].Gated) {
			t.Errorf("%s: marks %+v", c.name, got)
		}
	}
}
