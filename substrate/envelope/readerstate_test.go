package envelope

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/exprbudget"
)

// thoughts hides keys under "think." from every reader but their author,
// as the loom hides an agent's thinking in a scope granted to another.
type thoughts struct{}

func (thoughts) Reader(p *authority.Principal, _ authority.RowFunc) (authority.Reader, error) {
	return authority.Reader{
		Sees:           func(scope, key string) bool { return !strings.HasPrefix(key, "think.") || scope == p.AgentID },
		HiddenPrefixes: func(scope string) []string { return []string{"think."} },
		Key:            "thoughts:" + p.AgentID,
	}, nil
}

func visibilityOf(t *testing.T, agent string, rules ...authority.ReadRule) *authority.Visibility {
	t.Helper()
	return visibilityAs(t, &authority.Principal{Kind: authority.KindAgent, AgentID: agent, Grants: []string{"bob"}}, rules...)
}

func visibilityAs(t *testing.T, p *authority.Principal, rules ...authority.ReadRule) *authority.Visibility {
	t.Helper()
	v, err := authority.VisibilityOf(rules, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestHideEntries(t *testing.T) {
	shared := map[string]any{"a": 1.0, "think.x": 2.0}
	own := map[string]any{"think.mine": 3.0}
	bobs := map[string]any{"think.his": 4.0, "b": 5.0}
	for _, c := range []struct {
		name         string
		vis          *authority.Visibility
		want         map[string]any
		wantModified map[string]bool
	}{
		{"no rule hides nothing", visibilityOf(t, "alice"),
			map[string]any{"_shared": shared, "alice": own, "bob": bobs}, nil},
		{"a rule hides entries one by one, in copies", visibilityOf(t, "alice", thoughts{}),
			map[string]any{"_shared": map[string]any{"a": 1.0}, "alice": own, "bob": map[string]any{"b": 5.0}},
			map[string]bool{"_shared": true, "bob": true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			state := map[string]any{"_shared": shared, "alice": own, "bob": bobs}
			modified := HideEntries(state, nil, c.vis)
			if !reflect.DeepEqual(state, c.want) || !reflect.DeepEqual(modified, c.wantModified) {
				t.Fatalf("state %v modified %v, want %v %v", state, modified, c.want, c.wantModified)
			}
			if len(shared) != 2 || len(bobs) != 2 {
				t.Fatal("the snapshot's maps were changed, not copied")
			}
		})
	}
}

func TestReadableState(t *testing.T) {
	own := map[string]any{"think.mine": 3.0}
	state := map[string]any{"_shared": map[string]any{"a": 1.0, "think.x": 2.0}, "self": own, "alice": own, "_n": 1.0}
	// An owner's agent reads every scope, "self" among them: its own
	// scope is still its own.
	got := ReadableState(state, visibilityAs(t, &authority.Principal{Kind: authority.KindAgent, AgentID: "alice", ReadsAll: true}, thoughts{}))
	want := map[string]any{"_shared": map[string]any{"a": 1.0}, "self": own, "alice": own, "_n": 1.0}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("readable %v, want %v", got, want)
	}
	if len(state["_shared"].(map[string]any)) != 2 {
		t.Fatal("the state's maps were changed, not copied")
	}
}

func TestAddEntries(t *testing.T) {
	type entry struct {
		scope, key string
		val        any
	}
	shared := map[string]any{"a": 1.0}
	mine := map[string]any{"m": 1.0}
	state := map[string]any{"_shared": shared, "alice": mine}
	modified := AddEntries(state, map[string]bool{"alice": true}, []entry{{"_shared", "g", 2.0}, {"_shared", "h", 3.0}, {"alice", "n", 4.0}, {"new", "k", 5.0}},
		func(e entry) (string, string, any) { return e.scope, e.key, e.val })
	want := map[string]any{"_shared": map[string]any{"a": 1.0, "g": 2.0, "h": 3.0}, "alice": map[string]any{"m": 1.0, "n": 4.0}, "new": map[string]any{"k": 5.0}}
	if !reflect.DeepEqual(state, want) {
		t.Fatalf("state %v, want %v", state, want)
	}
	if !reflect.DeepEqual(modified, map[string]bool{"_shared": true, "alice": true, "new": true}) {
		t.Fatalf("modified %v", modified)
	}
	if len(shared) != 1 {
		t.Fatal("a shared scope was changed, not copied")
	}
	if len(mine) != 2 {
		t.Fatal("a scope already the read's own was copied again")
	}
}

func TestGateKey(t *testing.T) {
	a := GateKey("alice", map[string]any{"x": 1, "_shared": 1}, "r")
	if b := GateKey("alice", map[string]any{"_shared": 2, "x": 2}, "r"); a != b {
		t.Fatalf("the same scopes named differently: %q, %q", a, b)
	}
	for _, other := range []string{GateKey("bob", map[string]any{"x": 1, "_shared": 1}, "r"),
		GateKey("alice", map[string]any{"x": 1}, "r"), GateKey("alice", map[string]any{"x": 1, "_shared": 1}, "s")} {
		if other == a {
			t.Fatalf("another self, scopes or rules named alike: %q", a)
		}
	}
}

func TestSharedAndSelf(t *testing.T) {
	own := map[string]any{"x": 1.0}
	for _, c := range []struct {
		name  string
		state map[string]any
		self  string
		keep  bool
		want  map[string]any
	}{
		{"shared always there", map[string]any{}, "", true, map[string]any{"_shared": map[string]any{}}},
		{"unless not kept", map[string]any{}, "", false, map[string]any{}},
		{"self is the agent's scope", map[string]any{"alice": own}, "alice", false, map[string]any{"alice": own, "self": own}},
		{"self before it has one", map[string]any{}, "alice", false, map[string]any{"self": map[string]any{}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			SharedAndSelf(c.state, c.self, func(string) bool { return c.keep })
			if !reflect.DeepEqual(c.state, c.want) {
				t.Fatalf("state %v, want %v", c.state, c.want)
			}
		})
	}
}

func TestGate(t *testing.T) {
	cel, err := expr.New(expr.Options{})
	if err != nil {
		t.Fatal(err)
	}
	vars := &expr.Vars{State: map[string]any{"_shared": map[string]any{"open": true}}, Agents: map[string]any{}, Now: time.Unix(0, 0)}
	for _, c := range []struct {
		src  string
		on   bool
		memo GateMemo
	}{
		{`state._shared.open`, true, MemoPure},
		{`!state._shared.open`, false, MemoPure},
		{`"x"`, false, MemoPure},                // not a bool: hidden
		{`state._shared.nope`, false, MemoPure}, // an error: hidden
		{`(((`, false, MemoPure},                // does not compile
		{`now > timestamp("1960-01-01T00:00:00Z")`, true, MemoTimed},
		{`size(agents) == 0 && now > timestamp("1960-01-01T00:00:00Z")`, true, MemoNone},
	} {
		on, cost, memo := Gate(context.Background(), cel, c.src, vars)
		if on != c.on || memo != c.memo || cost < exprbudget.MinCost {
			t.Errorf("%s: on %v memo %v cost %d, want %v %v, at least %d", c.src, on, memo, cost, c.on, c.memo, exprbudget.MinCost)
		}
	}
}

func TestActionGuard(t *testing.T) {
	cel, err := expr.New(expr.Options{})
	if err != nil {
		t.Fatal(err)
	}
	vars := &expr.Vars{State: map[string]any{"_shared": map[string]any{"n": 1.0}}, Actions: map[string]any{}}
	for _, c := range []struct {
		src          string
		ifClause     bool
		ok, wantHeld bool
	}{
		{`state._shared.n == 1.0`, false, true, false}, // enabled: never held
		{`state._shared.n == 1.0`, true, true, true},
		{`state._shared.n == 2.0`, true, false, false},
		{`size(actions) == 0`, true, true, false}, // reads actions, which availability fills as it goes
		{`params.cell == 1`, true, true, false},   // needs params: the invocation decides
		{`state._shared.nope == 1`, true, false, false},
		{`(((`, true, false, false},
	} {
		ok, cost, held := ActionGuard(context.Background(), cel, c.src, vars, c.ifClause)
		if ok != c.ok || held != c.wantHeld || cost < exprbudget.MinCost {
			t.Errorf("%s (if %v): ok %v held %v cost %d, want %v %v", c.src, c.ifClause, ok, held, cost, c.ok, c.wantHeld)
		}
	}
}

func TestVisibleAgents(t *testing.T) {
	gated, open := "gated", "open"
	agents := []Presence{{ID: "a"}, {ID: "b", Enabled: &gated}, {ID: "c", Enabled: &open}}
	var asked []string
	got := VisibleAgents(agents, func(src string) bool { asked = append(asked, src); return src == open })
	if _, ok := got["a"]; !ok || len(got) != 2 || got["c"] == nil {
		t.Fatalf("agents %v: want a and c", got)
	}
	if !reflect.DeepEqual(asked, []string{gated, open}) {
		t.Fatalf("gates asked %v, in the agents' order", asked)
	}
}
