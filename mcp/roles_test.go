package mcp_test

import (
	"fmt"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// Seed 003 §V: define_role takes bootstrap_actions (standard-library ids or
// definitions) and bootstrap_views, and the role's first fill registers
// them as the role's agent; later fills inherit them with the agent.
// (TestAttackRoleBootstrapBorrowsNoAuthority: with whose authority.)
func TestRoleBootstrap(t *testing.T) {
	srv, as, bs, alice := roleLab(t)
	// The seed's researcher: a library action, an action of its own and a
	// progress view.
	mustTool(t, as, "sync_invoke_action", map[string]any{"action": "define_role", "params": map[string]any{
		"role_id": "researcher", "description": "Find and assess relevant sources",
		"bootstrap_actions": []any{"submit_result", map[string]any{"id": "submit_source", "params": map[string]any{"url": map[string]any{"type": "string", "required": true}},
			"writes": []any{map[string]any{"scope": "_shared", "key": "sources", "merge": map[string]any{"${params.url}": "${self}"}}}}},
		"bootstrap_views": []any{map[string]any{"id": "research_progress", "scope": "_shared", "expr": `has(state._shared.sources) ? size(state._shared.sources) : 0`}},
	}})
	mustTool(t, as, "sync_disembody", nil)

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
}

// roleLab is room lab, owned by alice (embodied, as), shared with bob as a
// participant (bs, not embodied), with the standard library's define_role
// and fill_role registered.
func roleLab(t *testing.T) (srv *server, as, bs *sdk.ClientSession, alice *person) {
	t.Helper()
	srv = startServer(t, pgtest.New(t))
	alice, bob := signup(t, srv, "alice"), signup(t, srv, "bob")
	as = connectWithToken(t, srv, mintToken(t, srv, alice, nil)["access_token"].(string))
	mustTool(t, as, "sync_create_room", map[string]any{"room": "lab"})
	mustTool(t, as, "sync_share_room", map[string]any{"room": "lab", "username": "bob", "role": "participant"})
	mustTool(t, as, "sync_embody", map[string]any{"room": "lab"})
	lib := mustTool(t, as, "sync_help", map[string]any{"key": "standard_library"})
	for _, d := range asList(lib["content"]) {
		if def := d.(map[string]any); def["id"] == "define_role" || def["id"] == "fill_role" {
			mustTool(t, as, "sync_register_action", def)
		}
	}
	bs = connectWithToken(t, srv, mintToken(t, srv, bob, map[string]string{"lab": "write"})["access_token"].(string))
	return srv, as, bs, alice
}
