package substrate

import "testing"

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
