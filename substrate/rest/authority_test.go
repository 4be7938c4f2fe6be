package rest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/substrate/rest"
)

// The privacy and authority matrix: every credential against every
// operation. Allowed calls succeed; refused ones get 401/403 and leave the
// room exactly as it was (its seq does not move and the probed key stays).
func TestAuthorityMatrix(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("matrix", nil)
	other := e.room("elsewhere", nil)
	creds := map[string]string{
		"room":    rm.token,
		"view":    rm.view,
		"agentA":  e.join(rm, "a"),
		"agentB":  e.join(rm, "b"),
		"granted": e.join(rm, "g", "_shared", "b"),
		"star":    e.join(rm, "s", "*"),
		"none":    "",
		"foreign": other.token,
		"bogus":   "room_notarealtoken",
	}
	// An action for the invoke rows, carrying the room's authority.
	e.do("PUT", "/rooms/matrix/actions", rm.token, map[string]any{"id": "bump",
		"writes": []any{map[string]any{"key": "bumps", "increment": 1}}}).must(t, 201)
	// Seed one entry per scope so reads and deletes have a target.
	for _, sc := range []string{"_shared", "a", "b", "_messages"} {
		e.do("PUT", "/rooms/matrix/state", rm.token, map[string]any{"scope": sc, "key": "k", "value": "seed"}).must(t, 200)
	}

	type op struct {
		name   string
		method string
		path   string
		body   any
		// allowed lists the credentials that succeed; ok is their status.
		allowed []string
		ok      int
	}
	all := []string{"room", "view", "agentA", "agentB", "granted", "star"}
	agents := []string{"room", "agentA", "agentB", "granted", "star"}
	writers := func(extra ...string) []string { return append([]string{"room", "star"}, extra...) }
	put := func(scope string) map[string]any {
		return map[string]any{"scope": scope, "key": "k", "value": "changed"}
	}
	ops := []op{
		{"get room", "GET", "/rooms/matrix", nil, all, 200},
		{"list rooms", "GET", "/rooms", nil, append(all, "foreign"), 200}, // each token lists its own room
		{"list agents", "GET", "/rooms/matrix/agents", nil, all, 200},
		{"read whole state", "GET", "/rooms/matrix/state", nil, all, 200},
		{"read _shared", "GET", "/rooms/matrix/state?scope=_shared", nil, all, 200},
		{"read _messages", "GET", "/rooms/matrix/state?scope=_messages", nil, all, 200},
		{"read scope a", "GET", "/rooms/matrix/state?scope=a&key=k", nil, []string{"room", "view", "agentA", "star"}, 200},
		{"read scope b", "GET", "/rooms/matrix/state?scope=b", nil, []string{"room", "view", "agentB", "granted", "star"}, 200},
		{"read _audit", "GET", "/rooms/matrix/state?scope=_audit", nil, []string{"room", "view", "star"}, 200},
		{"write _shared", "PUT", "/rooms/matrix/state", put("_shared"), writers("granted"), 200},
		{"write scope a", "PUT", "/rooms/matrix/state", put("a"), writers("agentA"), 200},
		{"write scope b", "PUT", "/rooms/matrix/state", put("b"), writers("agentB", "granted"), 200},
		{"write _messages", "PUT", "/rooms/matrix/state", map[string]any{"scope": "_messages", "append": true, "value": "hi"}, writers(), 200},
		{"write _audit", "PUT", "/rooms/matrix/state", put("_audit"), nil, 200},
		{"batch a+b", "PUT", "/rooms/matrix/state/batch", map[string]any{"writes": []any{put("a"), put("b")}}, writers(), 200},
		{"delete a/k", "DELETE", "/rooms/matrix/state?scope=a&key=k", nil, writers("agentA"), 200},
		{"patch agent b", "PATCH", "/rooms/matrix/agents/b", map[string]any{"role": "boss"}, writers(), 200},
		{"heartbeat a", "POST", "/rooms/matrix/agents/a/heartbeat", nil, writers("agentA"), 200},
		{"join new agent", "POST", "/rooms/matrix/agents", map[string]any{"id": "newbie", "name": "N"}, writers(), 201},
		// Acting and shaping the room: every credential that can act may
		// invoke and register (an agent's registrations carry its own
		// authority); the view token and strangers may do neither.
		{"invoke action", "POST", "/rooms/matrix/actions/bump/invoke", map[string]any{}, agents, 200},
		{"register action", "PUT", "/rooms/matrix/actions", nil, agents, 201},
		{"register view", "PUT", "/rooms/matrix/views", nil, agents, 201},
	}
	for _, o := range ops {
		for cred, tok := range creds {
			t.Run(fmt.Sprintf("%s/%s", o.name, cred), func(t *testing.T) {
				before := e.seq(rm)
				bumpsBefore := 0
				if n := e.do("GET", "/rooms/matrix/state?scope=_shared&key=bumps", rm.token, nil); n.status == 200 {
					bumpsBefore = int(n.body["value"].(float64))
				}
				body := o.body
				switch o.name {
				case "join new agent":
					body = map[string]any{"id": "newbie-" + cred, "name": "N"}
				case "register action":
					body = map[string]any{"id": "act-" + cred, "writes": []any{map[string]any{"key": "n-" + cred, "value": 1}}}
				case "register view":
					body = map[string]any{"id": "view-" + cred, "expr": "size(state._shared)"}
				}
				r := e.do(o.method, o.path, tok, body)
				allowed := false
				for _, c := range o.allowed {
					allowed = allowed || c == cred
				}
				if allowed {
					r.must(t, o.ok)
					if o.name == "delete a/k" { // put the target back
						e.do("PUT", "/rooms/matrix/state", rm.token, map[string]any{"scope": "a", "key": "k", "value": "seed"}).must(t, 200)
					}
					return
				}
				if r.status != 401 && r.status != 403 {
					t.Fatalf("%s with %s: status %d, want 401 or 403: %s", o.name, cred, r.status, r.raw)
				}
				if r.str("error") == "" || r.str("message") == "" {
					t.Fatalf("refusal without error code or message: %s", r.raw)
				}
				after := e.seq(rm)
				if o.name == "invoke action" && cred == "view" {
					// Every refused invocation by a caller the room knows is
					// audited (and nothing else written): one _audit entry.
					last := e.do("GET", "/rooms/matrix/state?scope=_audit&after="+fmt.Sprint(before), rm.token, nil).must(t, 200).raw
					if after != before+1 || !strings.Contains(last, `"ok":false`) || !strings.Contains(last, "read_only_token") {
						t.Fatalf("refused %s with %s: seq %d → %d, last audit entry %s", o.name, cred, before, after, last)
					}
					before++
				}
				if after != before {
					t.Fatalf("refused %s with %s moved the room's seq %d → %d", o.name, cred, before, after)
				}
				if o.name == "invoke action" {
					if n := e.do("GET", "/rooms/matrix/state?scope=_shared&key=bumps", rm.token, nil); n.status != 404 && n.body["value"] != float64(bumpsBefore) {
						t.Fatalf("refused invocation with %s changed bumps: %s", cred, n.raw)
					}
				}
			})
		}
	}
}

