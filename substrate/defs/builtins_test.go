package defs

import (
	"errors"
	"testing"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// A role's bootstrap entries: a standard-library id or a definition, and
// what each says when it is neither.
func TestBootstrapEntries(t *testing.T) {
	lib := StandardLibrary[0].ID
	actions := []struct {
		name string
		v    any
		id   string
		bad  string // the result's error code when the entry is no action
	}{
		{"a standard-library id", lib, lib, ""},
		{"an unknown id", "no_such_action", "", "action_not_found"},
		{"a definition", map[string]any{"id": "mine", "writes": []any{}}, "mine", ""},
		{"a definition without an id", map[string]any{"writes": []any{}}, "", "invalid_field"},
		{"a number", 3, "", "invalid_field"},
	}
	for _, c := range actions {
		def, bad, ok := BootstrapAction(c.v)
		if ok != (c.bad == "") || bad.Error != c.bad || ok && def.ID != c.id {
			t.Errorf("%s: %+v, %+v, %v", c.name, def, bad, ok)
		}
	}
	views := []struct {
		name string
		v    any
		ok   bool
	}{
		{"a definition", map[string]any{"id": "v", "expr": "1"}, true},
		{"a definition without an id", map[string]any{"expr": "1"}, false},
		{"an id", "v", false},
	}
	for _, c := range views {
		if _, bad, ok := BootstrapView(c.v); ok != c.ok || !ok && bad.Error != "invalid_field" {
			t.Errorf("%s: %+v, %v", c.name, bad, ok)
		}
	}
	if r := TooManyBootstrap("view"); r.Error != string(errs.InvalidField) || r.Kind != "view" {
		t.Errorf("TooManyBootstrap = %+v", r)
	}
}

// _send_message's params: what is refused before the room is asked, and
// the order in which the room is asked (recipients before an unknown
// parameter).
func TestMessageParams(t *testing.T) {
	none := func([]string) error { return nil }
	notAgent := errors.New("not an agent")
	cases := []struct {
		name    string
		params  map[string]any
		checkTo func([]string) error
		want    errs.Code
		err     error
	}{
		{"a body", map[string]any{"body": "hi"}, none, "", nil},
		{"no body", map[string]any{"kind": "chat"}, none, errs.InvalidParam, nil},
		{"the invocation kind", map[string]any{"body": "hi", "kind": "action_invocation"}, none, errs.InvalidParam, nil},
		{"to a number", map[string]any{"body": "hi", "to": 3}, none, errs.InvalidParam, nil},
		{"an unknown parameter", map[string]any{"body": "hi", "tag": 1}, none, errs.InvalidParam, nil},
		{"to no agent, and an unknown parameter", map[string]any{"body": "hi", "to": "x", "tag": 1}, func([]string) error { return notAgent }, "", notAgent},
	}
	for _, c := range cases {
		m, err := MessageParams(c.params, c.checkTo)
		switch {
		case c.err != nil:
			if !errors.Is(err, c.err) {
				t.Errorf("%s: %v, want %v", c.name, err, c.err)
			}
		case c.want == "" && (err != nil || m.Kind != "chat" || m.Directed):
			t.Errorf("%s: %+v, %v", c.name, m, err)
		case c.want != "" && !errs.Is(err, c.want):
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
	}
	m, err := MessageParams(map[string]any{"body": "hi", "to": []any{}}, none)
	if err != nil || !m.Directed || m.To != nil {
		t.Errorf("to an empty list: %+v, %v; want directed to nobody", m, err)
	}
}

func TestNearest(t *testing.T) {
	ids := []string{"vote", "propose", "_send_message"}
	for asked, want := range map[string]string{"vot": "vote", "Propse": "propose", "_send_mesage": "_send_message", "zzz": "", "": ""} {
		if got := Nearest(asked, append([]string(nil), ids...)); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", asked, got, want)
		}
	}
}

// A role's bootstrap registers actions, then views, each through its own
// registration, and stops at MaxBootstrap in all with one entry that says
// so; an entry that is no definition, or that its registration refuses,
// says why and the rest go on.
func TestBootstrap(t *testing.T) {
	var registered []string
	regA := func(d ActionDef) error {
		if d.ID == "taken" {
			return errs.New(errs.Forbidden, "not yours")
		}
		registered = append(registered, "a:"+d.ID)
		return nil
	}
	regV := func(d ViewDef) error { registered = append(registered, "v:"+d.ID); return nil }
	got := Bootstrap([]any{map[string]any{"id": "mine", "writes": []any{}}, 3, map[string]any{"id": "taken", "writes": []any{}}},
		[]any{map[string]any{"id": "v", "expr": "1"}}, regA, regV)
	want := []BootstrapResult{{Kind: "action", ID: "mine"}, {Kind: "action", Error: "invalid_field"}, {Kind: "action", ID: "taken", Error: "forbidden"}, {Kind: "view", ID: "v"}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i].Kind != want[i].Kind || got[i].ID != want[i].ID || got[i].Error != want[i].Error {
			t.Errorf("%d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if len(registered) != 2 || registered[0] != "a:mine" || registered[1] != "v:v" {
		t.Errorf("registered %v", registered)
	}
	many := make([]any, MaxBootstrap)
	for i := range many {
		many[i] = map[string]any{"id": "a", "writes": []any{}}
	}
	got = Bootstrap(many, []any{map[string]any{"id": "v", "expr": "1"}, map[string]any{"id": "w", "expr": "1"}}, regA, regV)
	if len(got) != MaxBootstrap+1 || got[MaxBootstrap].Kind != "view" || got[MaxBootstrap].Error != "invalid_field" {
		t.Fatalf("past the cap: %d results, last %+v", len(got), got[len(got)-1])
	}
}
