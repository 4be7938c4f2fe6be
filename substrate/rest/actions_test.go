package rest_test

import (
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate/rest"
)

func (e *env) invoke(rm room, tok, action string, params map[string]any) resp {
	e.t.Helper()
	return e.do("POST", "/rooms/"+rm.id+"/actions/"+action+"/invoke", tok, map[string]any{"params": params})
}

func (e *env) ctx(rm room, tok, query string) resp {
	e.t.Helper()
	return e.do("GET", "/rooms/"+rm.id+"/context?"+query, tok, nil).must(e.t, 200)
}

func path(m map[string]any, keys ...string) any {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

// Seed 001 §Views: agent-a's view projects its private health; others see
// "healthy" or "wounded", never the number.
func TestSeedHealthStatusView(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("health", nil)
	aTok := e.join(rm, "agent-a")
	bTok := e.join(rm, "agent-b")
	e.do("PUT", "/rooms/health/state", aTok, map[string]any{"scope": "self", "key": "health", "value": 80}).must(t, 200)
	e.do("PUT", "/rooms/health/views", aTok, map[string]any{
		"id": "agent-a-health-status", "scope": "agent-a",
		"expr": `state["agent-a"].health > 50 ? "healthy" : "wounded"`}).must(t, 201)

	r := e.ctx(rm, bTok, "")
	if got := path(r.body, "views", "agent-a-health-status"); got != "healthy" {
		t.Fatalf("view as agent-b = %v: %s", got, r.raw)
	}
	if strings.Contains(r.raw, `"health":80`) || path(r.body, "state", "agent-a") != nil {
		t.Fatalf("agent-b's context leaks agent-a's scope: %s", r.raw)
	}
	e.do("PUT", "/rooms/health/state", aTok, map[string]any{"scope": "self", "key": "health", "value": 30}).must(t, 200)
	r = e.do("GET", "/rooms/health/views/agent-a-health-status", bTok, nil).must(t, 200)
	if r.body["value"] != "wounded" {
		t.Fatalf("after damage: %s", r.raw)
	}
	// Views are usable in other expressions.
	r = e.do("POST", "/rooms/health/eval", bTok, map[string]any{"expr": `views["agent-a-health-status"] == "wounded"`}).must(t, 200)
	if r.body["value"] != true {
		t.Fatalf("eval of the view: %s", r.raw)
	}
}

// Eval and views reveal nothing beyond their authority.
func TestEvalAndViewAuthority(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("auth", nil)
	aTok := e.join(rm, "a")
	bTok := e.join(rm, "b")
	e.do("PUT", "/rooms/auth/state", aTok, map[string]any{"scope": "a", "key": "secret", "value": "s3cret"}).must(t, 200)

	for _, src := range []string{`state.a.secret`, `state["a"]`, `state.keys().exists(k, k == "a")`} {
		r := e.do("POST", "/rooms/auth/eval", bTok, map[string]any{"expr": src})
		if strings.Contains(r.raw, "s3cret") || r.body["value"] == true {
			t.Fatalf("eval %s by b revealed a's scope: %s", src, r.raw)
		}
	}
	// The room token sees everything, the owner its own.
	if r := e.do("POST", "/rooms/auth/eval", aTok, map[string]any{"expr": `state.self.secret`}).must(t, 200); r.body["value"] != "s3cret" {
		t.Fatalf("owner eval: %s", r.raw)
	}
	// A view registered by b cannot read a's scope: its value is an error.
	e.do("PUT", "/rooms/auth/views", bTok, map[string]any{"id": "peek", "scope": "b", "expr": `state.a.secret`}).must(t, 201)
	r := e.do("GET", "/rooms/auth/views/peek", rm.token, nil).must(t, 200)
	if strings.Contains(r.raw, "s3cret") || path(r.body, "value", "_error") == nil {
		t.Fatalf("b's view read a's scope: %s", r.raw)
	}
	// b cannot register in a's scope, nor replace a's view.
	if r := e.do("PUT", "/rooms/auth/views", bTok, map[string]any{"id": "x", "scope": "a", "expr": `state.a.secret`}); r.status != 403 {
		t.Fatalf("b registered a view in a's scope: %s", r.raw)
	}
	if r := e.do("PUT", "/rooms/auth/actions", bTok, map[string]any{"id": "x", "scope": "a", "writes": []any{map[string]any{"scope": "a", "key": "k", "value": 1}}}); r.status != 403 {
		t.Fatalf("b registered an action in a's scope: %s", r.raw)
	}
	e.do("PUT", "/rooms/auth/views", aTok, map[string]any{"id": "mine", "scope": "a", "expr": `size(state.a)`}).must(t, 201)
	if r := e.do("PUT", "/rooms/auth/views", bTok, map[string]any{"id": "mine", "expr": `1`}); r.status != 403 || r.str("error") != "action_owned" {
		t.Fatalf("b replaced a's view: %s", r.raw)
	}
	if r := e.do("DELETE", "/rooms/auth/views/mine", bTok, nil); r.status != 403 {
		t.Fatalf("b deleted a's view: %s", r.raw)
	}
	// Wait conditions see only what the waiter may see.
	r = e.do("GET", "/rooms/auth/wait?timeout=50&condition="+url.QueryEscape(`state.a.secret != ""`), bTok, nil).must(t, 200)
	if r.body["triggered"] != false || strings.Contains(r.raw, "s3cret") {
		t.Fatalf("wait by b saw a's scope: %s", r.raw)
	}
}

// Actions write only where their registrar could: communal scopes, the
// registrar's own scope, the invoker's own scope.
func TestActionWriteAuthority(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("aw", nil)
	aTok := e.join(rm, "a")
	bTok := e.join(rm, "b")
	// a's action (scope a) writes a's scope: anyone may invoke it.
	e.do("PUT", "/rooms/aw/actions", aTok, map[string]any{"id": "poke-a", "scope": "a",
		"writes": []any{map[string]any{"scope": "a", "key": "poked_by", "value": "${self}"}}}).must(t, 201)
	r := e.invoke(rm, bTok, "poke-a", nil).must(t, 200)
	if w := r.body["writes"].([]any); len(w) != 1 || path(w[0].(map[string]any), "revision") != float64(r.num("seq")) || path(w[0].(map[string]any), "writer") != "b" {
		t.Fatalf("invoke result writes: %s", r.raw)
	}
	if got := e.do("GET", "/rooms/aw/state?scope=a&key=poked_by", aTok, nil).must(t, 200).body["value"]; got != "b" {
		t.Fatalf("registrar bridge write: %v (%s)", got, r.raw)
	}
	// A _shared action cannot write some agent's private scope...
	e.do("PUT", "/rooms/aw/actions", aTok, map[string]any{"id": "smash-b",
		"writes": []any{map[string]any{"scope": "b", "key": "k", "value": 1}}}).must(t, 201)
	before := e.seq(rm)
	r = e.invoke(rm, aTok, "smash-b", nil).must(t, 403)
	if r.str("error") != "scope_denied" {
		t.Fatalf("cross-scope write: %s", r.raw)
	}
	e.do("GET", "/rooms/aw/state?scope=b&key=k", rm.token, nil).must(t, 404)
	// ...but the refusal is audited (one entry, nothing else changed).
	if after := e.seq(rm); after != before+1 {
		t.Fatalf("failed invocation: seq %d → %d, want one audit entry", before, after)
	}
	audit := e.do("GET", fmt.Sprintf("/rooms/aw/state?scope=_audit&key=%d", before+1), rm.token, nil).must(t, 200)
	if path(audit.body, "value", "ok") != false || path(audit.body, "value", "error") != "scope_denied" {
		t.Fatalf("failure audit %s", audit.raw)
	}
	// ...unless the invoker is that agent (${self}).
	e.do("PUT", "/rooms/aw/actions", aTok, map[string]any{"id": "note",
		"writes": []any{map[string]any{"scope": "${self}", "key": "note", "value": "mine"}}}).must(t, 201)
	e.invoke(rm, bTok, "note", nil).must(t, 200)
	e.do("GET", "/rooms/aw/state?scope=b&key=note", bTok, nil).must(t, 200)
	// System scopes are never writable by actions.
	if r := e.do("PUT", "/rooms/aw/actions", aTok, map[string]any{"id": "forge",
		"writes": []any{map[string]any{"scope": "_audit", "key": "x", "value": 1}}}); r.status != 201 {
		t.Fatalf("register forge: %s", r.raw)
	}
	e.invoke(rm, aTok, "forge", nil).must(t, 403)
	// The view token cannot invoke.
	e.invoke(rm, rm.view, "note", nil).must(t, 403)
}

// The seed's claim-with-merge, if blocking, and templates keeping types.
func TestInvokeSemantics(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("inv", nil)
	aTok := e.join(rm, "a")
	bTok := e.join(rm, "b")
	e.invoke(rm, aTok, "_send_message", map[string]any{"body": "task: write docs"}).must(t, 200)
	msgs := e.ctx(rm, aTok, "").body["messages"].(map[string]any)["recent"].([]any)
	key := fmt.Sprint(msgs[0].(map[string]any)["seq"])

	e.do("PUT", "/rooms/inv/actions", aTok, map[string]any{
		"id": "claim-msg", "description": "claim a message",
		"params": map[string]any{"key": map[string]any{"type": "string", "required": true}},
		"if":     `!has(params.key) ? false : true`,
		"writes": []any{map[string]any{"scope": "_messages", "key": "${params.key}", "merge": map[string]any{"claimed_by": "${self}"}}},
	}).must(t, 201)
	e.invoke(rm, bTok, "claim-msg", map[string]any{"key": key}).must(t, 200)
	r := e.do("GET", "/rooms/inv/state?scope=_messages&key="+key, aTok, nil).must(t, 200)
	if path(r.body, "value", "claimed_by") != "b" || path(r.body, "value", "body") != "task: write docs" {
		t.Fatalf("claim merge lost fields: %s", r.raw)
	}

	// if blocks, nothing is written, the code is precondition_failed.
	e.do("PUT", "/rooms/inv/actions", rm.token, map[string]any{
		"id": "advance", "if": `state._shared.phase == "ready"`,
		"writes": []any{map[string]any{"key": "phase", "value": "done"}},
	}).must(t, 201)
	e.do("PUT", "/rooms/inv/state", rm.token, map[string]any{"scope": "_shared", "key": "phase", "value": "setup"}).must(t, 200)
	r = e.invoke(rm, aTok, "advance", nil).must(t, 409)
	if r.str("error") != "precondition_failed" {
		t.Fatalf("blocked invoke: %s", r.raw)
	}
	if v := e.do("GET", "/rooms/inv/state?scope=_shared&key=phase", aTok, nil).body["value"]; v != "setup" {
		t.Fatalf("blocked invoke wrote phase=%v", v)
	}

	// A string that is exactly one template keeps the JSON type.
	e.do("PUT", "/rooms/inv/actions", rm.token, map[string]any{
		"id": "typed", "params": map[string]any{"n": map[string]any{"type": "integer"}, "tags": map[string]any{"type": "array"}},
		"writes": []any{
			map[string]any{"key": "n", "value": "${params.n}"},
			map[string]any{"key": "label", "value": "n is ${params.n}"},
			map[string]any{"key": "tags", "value": map[string]any{"list": "${params.tags}", "${self}-key": true}},
			map[string]any{"key": "double", "value": "params.n * 2", "expr": true},
		},
		"result": `state._shared.n + 1`,
	}).must(t, 201)
	r = e.invoke(rm, aTok, "typed", map[string]any{"n": 5, "tags": []string{"x", "y"}}).must(t, 200)
	if r.body["result"] != float64(6) {
		t.Fatalf("result %s", r.raw)
	}
	st := e.do("GET", "/rooms/inv/state?scope=_shared", aTok, nil).must(t, 200).raw
	for _, want := range []string{`"key":"n","value":5`, `"value":"n is 5"`, `"value":{"list":["x","y"],"a-key":true}`, `"key":"double","value":10`} {
		if !strings.Contains(st, want) {
			t.Errorf("state lacks %s: %s", want, st)
		}
	}
	// Parameter validation.
	for _, bad := range []map[string]any{{"n": "five"}, {"n": 1.5}, {"m": 1}} {
		if r := e.invoke(rm, aTok, "typed", bad); r.status != 400 || r.str("error") != "invalid_param" {
			t.Errorf("params %v: %s", bad, r.raw)
		}
	}
	e.invoke(rm, aTok, "nope", nil).must(t, 404)
	// Every invocation is logged as an action_invocation message.
	m := e.ctx(rm, bTok, "messages_limit=500").body["messages"].(map[string]any)
	if !strings.Contains(fmt.Sprint(m["recent"]), "action_invocation") {
		t.Fatalf("no action_invocation messages: %v", m)
	}
}

// CAS through an action: if_version as a template.
func TestActionCAS(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("acas", nil)
	aTok := e.join(rm, "a")
	e.do("PUT", "/rooms/acas/actions", rm.token, map[string]any{
		"id": "set-doc", "params": map[string]any{"text": map[string]any{"type": "string"}, "v": map[string]any{"type": "integer"}},
		"writes": []any{map[string]any{"key": "doc", "value": "${params.text}", "if_version": "${params.v}"}},
	}).must(t, 201)
	e.invoke(rm, aTok, "set-doc", map[string]any{"text": "one", "v": 0}).must(t, 200)
	e.invoke(rm, aTok, "set-doc", map[string]any{"text": "two", "v": 1}).must(t, 200)
	r := e.invoke(rm, aTok, "set-doc", map[string]any{"text": "stale", "v": 1}).must(t, 409)
	if r.str("error") != "version_conflict" || r.num("current_version") != 2 {
		t.Fatalf("stale CAS: %s", r.raw)
	}
	if v := e.do("GET", "/rooms/acas/state?scope=_shared&key=doc", aTok, nil).body["value"]; v != "two" {
		t.Fatalf("doc = %v", v)
	}
}

func TestCooldownAndTimers(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("cool", nil)
	aTok := e.join(rm, "a")
	e.do("PUT", "/rooms/cool/actions", rm.token, map[string]any{
		"id": "ping", "on_invoke": map[string]any{"timer": map[string]any{"ms": 60000}},
		"writes": []any{map[string]any{"key": "pings", "increment": 1}},
	}).must(t, 201)
	e.invoke(rm, aTok, "ping", nil).must(t, 200)
	r := e.invoke(rm, aTok, "ping", nil).must(t, 409)
	if r.str("error") != "action_cooldown" || path(r.body, "cooldown", "ms_left") == nil {
		t.Fatalf("cooldown: %s", r.raw)
	}
	if got := path(e.ctx(rm, aTok, "").body, "actions", "ping", "available"); got != false {
		t.Fatalf("cooling action available=%v", got)
	}
	// Logical ticks: the cooldown of "tock" ends after two writes to _shared.turn.
	e.do("PUT", "/rooms/cool/actions", rm.token, map[string]any{
		"id": "tock", "on_invoke": map[string]any{"timer": map[string]any{"ticks": 2, "tick_on": "_shared.turn"}},
		"writes": []any{map[string]any{"key": "tocks", "increment": 1}},
	}).must(t, 201)
	e.invoke(rm, aTok, "tock", nil).must(t, 200)
	e.invoke(rm, aTok, "tock", nil).must(t, 409)
	for i := 0; i < 2; i++ {
		e.do("PUT", "/rooms/cool/state", rm.token, map[string]any{"scope": "_shared", "key": "turn", "value": i}).must(t, 200)
	}
	e.invoke(rm, aTok, "tock", nil).must(t, 200)

	// A state entry with a delete timer disappears when it runs out.
	e.do("PUT", "/rooms/cool/state", rm.token, map[string]any{"scope": "_shared", "key": "flash", "value": 1, "timer": map[string]any{"ms": 1500}}).must(t, 200)
	e.do("GET", "/rooms/cool/state?scope=_shared&key=flash", aTok, nil).must(t, 200)
	// Stays: gone by the time its timer ends (a margin for a loaded
	// machine) is what this checks; a poll would accept it gone later.
	time.Sleep(1700 * time.Millisecond)
	e.do("GET", "/rooms/cool/state?scope=_shared&key=flash", aTok, nil).must(t, 404)
	if r := e.do("POST", "/rooms/cool/eval", aTok, map[string]any{"expr": `"flash" in state._shared`}).must(t, 200); r.body["value"] != false {
		t.Fatalf("expired entry visible to CEL: %s", r.raw)
	}
	// An enable timer keeps an action dormant until it runs out.
	e.do("PUT", "/rooms/cool/actions", rm.token, map[string]any{"id": "later", "timer": map[string]any{"ms": 60000, "effect": "enable"},
		"writes": []any{map[string]any{"key": "x", "value": 1}}}).must(t, 201)
	e.invoke(rm, aTok, "later", nil).must(t, 409)
	bad := e.do("PUT", "/rooms/cool/state", rm.token, map[string]any{"scope": "_shared", "key": "t", "value": 1, "timer": map[string]any{"ms": 5, "ticks": 2}})
	if bad.status != 400 {
		t.Fatalf("two clocks accepted: %s", bad.raw)
	}
}

func TestViewsDependenciesCyclesAndContested(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("views", nil)
	put := func(id, src string) {
		e.do("PUT", "/rooms/views/views", rm.token, map[string]any{"id": id, "expr": src}).must(t, 201)
	}
	// b depends on a, registered before a.
	put("b", `views.a * 2`)
	put("a", `size(state._shared)`)
	put("c1", `views.c2 + 1`)
	put("c2", `views.c1 + 1`)
	put("broken", `state._shared.nothing`)
	e.do("PUT", "/rooms/views/state", rm.token, map[string]any{"scope": "_shared", "key": "k", "value": 1}).must(t, 200)
	v := e.ctx(rm, rm.token, "").body["views"].(map[string]any)
	if v["a"] != float64(1) || v["b"] != float64(2) {
		t.Fatalf("dependency order: %v", v)
	}
	for _, id := range []string{"c1", "c2"} {
		if !strings.Contains(fmt.Sprint(path(v, id, "_error")), "cycle") {
			t.Fatalf("cycle not reported on %s: %v", id, v[id])
		}
	}
	if path(v, "broken", "_error") == nil {
		t.Fatalf("broken view: %v", v["broken"])
	}
	// Two actions writing one key are contested.
	for _, id := range []string{"w1", "w2"} {
		r := e.do("PUT", "/rooms/views/actions", rm.token, map[string]any{"id": id, "writes": []any{map[string]any{"key": "k", "value": id}}}).must(t, 201)
		if id == "w2" && !strings.Contains(r.raw, "competing_write_targets") {
			t.Fatalf("no contention warning: %s", r.raw)
		}
	}
	c := e.ctx(rm, rm.token, "")
	if fmt.Sprint(path(c.body, "views", "_contested", "_shared.k")) != "[w1 w2]" {
		t.Fatalf("_contested: %v", path(c.body, "views"))
	}
	if !strings.Contains(fmt.Sprint(path(c.body, "_context", "help")), "contested_actions") {
		t.Fatalf("no contested_actions help: %v", path(c.body, "_context"))
	}
	// Re-registration reports what changed; render hints are kept.
	r := e.do("PUT", "/rooms/views/actions", rm.token, map[string]any{"id": "w1", "description": "new", "writes": []any{map[string]any{"key": "k", "value": "w1"}}}).must(t, 200)
	if fmt.Sprint(r.body["changed"]) != "[description]" {
		t.Fatalf("changed: %s", r.raw)
	}
	e.do("PUT", "/rooms/views/views", rm.token, map[string]any{"id": "score", "expr": `1`, "render": map[string]any{"type": "metric", "label": "Score"}}).must(t, 201)
	// A view with a delete timer disappears when it runs out.
	e.do("PUT", "/rooms/views/views", rm.token, map[string]any{"id": "brief", "expr": `true`, "timer": map[string]any{"ms": 1500}}).must(t, 201)
	e.do("GET", "/rooms/views/views/brief", rm.token, nil).must(t, 200)
	time.Sleep(1700 * time.Millisecond) // Stays: as flash above
	e.do("GET", "/rooms/views/views/brief", rm.token, nil).must(t, 404)
	if got := path(e.do("GET", "/rooms/views/views/score", rm.token, nil).must(t, 200).body, "render", "label"); got != "Score" {
		t.Fatalf("render hint: %v", got)
	}
}

// Every standard-library definition registers and runs as written.
func TestStandardLibrary(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("std", nil)
	aTok := e.join(rm, "a")
	bTok := e.join(rm, "b")
	lib := e.do("GET", "/rooms/std/help?key=standard_library", aTok, nil).must(t, 200).body["content"].([]any)
	for _, def := range lib {
		r := e.invoke(rm, aTok, "_register_action", def.(map[string]any))
		if r.status != 200 {
			t.Fatalf("register %v: %s", def.(map[string]any)["id"], r.raw)
		}
	}
	e.do("PUT", "/rooms/std/state", rm.token, map[string]any{"scope": "_shared", "key": "task1", "value": map[string]any{"title": "docs"}}).must(t, 200)
	e.do("PUT", "/rooms/std/state", aTok, map[string]any{"scope": "a", "key": "plan", "value": "ship it"}).must(t, 200)
	steps := []struct {
		tok, action string
		params      map[string]any
		status      int
	}{
		{aTok, "set", map[string]any{"key": "phase", "value": map[string]any{"n": 1}}, 200},
		{aTok, "increment", map[string]any{"key": "count"}, 200},
		{aTok, "increment", map[string]any{"key": "count", "by": 2}, 200},
		{aTok, "append", map[string]any{"entry": "started"}, 200},
		{aTok, "update_objective", map[string]any{"objective": "write docs"}, 200},
		{aTok, "update_status", map[string]any{"status": "busy"}, 200},
		{aTok, "claim", map[string]any{"key": "task1"}, 200},
		{bTok, "claim", map[string]any{"key": "task1"}, 409},
		{aTok, "submit_result", map[string]any{"result": "done"}, 200},
		{aTok, "vote", map[string]any{"choice": "yes"}, 200},
		{bTok, "vote", map[string]any{"choice": "no"}, 200},
		{aTok, "define_role", map[string]any{"role_id": "lead", "description": "leads"}, 200},
		{aTok, "define_role", map[string]any{"role_id": "lead", "description": "again"}, 409},
		{bTok, "fill_role", map[string]any{"role_id": "lead"}, 200},
		{aTok, "fill_role", map[string]any{"role_id": "lead"}, 409},
		{aTok, "vacate_role", map[string]any{"role_id": "lead"}, 409},
		{bTok, "vacate_role", map[string]any{"role_id": "lead"}, 200},
		{aTok, "fill_role", map[string]any{"role_id": "lead"}, 200},
		// Seed 003 §V: the occupant may fill its own role again; nobody
		// else may while it holds it.
		{aTok, "fill_role", map[string]any{"role_id": "lead"}, 200},
		{bTok, "fill_role", map[string]any{"role_id": "lead"}, 409},
		{aTok, "define_role", map[string]any{"role_id": "scout", "description": "scouts",
			"bootstrap_actions": []any{"vote"}, "bootstrap_views": []any{map[string]any{"id": "scout_seen", "expr": "1"}}}, 200},
		{aTok, "publish_view", map[string]any{"key": "plan"}, 200},
		{aTok, "decide_thread", map[string]any{"thread": 999999, "decision": "no such thread"}, 409},
		{aTok, "delete", map[string]any{"key": "phase"}, 200},
	}
	for _, s := range steps {
		if r := e.invoke(rm, s.tok, s.action, s.params); r.status != s.status {
			t.Fatalf("%s %v: %d, want %d: %s", s.action, s.params, r.status, s.status, r.raw)
		}
	}
	// decide_thread records a thread's outcome (issue 31).
	thread := path(e.invoke(rm, bTok, "_send_message", map[string]any{"body": "which color?", "subject": "Color"}).must(t, 200).body, "writes").([]any)[0].(map[string]any)["sort_key"]
	e.invoke(rm, aTok, "decide_thread", map[string]any{"thread": thread, "decision": "blue"}).must(t, 200)
	sh := e.ctx(rm, bTok, "").body["state"].(map[string]any)["_shared"].(map[string]any)
	if got := fmt.Sprint(path(sh, "decisions", fmt.Sprint(thread), "decision")); got != "blue" {
		t.Errorf("decide_thread: %v", sh["decisions"])
	}
	checks := map[string]string{
		"count": "3", "status": "map[a:busy]", "votes": "map[a:yes b:no]", "results": "map[a:done]",
		"public": "map[a:map[plan:ship it]]",
	}
	for k, want := range checks {
		if got := fmt.Sprint(sh[k]); got != want {
			t.Errorf("_shared.%s = %s, want %s", k, got, want)
		}
	}
	if got := fmt.Sprint(path(sh, "roles", "scout", "bootstrap_actions"), path(sh, "roles", "scout", "bootstrap_views"), path(sh, "roles", "lead", "bootstrap_actions")); got != "[vote] [map[expr:1 id:scout_seen]] []" {
		t.Errorf("define_role's bootstrap lists: %s", got)
	}
	if got := fmt.Sprint(path(sh, "roles", "lead", "filled_by")); got != "a" {
		t.Errorf("role filled_by = %s", got)
	}
	if got := fmt.Sprint(path(sh, "task1", "claimed_by")); got != "a" {
		t.Errorf("claimed_by = %s", got)
	}
	if _, ok := sh["phase"]; ok {
		t.Error("delete left phase")
	}
}

func TestContextEnvelope(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("env", nil)
	aTok := e.join(rm, "a")
	bTok := e.join(rm, "b")
	r := e.ctx(rm, aTok, "")
	if !strings.Contains(fmt.Sprint(path(r.body, "_context", "help")), "vocabulary_bootstrap") {
		t.Fatalf("empty room does not suggest vocabulary_bootstrap: %v", r.body["_context"])
	}
	e.do("PUT", "/rooms/env/actions", aTok, map[string]any{"id": "go", "intent": "start the work", "if": "true",
		"params": map[string]any{"speed": map[string]any{"type": "string", "enum": []string{"slow", "fast"}}},
		"writes": []any{map[string]any{"key": "speed", "value": "${params.speed}"}}}).must(t, 201)
	e.invoke(rm, bTok, "_send_message", map[string]any{"body": "hi a", "to": "a"}).must(t, 200)
	e.invoke(rm, bTok, "_send_message", map[string]any{"body": "hi all"}).must(t, 200)

	r = e.ctx(rm, aTok, "depth=full")
	if path(r.body, "actions", "go", "intent") != "start the work" || path(r.body, "actions", "go", "params", "speed") == nil {
		t.Fatalf("depth=full action: %v", path(r.body, "actions", "go"))
	}
	if path(r.body, "actions", "_send_message", "builtin") != true {
		t.Fatalf("builtins missing: %v", r.body["actions"])
	}
	if path(r.body, "messages", "directed_unread") != float64(1) || path(r.body, "messages", "unread") != float64(2) {
		t.Fatalf("unread before read: %v", r.body["messages"])
	}
	if !strings.Contains(fmt.Sprint(path(r.body, "_context", "help")), "directed_messages") {
		t.Fatalf("no directed_messages help: %v", r.body["_context"])
	}
	// That read marked the messages read.
	r = e.ctx(rm, aTok, "only=state,views&messages_limit=1")
	if path(r.body, "messages") != nil || path(r.body, "actions") != nil {
		t.Fatalf("only= kept other sections: %v", r.body)
	}
	ctxMeta := r.body["_context"].(map[string]any)
	if !strings.Contains(fmt.Sprint(ctxMeta["elided"]), "messages") || ctxMeta["_expand"] == nil || path(ctxMeta, "request", "only") != "state,views" {
		t.Fatalf("_context of an only= read: %v", ctxMeta)
	}
	r = e.ctx(rm, aTok, "messages_limit=1")
	if path(r.body, "messages", "unread") != float64(0) || path(r.body, "messages", "_elided") == nil {
		t.Fatalf("after reading: %v", r.body["messages"])
	}
	if r := e.do("GET", "/rooms/env/context?depth=deep", aTok, nil); r.status != 400 {
		t.Fatalf("bad depth: %s", r.raw)
	}
	r = e.ctx(rm, aTok, "depth=usage")
	if path(r.body, "actions", "go", "invocation_count") != float64(0) {
		t.Fatalf("usage: %v", path(r.body, "actions", "go"))
	}
	// Own scope as self; include=_audit is refused silently to agents.
	e.do("PUT", "/rooms/env/state", aTok, map[string]any{"scope": "a", "key": "k", "value": 1}).must(t, 200)
	r = e.ctx(rm, aTok, "include=_audit")
	if path(r.body, "state", "self", "k") != float64(1) || path(r.body, "state", "a") != nil || path(r.body, "state", "_audit") != nil {
		t.Fatalf("state section: %v", r.body["state"])
	}
	r = e.ctx(rm, rm.token, "include=_audit")
	if path(r.body, "state", "_audit") == nil {
		t.Fatalf("room token include=_audit: %v", r.body["state"])
	}
	// help is readable through invoke and GET, and rooms override keys.
	if h := e.invoke(rm, aTok, "help", map[string]any{"key": "expressions"}).must(t, 200); path(h.body, "builtin_result", "source") != "system" {
		t.Fatalf("help: %s", h.raw)
	}
	e.do("PUT", "/rooms/env/state", rm.token, map[string]any{"scope": "_help", "key": "guide", "value": "our own guide"}).must(t, 200)
	if h := e.do("GET", "/rooms/env/help?key=guide", aTok, nil).must(t, 200); h.body["content"] != "our own guide" || h.body["source"] != "room" {
		t.Fatalf("override: %s", h.raw)
	}
	e.do("GET", "/rooms/env/help?key=nope", aTok, nil).must(t, 404)
}

func TestWait(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("wait", nil)
	aTok := e.join(rm, "a")
	bTok := e.join(rm, "b", "_shared")
	cond := url.QueryEscape(`has(state._shared.go) && state._shared.go == true`)

	// Satisfied by another agent's write while waiting; status shows waiting.
	// "waiting" is shown before the wait's own first read, so the write
	// below may land before that read (the wait then triggers at once):
	// the delta holds it either way, as it starts where the wait began.
	// It started at that first read and missed the write under load
	// (substrate's TestWaitDeltaHoldsAWriteMadeOnSeeingTheWaiter makes
	// that order certain).
	var wg sync.WaitGroup
	var got resp
	wg.Add(1)
	go func() {
		defer wg.Done()
		got = e.do("GET", "/rooms/wait/wait?timeout=20000&condition="+cond, aTok, nil)
	}()
	pgtest.Eventually(t, 20*time.Second, func() bool {
		ag := e.do("GET", "/rooms/wait/agents", bTok, nil).must(t, 200).body["agents"].([]any)[0].(map[string]any)
		return ag["status"] == "waiting" && ag["waiting_on"] != nil
	}, "the waiter shown as waiting, with its condition")
	e.do("PUT", "/rooms/wait/state", bTok, map[string]any{"scope": "_shared", "key": "go", "value": true}).must(t, 200)
	wg.Wait()
	got.must(t, 200)
	if got.body["triggered"] != true || path(got.body, "context", "state", "_shared", "go") != true {
		t.Fatalf("wait result %s", got.raw)
	}
	if ms := got.body["elapsed_ms"].(float64); ms >= 3000 {
		t.Fatalf("wait woken after %v ms: not by the write's notification", ms)
	}
	ag := e.do("GET", "/rooms/wait/agents", bTok, nil).body["agents"].([]any)[0].(map[string]any)
	if ag["status"] != "active" || ag["waiting_on"] != nil {
		t.Fatalf("status after wait: %v", ag)
	}

	// Times out with timeout: true and the condition only (nothing it
	// waited for happened), or the context when asked.
	r := e.do("GET", "/rooms/wait/wait?timeout=100&condition="+url.QueryEscape(`state._shared.go == false`), aTok, nil).must(t, 200)
	if r.body["triggered"] != false || r.body["timeout"] != true || r.body["context"] != nil || r.body["unmet"] == nil {
		t.Fatalf("timeout result %s", r.raw)
	}
	r = e.do("GET", "/rooms/wait/wait?timeout=100&context=full&condition="+url.QueryEscape(`state._shared.go == false`), aTok, nil).must(t, 200)
	if r.body["timeout"] != true || r.body["context"] == nil {
		t.Fatalf("timeout result with context=full %s", r.raw)
	}

	// A timer that makes an entry visible wakes the waiter, with no write.
	e.do("PUT", "/rooms/wait/state", rm.token, map[string]any{"scope": "_shared", "key": "bell", "value": 1,
		"timer": map[string]any{"ms": 300, "effect": "enable"}}).must(t, 200)
	start := time.Now()
	r = e.do("GET", "/rooms/wait/wait?timeout=20000&condition="+url.QueryEscape(`"bell" in state._shared`), aTok, nil).must(t, 200)
	if r.body["triggered"] != true {
		t.Fatalf("timer wake: %s", r.raw)
	}
	if time.Since(start) > 4*time.Second { // the safety-net re-check is 5 s
		t.Fatalf("timer expiry did not wake the waiter (took %v)", time.Since(start))
	}

	// Bad conditions are refused up front.
	r = e.do("GET", "/rooms/wait/wait?condition="+url.QueryEscape(`state._shared.go ==`), aTok, nil).must(t, 400)
	if r.str("error") != "cel_error" || path(r.body, "stage") != "parse" {
		t.Fatalf("bad condition: %s", r.raw)
	}
}

// A default is decided once, in the operation: a view registered without
// scope takes its registrar's scope whether it came through PUT /views or
// the _register_view builtin (PUT /views used to give _shared), and every
// registration reports the seq it committed at (it reported 0).
func TestRegistrationDefaultsAreTheSameEverywhere(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("defaults", nil)
	a := e.join(rm, "a")
	put := e.do("PUT", "/rooms/defaults/views", a, map[string]any{"id": "v1", "expr": "1"}).must(t, 201)
	if got := path(put.body, "definition", "scope"); got != "a" || put.num("seq") == 0 {
		t.Fatalf("PUT /views: scope %v, seq %d", got, put.num("seq"))
	}
	blt := e.invoke(rm, a, "_register_view", map[string]any{"id": "v2", "expr": "2"}).must(t, 200)
	if got := path(blt.body, "builtin_result", "definition", "scope"); got != "a" || path(blt.body, "builtin_result", "seq") == float64(0) {
		t.Fatalf("_register_view: %s", blt.raw)
	}
	if r := e.do("PUT", "/rooms/defaults/views", rm.token, map[string]any{"id": "v3", "expr": "3"}).must(t, 201); path(r.body, "definition", "scope") != "_shared" {
		t.Fatalf("room token's view: %s", r.raw)
	}
	act := e.do("PUT", "/rooms/defaults/actions", a, map[string]any{"id": "x", "writes": []any{map[string]any{"key": "k", "value": 1}}}).must(t, 201)
	if act.num("seq") != e.seq(rm) {
		t.Fatalf("action registration seq %d, room seq %d", act.num("seq"), e.seq(rm))
	}
}

// A refused precondition names the clause that did not hold and what it
// read (it repeated the whole if, so out of turn, an occupied cell and a
// finished game looked the same); eval binds params to try an if, and a
// wait that times out says which clause was unmet.
func TestPreconditionExplained(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("ttt", nil)
	x := e.join(rm, "X")
	e.do("PUT", "/rooms/ttt/state/batch", rm.token, map[string]any{"writes": []any{
		map[string]any{"scope": "_shared", "key": "turn", "value": "O"},
		map[string]any{"scope": "_shared", "key": "board", "value": map[string]any{"4": "O"}},
	}}).must(t, 200)
	guard := `state._shared.turn == self && !(string(params.cell) in state._shared.board)`
	e.do("PUT", "/rooms/ttt/actions", rm.token, map[string]any{"id": "move", "params": map[string]any{"cell": map[string]any{"type": "integer"}},
		"if": guard, "writes": []any{map[string]any{"key": "last", "value": "${params.cell}"}}}).must(t, 201)

	r := e.invoke(rm, x, "move", map[string]any{"cell": 4})
	if r.str("error") != "precondition_failed" || r.str("clause") != "state._shared.turn == self" || path(r.body, "read", "state._shared.turn") != "O" {
		t.Fatalf("out of turn: %d %s", r.status, r.raw)
	}
	e.do("PUT", "/rooms/ttt/state", rm.token, map[string]any{"scope": "_shared", "key": "turn", "value": "X"}).must(t, 200)
	r = e.invoke(rm, x, "move", map[string]any{"cell": 4})
	if r.str("clause") != "!(string(params.cell) in state._shared.board)" || path(r.body, "read", "params.cell") != float64(4) {
		t.Fatalf("occupied cell: %s", r.raw)
	}
	ev := e.do("POST", "/rooms/ttt/eval", x, map[string]any{"expr": guard, "params": map[string]any{"cell": 4}}).must(t, 200)
	if ev.body["value"] != false || path(ev.body, "unmet", "clause") != "!(string(params.cell) in state._shared.board)" {
		t.Fatalf("eval with params: %s", ev.raw)
	}
	if ev := e.do("POST", "/rooms/ttt/eval", x, map[string]any{"expr": guard, "params": map[string]any{"cell": 5}}).must(t, 200); ev.body["value"] != true {
		t.Fatalf("eval with a free cell: %s", ev.raw)
	}
	w := e.do("GET", "/rooms/ttt/wait?timeout=300&condition="+url.QueryEscape(`state._shared.turn == "O"`), x, nil).must(t, 200)
	if w.body["timeout"] != true || path(w.body, "unmet", "read", "state._shared.turn") != "X" {
		t.Fatalf("wait timeout: %s", w.raw)
	}
}

// A wait with context=none answers only whether the condition held, with
// the room seq, and marks nothing read; bad values are refused.
func TestWaitWithoutContext(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("bare", nil)
	a := e.join(rm, "a")
	e.do("PUT", "/rooms/bare/state", rm.token, map[string]any{"scope": "_shared", "key": "go", "value": true}).must(t, 200)
	e.invoke(rm, rm.token, "_send_message", map[string]any{"body": "hi", "to": "a"}).must(t, 200)
	w := e.do("GET", "/rooms/bare/wait?context=none&condition="+url.QueryEscape("state._shared.go"), a, nil).must(t, 200)
	if w.body["triggered"] != true || w.body["context"] != nil || w.num("seq") != e.seq(rm) {
		t.Fatalf("wait with context=none: %s", w.raw)
	}
	if got := path(e.ctx(rm, a, "").body, "messages", "unread"); got != float64(1) {
		t.Fatalf("unread after a bare wait: %v (it must mark nothing read)", got)
	}
	w = e.do("GET", "/rooms/bare/wait?context=none&timeout=100&condition="+url.QueryEscape("!state._shared.go"), a, nil).must(t, 200)
	if w.body["timeout"] != true || w.body["context"] != nil || w.num("seq") == 0 {
		t.Fatalf("timed-out bare wait: %s", w.raw)
	}
	if r := e.do("GET", "/rooms/bare/wait?context=some&condition=true", a, nil); r.status != 400 {
		t.Fatalf("context=some: %d %s", r.status, r.raw)
	}
}

// The lean context is enough to act and costs little: each action shows a
// compact signature, builtins are one line, read-only callers see nothing
// they could invoke as available, and one's own messages are not unread.
func TestLeanContextEssentials(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("lean", nil)
	a := e.join(rm, "a")
	b := e.join(rm, "b")
	e.do("PUT", "/rooms/lean/actions", rm.token, map[string]any{"id": "move",
		"params": map[string]any{"cell": map[string]any{"type": "integer", "required": true, "enum": []int{0, 1, 2, 3, 4, 5, 6, 7, 8}}, "note": map[string]any{"type": "string"}},
		"writes": []any{map[string]any{"key": "last", "value": "${params.cell}"}}}).must(t, 201)
	e.ctx(rm, a, "") // an agent's first read is enriched to full (salience_test.go)
	lean := e.ctx(rm, a, "").body
	if got := path(lean, "actions", "move", "signature"); got != "move(cell*: integer 0|1|…|8, note: string)" {
		t.Fatalf("signature %v", got)
	}
	if path(lean, "actions", "_send_message") != nil || !strings.Contains(fmt.Sprint(lean["builtins"]), "_send_message {body, to?") {
		t.Fatalf("builtins at lean: %v / %v", path(lean, "actions", "_send_message"), lean["builtins"])
	}
	if full := e.ctx(rm, a, "depth=full").body; path(full, "actions", "_send_message", "builtin") != true || full["builtins"] != nil {
		t.Fatalf("builtins at full: %v", full["actions"])
	}
	if got := path(e.ctx(rm, rm.view, "").body, "actions", "move", "available"); got != false {
		t.Fatalf("move available to the view token: %v", got)
	}
	e.invoke(rm, a, "_send_message", map[string]any{"body": "mine"}).must(t, 200)
	if got := path(e.ctx(rm, a, "").body, "messages", "unread"); got != float64(0) {
		t.Fatalf("a's own message counts as unread for a: %v", got)
	}
	if got := path(e.ctx(rm, b, "").body, "messages", "unread"); got != float64(1) {
		t.Fatalf("b's unread: %v", got)
	}
}

// Registrations warn about what will not work: a view whose value is an
// error, a write to a fixed scope the action may not write.
func TestRegistrationWarnings(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("warn", nil)
	a := e.join(rm, "a")
	e.join(rm, "b")
	v := e.do("PUT", "/rooms/warn/views", a, map[string]any{"id": "broken", "expr": "state._shared.nothing_here"}).must(t, 201)
	if !strings.Contains(v.raw, `"warning":"view_error"`) {
		t.Fatalf("broken view registered without a warning: %s", v.raw)
	}
	r := e.invoke(rm, a, "_register_action", map[string]any{"id": "poke_b", "writes": []any{
		map[string]any{"scope": "b", "key": "x", "value": 1}, map[string]any{"scope": "${self}", "key": "y", "value": 1}}}).must(t, 200)
	if !strings.Contains(r.raw, `"warning":"write_scope_denied"`) || !strings.Contains(r.raw, `"scope":"b"`) {
		t.Fatalf("action writing another agent's scope registered without a warning: %s", r.raw)
	}
	ok := e.invoke(rm, a, "_register_action", map[string]any{"id": "fine", "writes": []any{map[string]any{"key": "z", "value": 1}}}).must(t, 200)
	if strings.Contains(ok.raw, "write_scope_denied") {
		t.Fatalf("a _shared write warned: %s", ok.raw)
	}
}

// A directed message to an agent the room does not have is refused, with
// the nearest id, and nothing is sent: it would raise nobody's
// directed_unread, and the sender would never know.
func TestMessageToUnknownAgentRefused(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("dm", nil)
	alice := e.join(rm, "alice")
	e.join(rm, "bob")
	r := e.invoke(rm, alice, "_send_message", map[string]any{"body": "hi", "to": []any{"bob", "bobb"}}).must(t, 400)
	if r.str("error") != "invalid_param" || r.str("did_you_mean") != "bob" {
		t.Errorf("refusal: %v", r.body)
	}
	msgs := e.do("GET", "/rooms/dm/context?only=messages", rm.token, nil).must(t, 200).body["messages"].(map[string]any)
	if msgs["count"].(float64) != 0 {
		t.Errorf("the refused message was sent: %v", msgs)
	}
	e.invoke(rm, alice, "_send_message", map[string]any{"body": "hi", "to": "bob"}).must(t, 200)
}

// A cooldown is reported as one (until when, how long left), not as the
// self-deleting timer entry behind it; the _register_view builtin returns
// the view's value as the views route does (issue 16, seed 001).
func TestCooldownShapeAndRegisterViewValue(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("cd", nil)
	a := e.join(rm, "a")
	e.do("PUT", "/rooms/cd/actions", rm.token, map[string]any{"id": "shout", "on_invoke": map[string]any{"timer": map[string]any{"ms": 600000}},
		"writes": []any{map[string]any{"key": "n", "increment": 1}}}).must(t, 201)
	e.invoke(rm, a, "shout", nil).must(t, 200)
	for name, cd := range map[string]any{
		"error":   e.invoke(rm, a, "shout", nil).must(t, 409).body["cooldown"],
		"context": path(e.ctx(rm, a, "depth=full").body, "actions", "shout", "cooldown"),
		"actions": path(e.do("GET", "/rooms/cd/actions/shout", a, nil).must(t, 200).body, "cooldown"),
	} {
		m, _ := cd.(map[string]any)
		if m["until"] == nil || m["ms_left"] == nil || m["effect"] != nil || m["expires_at"] != nil {
			t.Errorf("cooldown in %s: %v", name, cd)
		}
	}
	e.do("PUT", "/rooms/cd/state", rm.token, map[string]any{"scope": "_shared", "key": "n2", "value": 20}).must(t, 200)
	r := e.invoke(rm, a, "_register_view", map[string]any{"id": "double", "scope": "_shared", "expr": "state._shared.n2 * 2"}).must(t, 200)
	if v := path(r.body, "builtin_result", "value"); v != float64(40) {
		t.Fatalf("_register_view value: %v (%s)", v, r.raw)
	}
}

// An increment reads the stored value as a number as it always did
// (issue 32 moved that decoding off json.Decoder): a number, a number in
// a string, and anything else refused as not_numeric.
func TestIncrementReadsStoredNumber(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("incr", nil)
	for k, v := range map[string]any{"n": 41, "f": 1.5, "s": "12", "word": "abc", "obj": map[string]any{"a": 1}, "big": 9007199254740993} {
		e.do("PUT", "/rooms/incr/state", rm.token, map[string]any{"scope": "_shared", "key": k, "value": v}).must(t, 200)
	}
	for k, want := range map[string]string{"n": "42", "f": "2.5", "s": "13", "big": "9007199254740994", "word": "not_numeric", "obj": "not_numeric"} {
		r := e.do("PUT", "/rooms/incr/state", rm.token, map[string]any{"scope": "_shared", "key": k, "increment": 1})
		if want == "not_numeric" {
			if r.status != 409 && r.status != 422 && r.status != 400 || r.str("error") != want {
				t.Errorf("%s: %d %s, want %s", k, r.status, r.raw, want)
			}
			continue
		}
		if r.status != 200 || !strings.Contains(r.raw, `"value":`+want+`,`) {
			t.Errorf("%s: %d %s, want the value %s", k, r.status, r.raw, want)
		}
	}
}