// An agent's whole-state read shows _shared, communal scopes, its own scope
// and granted scopes, and never another agent's private scope or _audit.
func TestWholeStateVisibility(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("vis", nil)
	aTok := e.join(rm, "a")
	gTok := e.join(rm, "g", "b")
	e.join(rm, "b")
	for _, sc := range []string{"_shared", "a", "b", "_tasks"} {
		e.do("PUT", "/rooms/vis/state", rm.token, map[string]any{"scope": sc, "key": "k", "value": sc}).must(t, 200)
	}
	scopes := func(tok string) map[string]bool {
		r := e.do("GET", "/rooms/vis/state", tok, nil).must(t, 200)
		got := map[string]bool{}
		for _, it := range r.body["entries"].([]any) {
			got[it.(map[string]any)["scope"].(string)] = true
		}
		return got
	}
	want := map[string]map[string]bool{
		aTok:     {"_shared": true, "a": true, "_tasks": true},
		gTok:     {"_shared": true, "b": true, "_tasks": true},
		rm.token: {"_shared": true, "a": true, "b": true, "_tasks": true},
		rm.view:  {"_shared": true, "a": true, "b": true, "_tasks": true},
	}
	for tok, w := range want {
		got := scopes(tok)
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("visible scopes %v, want %v", got, w)
		}
	}
	// "self" is the agent's own scope.
	r := e.do("GET", "/rooms/vis/state?scope=self&key=k", aTok, nil).must(t, 200)
	if r.str("scope") != "a" || r.body["value"] != "a" {
		t.Fatalf("scope=self read %s", r.raw)
	}
}
