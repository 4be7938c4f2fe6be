package mcp_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// Seed 003 §V: define_role takes bootstrap_actions (standard-library ids or
// definitions) and bootstrap_views, and the role's first fill registers
// them as the role's agent; later fills inherit them with the agent.
//
// Attacks: the bootstrap runs with the role agent's own authority (its
// scope and _shared), not with the filler's: a participant who defines a
// role cannot, through an owner filling it, plant an action in the owner's
// scope or replace the owner's action.
func TestRoleBootstrap(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	alice, bob := signup(t, srv, "alice"), signup(t, srv, "bob")
	as := connectWithToken(t, srv, mintToken(t, srv, alice, nil)["access_token"].(string))
	mustTool(t, as, "sync_create_room", map[string]any{"room": "lab"})
	mustTool(t, as, "sync_share_room", map[string]any{"room": "lab", "username": "bob", "role": "participant"})
	mustTool(t, as, "sync_embody", map[string]any{"room": "lab"})
	lib := mustTool(t, as, "sync_help", map[string]any{"key": "standard_library"})
	for _, d := range asList(lib["content"]) {
		if def := d.(map[string]any); def["id"] == "define_role" || def["id"] == "fill_role" {
			mustTool(t, as, "sync_register_action", def)
		}
	}
	// The seed's researcher: a library action, an action of its own and a
	// progress view.
	mustTool(t, as, "sync_invoke_action", map[string]any{"action": "define_role", "params": map[string]any{
		"role_id": "researcher", "description": "Find and assess relevant sources",
		"bootstrap_actions": []any{"submit_result", map[string]any{"id": "submit_source", "params": map[string]any{"url": map[string]any{"type": "string", "required": true}},
			"writes": []any{map[string]any{"scope": "_shared", "key": "sources", "merge": map[string]any{"${params.url}": "${self}"}}}}},
		"bootstrap_views": []any{map[string]any{"id": "research_progress", "scope": "_shared", "expr": `has(state._shared.sources) ? size(state._shared.sources) : 0`}},
	}})
	mustTool(t, as, "sync_disembody", nil)

	bs := connectWithToken(t, srv, mintToken(t, srv, bob, map[string]string{"lab": "write"})["access_token"].(string))
	emb := mustTool(t, bs, "sync_embody", map[string]any{"room": "lab", "role": "researcher"})
	if got := fmt.Sprint(emb["bootstrap"]); got != "[map[id:submit_result kind:action] map[id:submit_source kind:action] map[id:research_progress kind:view]]" {
		t.Fatalf("first fill's bootstrap: %v", emb)
	}
	mustTool(t, bs, "sync_invoke_action", map[string]any{"action": "submit_source", "params": map[string]any{"url": "arxiv.org/1"}})
	ctx := mustTool(t, bs, "sync_read_context", map[string]any{"depth": "full"})
	if get(ctx, "views", "research_progress") != float64(1) || get(ctx, "actions", "submit_source", "registered_by") != "researcher" {
		t.Fatalf("bootstrapped vocabulary: views %v, submit_source %v", ctx["views"], get(ctx, "actions", "submit_source"))
	}
	// Filled again after a vacancy: the agent keeps its vocabulary, and
	// nothing is registered twice.
	mustTool(t, bs, "sync_disembody", nil)
	as2 := connectWithToken(t, srv, mintToken(t, srv, alice, map[string]string{"lab": "admin"})["access_token"].(string))
	if again := mustTool(t, as2, "sync_embody", map[string]any{"room": "lab", "role": "researcher"}); again["bootstrap"] != nil || again["taken_over"] != true {
		t.Fatalf("second fill: %v", again)
	}
	mustTool(t, as2, "sync_disembody", nil)

	// Bob (a participant) defines a role whose bootstrap would act in
	// alice's scope and replace her define_role; alice, the owner, fills it.
	mustTool(t, bs, "sync_embody", map[string]any{"room": "lab"})
	mustTool(t, bs, "sync_invoke_action", map[string]any{"action": "define_role", "params": map[string]any{
		"role_id": "mole", "description": "harmless",
		"bootstrap_actions": []any{
			map[string]any{"id": "grab", "scope": "alice:conformance", "writes": []any{map[string]any{"scope": "alice:conformance", "key": "x", "value": 1}}},
			map[string]any{"id": "define_role", "writes": []any{map[string]any{"scope": "_shared", "key": "pwned", "value": true}}},
		},
		"bootstrap_views": []any{map[string]any{"id": "peek", "scope": "alice:conformance", "expr": `state["alice:conformance"]`}},
	}})
	emb = mustTool(t, as2, "sync_embody", map[string]any{"room": "lab", "role": "mole"})
	got := fmt.Sprint(emb["bootstrap"])
	if strings.Count(got, "error:") != 3 || !strings.Contains(got, "scope_denied") || !strings.Contains(got, "action_owned") {
		t.Fatalf("HOLE: the mole's bootstrap borrowed the owner's authority: %v", emb["bootstrap"])
	}
	ctx = mustTool(t, as2, "sync_read_context", map[string]any{"depth": "full"})
	if get(ctx, "actions", "grab") != nil || get(ctx, "views", "peek") != nil || get(ctx, "actions", "define_role", "registered_by") != "alice:conformance" {
		t.Fatalf("HOLE: bootstrap registered across authority: grab %v, peek %v, define_role %v",
			get(ctx, "actions", "grab"), get(ctx, "views", "peek"), get(ctx, "actions", "define_role"))
	}
}

