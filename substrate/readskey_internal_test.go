package substrate

import (
	"reflect"
	"testing"
)

// ReadsKey tells apart principals whose reads may differ, down to the
// agent a read-only principal reads for (unexported, so a caller could not
// key it), and not grants listed in another order.
func TestReadsKeyNamesWhatDecidesReads(t *testing.T) {
	agent := func(id string, grants ...string) *Principal {
		return &Principal{Kind: KindAgent, RoomID: "r", AgentID: id, Grants: grants}
	}
	distinct := []*Principal{
		RoomPrincipal("r"),
		RoomPrincipal("s"),
		ObserverPrincipal("r"),
		ViewPrincipal("r"),
		agent("a"),
		agent("b"),
		agent("a", "*"),
		agent("a", "loom_write"),
		{Kind: KindAgent, RoomID: "r", AgentID: "a", ReadsAll: true},
		{Kind: KindAgent, RoomID: "r", AgentID: "a", Person: true},
		ReadOnlyOf(agent("a")),
		ReadOnlyOf(agent("b")),
	}
	seen := map[string]int{}
	for i, p := range distinct {
		k := p.ReadsKey()
		if j, ok := seen[k]; ok {
			t.Errorf("principals %d and %d share the key %q", j, i, k)
		}
		seen[k] = i
	}
	if a, b := agent("a", "x", "y").ReadsKey(), agent("a", "y", "x").ReadsKey(); a != b {
		t.Errorf("the same grants in another order: %q, %q", a, b)
	}
	if a, b := RoomPrincipal("r").ReadsKey(), RoomPrincipal("r").ReadsKey(); a != b {
		t.Errorf("room authority twice: %q, %q", a, b)
	}
}

// A field added to Principal may decide what its reads return: whoever
// adds one decides whether ReadsKey names it, and says so here.
func TestReadsKeyCoversEveryPrincipalField(t *testing.T) {
	decided := map[string]string{
		"Kind": "in the key", "RoomID": "in the key", "AgentID": "in the key", "Grants": "in the key",
		"ReadsAll": "in the key", "Person": "in the key", "readsAs": "in the key",
		"Ceiling":      "a function: a sharing caller keys what set it (the lobby: access)",
		"Words":        "a sharing caller does not share when set",
		"Refresh":      "a sharing caller does not share when set",
		"tokenHash":    "the token a read checks still holds; a sharing caller re-checks each reader's access (the live pages: at every change)",
		"remembered":   "whether the agent row was cached; not what reads return",
		"heartbeatAge": "presence bookkeeping; not what reads return",
	}
	typ := reflect.TypeFor[Principal]()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		if _, ok := decided[name]; !ok {
			t.Errorf("Principal.%s is new: decide whether ReadsKey names it (principals sharing a read must not differ in it), then list it here", name)
		}
		delete(decided, name)
	}
	for name := range decided {
		t.Errorf("Principal.%s is gone: take it out of this list", name)
	}
}
