package envelope

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/syncsubstrate/sync/substrate/defs"
)

type noEncoder struct{}

func (noEncoder) ScopeJSON(string) ([]byte, error) { return nil, nil }

func TestStateShown(t *testing.T) {
	own := map[string]any{"x": 1.0}
	state := map[string]any{"_shared": map[string]any{"a": 1.0, "b": 2.0}, "alice": own, "self": own, "bob": map[string]any{"y": 2.0}}
	stored := map[string]map[string]json.RawMessage{"_shared": {"a": json.RawMessage(`1`), "b": json.RawMessage(`2`)}, "alice": {"x": json.RawMessage(`1`)}}
	for _, c := range []struct {
		name     string
		req      ContextRequest
		modified map[string]bool
		want     map[string]any
		shared   []string
	}{
		{"all, stored as stored, self only as self", ContextRequest{}, nil,
			map[string]any{"_shared": stored["_shared"], "self": stored["alice"], "bob": state["bob"]}, []string{"_shared", "self"}},
		{"only one scope", ContextRequest{Only: []string{"state._shared"}}, nil,
			map[string]any{"_shared": stored["_shared"]}, []string{"_shared"}},
		{"modified: decoded values", ContextRequest{Only: []string{"state"}}, map[string]bool{"_shared": true},
			map[string]any{"_shared": state["_shared"], "self": stored["alice"], "bob": state["bob"]}, []string{"self"}},
		{"key range: nothing shared", ContextRequest{Only: []string{"state._shared"}, Prefix: "b"}, nil,
			map[string]any{"_shared": map[string]json.RawMessage{"b": json.RawMessage(`2`)}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := &Envelope[ActionView]{}
			got := env.StateShown(c.req, "alice", state, stored, c.modified, noEncoder{})
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("state shown %v, want %v", got, c.want)
			}
			var shared []string
			for sc := range env.shared {
				shared = append(shared, sc)
			}
			if len(shared) != len(c.shared) {
				t.Fatalf("shared %v, want %v", shared, c.shared)
			}
			for _, sc := range c.shared {
				if _, ok := env.shared[sc]; !ok {
					t.Fatalf("shared %v, want %v", shared, c.shared)
				}
			}
		})
	}
}

func TestVersionsShown(t *testing.T) {
	versions := map[string]map[string]int64{"_shared": {"a": 3}, "alice": {"x": 1}}
	state := map[string]any{"_shared": nil, "self": nil, "bob": nil}
	for _, c := range []struct {
		only []string
		want map[string]map[string]int64
	}{
		{nil, nil},
		{[]string{"state"}, nil}, // only reads of single scopes
		{[]string{"state._shared", "state.self"}, map[string]map[string]int64{"_shared": {"a": 3}, "self": {"x": 1}}},
		{[]string{"state.bob"}, nil}, // no versions: left out
	} {
		got := VersionsShown(ContextRequest{Only: c.only}, "alice", state, func(name string) map[string]int64 { return versions[name] })
		if !reflect.DeepEqual(got, c.want) {
			t.Fatalf("only %v: versions %v, want %v", c.only, got, c.want)
		}
	}
}

func TestDirectedAhead(t *testing.T) {
	id := func(n int64) int64 { return n }
	for _, c := range []struct {
		name           string
		read, directed []int64
		limit          int
		want           []int64
		upTo           int64
	}{
		{"none", []int64{8, 9}, nil, 2, []int64{8, 9}, -1},
		{"older ahead", []int64{8, 9}, []int64{3, 9}, 2, []int64{3, 8, 9}, -1},
		{"more than a page: stop short", []int64{8, 9}, []int64{3, 4, 5}, 2, []int64{3, 4, 8, 9}, 4},
		{"the first left out is in the page", []int64{5, 9}, []int64{3, 4, 5}, 2, []int64{3, 4, 5, 9}, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, upTo := DirectedAhead(c.read, c.directed, id, c.limit)
			if !reflect.DeepEqual(got, c.want) || upTo != c.upTo {
				t.Fatalf("DirectedAhead = %v, %d; want %v, %d", got, upTo, c.want, c.upTo)
			}
		})
	}
}

func TestAddBuiltins(t *testing.T) {
	desc := map[string]string{"help": "help", "_send_message": "send", "_ack": "ack"}
	params := map[string]map[string]defs.ParamSpec{"_ack": {"seq": {Type: "integer"}}}
	for _, canAct := range []bool{true, false} {
		acts := map[string]ActionView{"_send_message": {Description: "the room's own"}}
		AddBuiltins(acts, desc, params, canAct)
		if acts["_send_message"].Builtin || acts["_send_message"].Description != "the room's own" {
			t.Fatalf("an action overriding a builtin was replaced: %+v", acts["_send_message"])
		}
		if h, a := acts["help"], acts["_ack"]; !h.Available || !h.Builtin || a.Available != canAct || a.Params["seq"].Type != "integer" {
			t.Fatalf("canAct %v: help %+v, _ack %+v", canAct, h, a)
		}
	}
}