// Seed 003 §XI: embodying gives the agent the role mcp-client (unless it
// fills a role) and grants by the user's access level: room authority for
// an owner at the admin level, the communal scopes for owners and
// collaborators at write, nothing for participants; observers cannot
// embody at all.
//
// Attacks: grants stored for one connection never lift another (of the
// same user, at a lower level) above its own level, in a mutation either;
// a participant whose agent a token holder granted "*" or _shared acts
// without them.
func TestEmbodyGrantsByAccess(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	alice, bob, carol, dan := signup(t, srv, "alice"), signup(t, srv, "bob"), signup(t, srv, "carol"), signup(t, srv, "dan")
	as := connectWithToken(t, srv, mintToken(t, srv, alice, nil)["access_token"].(string))
	mustTool(t, as, "sync_create_room", map[string]any{"room": "hall"})
	mustTool(t, as, "sync_share_room", map[string]any{"room": "hall", "username": "bob", "role": "participant"})
	mustTool(t, as, "sync_share_room", map[string]any{"room": "hall", "username": "carol", "role": "collaborator"})
	mustTool(t, as, "sync_share_room", map[string]any{"room": "hall", "username": "dan", "role": "observer"})
	if e := mustTool(t, as, "sync_embody", map[string]any{"room": "hall"}); e["role"] != "mcp-client" {
		t.Fatalf("embodiment role: %v", e["role"])
	}
	bs := connectWithToken(t, srv, mintToken(t, srv, bob, map[string]string{"hall": "write"})["access_token"].(string))
	cs := connectWithToken(t, srv, mintToken(t, srv, carol, map[string]string{"hall": "write"})["access_token"].(string))
	ds := connectWithToken(t, srv, mintToken(t, srv, dan, map[string]string{"hall": "read"})["access_token"].(string))
	mustTool(t, bs, "sync_embody", map[string]any{"room": "hall"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "hall"})
	if out, isErr := callTool(t, ds, "sync_embody", map[string]any{"room": "hall"}); !isErr {
		t.Fatalf("HOLE: an observer embodied: %v", out)
	}
	grants := func() map[string]string {
		list, err := srv.svc.ListAgents(context.Background(), substrate.RoomPrincipal("hall"), "hall")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, a := range list {
			out[a.ID] = a.Role + fmt.Sprint(a.Grants)
		}
		return out
	}
	want := map[string]string{"alice:conformance": "mcp-client[*]", "bob:conformance": "mcp-client[]", "carol:conformance": "mcp-client[_shared _messages]"}
	if got := grants(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("grants by access: %v, want %v", got, want)
	}

	// Alice on a write-level connection drives the same agent; her admin
	// connection embodies again and stores "*". The write connection must
	// not use it: registering in bob's scope needs room authority.
	aw := connectWithToken(t, srv, mintToken(t, srv, alice, map[string]string{"hall": "write"})["access_token"].(string))
	mustTool(t, aw, "sync_embody", map[string]any{"room": "hall"})
	mustTool(t, as, "sync_embody", map[string]any{"room": "hall"})
	if g := grants()["alice:conformance"]; g != "mcp-client[*]" {
		t.Fatalf("admin re-embodiment: %v", g)
	}
	if out, isErr := callTool(t, aw, "sync_register_action", map[string]any{"id": "plant", "scope": "bob:conformance",
		"writes": []any{map[string]any{"scope": "bob:conformance", "key": "x", "value": 1}}}); !isErr || out["error"] != "scope_denied" {
		t.Fatalf("HOLE: a write-level connection used the stored room authority: %v", out)
	}
	mustTool(t, as, "sync_register_action", map[string]any{"id": "plant", "scope": "bob:conformance",
		"writes": []any{map[string]any{"scope": "bob:conformance", "key": "x", "value": 1}}})

	// A token holder grants bob's agent "*": bob, a participant, still
	// cannot replace alice's action.
	if _, err := srv.svc.UpdateAgent(context.Background(), substrate.RoomPrincipal("hall"), "hall", "bob:conformance", substrate.AgentUpdate{Grants: &[]string{"*", "_shared"}}); err != nil {
		t.Fatal(err)
	}
	mustTool(t, as, "sync_register_action", map[string]any{"id": "keep", "writes": []any{map[string]any{"key": "k", "value": 1}}})
	if out, isErr := callTool(t, bs, "sync_register_action", map[string]any{"id": "keep", "writes": []any{map[string]any{"key": "y", "value": 1}}}); !isErr || out["error"] != "action_owned" {
		t.Fatalf("HOLE: a participant used a token holder's \"*\": %v", out)
	}
}
