package rest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/loom/loomtest"
	"github.com/syncsubstrate/sync/substrate/rest"
)

// The room token has no stored position: "→ switch to 2" then "→ add" in
// the same call attaches under node 2, and an add with no place in a new
// call is refused (400, with the way out), never put under the root.
func TestLoomRoomTokenPosition(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("loomy", nil)
	post := func(cmds string) resp {
		return e.do("POST", "/rooms/loomy/loom", rm.token, map[string]any{"commands": cmds})
	}
	post("→ new tree \"t\" \"root\"\n→ add \"two\"\n→ add \"three\"").must(t, 200)
	res := post("→ switch to 2\n→ add \"under two\"").must(t, 200)
	if s := res.str("text"); !strings.Contains(s, "✓ at node 2") || !strings.Contains(s, "✓ node 4 (child of 2, branch 2.2)") {
		t.Fatalf("switch then add: %s", s)
	}
	res = post("→ add \"where?\"")
	if res.status != 400 || res.str("error") != "invalid_field" || !strings.Contains(res.str("message"), "add needs a place") ||
		!strings.Contains(res.str("hint"), "→ add from:N") {
		t.Fatalf("add with no position: %d %s", res.status, res.raw)
	}
	if s := post("→ tree summary").must(t, 200).str("text"); !strings.Contains(s, "4 nodes") {
		t.Fatalf("the refused add wrote: %s", s)
	}
	res = post("→ add from:4 \"under four\"").must(t, 200)
	if s := res.str("text"); !strings.Contains(s, "✓ node 5 (child of 4") {
		t.Fatalf("explicit from: %s", s)
	}
}

// A call with a line that does not parse: 400 invalid_field, nothing ran,
// every line's outcome in order in the message and as steps.
func TestLoomUnparsedLineRefusesTheCall(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("loomz", nil)
	post := func(cmds string) resp {
		return e.do("POST", "/rooms/loomz/loom", rm.token, map[string]any{"commands": cmds})
	}
	post("→ new tree \"t\" \"root\"").must(t, 200)
	res := post("→ add from:1 \"two\"\n→ view 1 bogus\n→ tree")
	msg := res.str("message")
	if res.status != 400 || res.str("error") != "invalid_field" || !strings.HasPrefix(msg, "✗ nothing ran: 1 of the 3 commands did not parse.") ||
		!strings.Contains(msg, "→ view 1 bogus\n✗ view does not take \"bogus\"") || !strings.Contains(res.str("hint"), "nothing in it ran") {
		t.Fatalf("%d %s", res.status, res.raw)
	}
	steps, _ := res.body["steps"].([]any)
	if len(steps) != 3 {
		t.Fatalf("steps: %s", res.raw)
	}
	for i, want := range []string{"not_run", "invalid_field", "not_run"} {
		if s, _ := steps[i].(map[string]any); s["error"] != want {
			t.Fatalf("step %d: %v", i, steps[i])
		}
	}
	if s := post("→ tree summary").must(t, 200).str("text"); !strings.Contains(s, "1 nodes") {
		t.Fatalf("the refused call wrote: %s", s)
	}
}

// restRunner posts commands to the room's loom with token.
func (e *env) restRunner(rm room, token string) loomtest.Runner {
	return func(cmds string) (string, error) {
		res := e.do("POST", "/rooms/"+rm.id+"/loom", token, map[string]any{"commands": cmds})
		if res.status != 200 {
			return "", fmt.Errorf("%d %s", res.status, res.raw)
		}
		return res.str("text"), nil
	}
}

// The real-size loom over REST: a fulfil of tree 1's request by a person
// standing in tree 3, then more nodes in tree 1 from both people, each a
// new node; a call that names its start (tree, node) adds there; a start
// that is half given is refused.
func TestLoomFulfilThenGrowOverREST(t *testing.T) {
	e := newEnvWith(t, rest.Options{}, substrate.Limits{})
	rm := e.room("weave", nil)
	tok := map[string]string{}
	for _, id := range []string{"alice", "bob", "claude"} {
		tok[id] = e.join(rm, id)
	}
	f, err := loomtest.Build(loomtest.Who{Admin: e.restRunner(rm, rm.token), Alice: e.restRunner(rm, tok["alice"]), Bob: e.restRunner(rm, tok["bob"]),
		Model: e.restRunner(rm, tok["claude"]), AliceID: "alice", BobID: "bob", ModelID: "claude"})
	if err != nil {
		t.Fatal(err)
	}
	one := f.Trees[0]
	post := func(who string, body map[string]any) resp {
		return e.do("POST", "/rooms/weave/loom", tok[who], body)
	}
	res := post("alice", map[string]any{"commands": fmt.Sprintf(`→ fulfil %s "alice writes it"`, one.Request)}).must(t, 200)
	if s := res.str("text"); !strings.Contains(s, fmt.Sprintf("✓ node %d fulfils %s", one.Nodes+1, one.Request)) {
		t.Fatalf("fulfil: %s", s)
	}
	res = post("alice", map[string]any{"commands": fmt.Sprintf(`→ add from:%d tree:1 "alice goes on"`, one.AliceLeaf)})
	if res.status != 200 || !strings.Contains(res.str("text"), fmt.Sprintf("✓ node %d (child of %d", one.Nodes+2, one.AliceLeaf)) {
		t.Fatalf("alice's next node: %d %s", res.status, res.raw)
	}
	// bob names the node he reads; his agent stands in tree 3.
	res = post("bob", map[string]any{"commands": `→ add "bob goes on"`, "tree": 1, "node": one.BobLeaf})
	if res.status != 200 || !strings.Contains(res.str("text"), fmt.Sprintf("✓ node %d (child of %d", one.Nodes+3, one.BobLeaf)) {
		t.Fatalf("bob's next node: %d %s", res.status, res.raw)
	}
	if s := post("bob", map[string]any{"commands": "→ tree summary tree:1"}).must(t, 200).str("text"); !strings.Contains(s, fmt.Sprintf("%d nodes", one.Nodes+3)) {
		t.Fatalf("tree 1: %s", s)
	}
	res = post("bob", map[string]any{"commands": `→ add "where?"`, "tree": 1})
	if res.status != 400 || res.str("error") != "invalid_field" || !strings.Contains(res.str("hint"), "give both") {
		t.Fatalf("a half-given start: %d %s", res.status, res.raw)
	}
}
