package mcp_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// A refused call leaves the session and the room exactly as they were: the
// same embodiment, focus and scope, the same state, actions, views,
// agents and messages (the room's _audit log records a refused invocation,
// which is what it is for). One refusal per tool that changes something;
// a refused sync_embody used to drop the agent the person was embodied as.
func TestRefusedCallsChangeNothing(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	_, room, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": "lab"})
	tok := room["token"].(string)
	restCall(ctx, srv.base, "POST", "/rooms/lab/agents", tok, map[string]any{"id": "stranger", "name": "Stranger"})
	alice := owner(t, srv, "alice", "lab", tok)
	cs := connect(t, alice, map[string]string{"lab": "admin"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "lab"})
	mustTool(t, cs, "sync_register_action", map[string]any{"id": "claim", "params": map[string]any{"task": map[string]any{"type": "string", "required": true}},
		"if": "!(params.task in state._shared)", "writes": []any{map[string]any{"scope": "_shared", "key": "${params.task}", "value": "${self}"}}})
	mustTool(t, cs, "sync_register_view", map[string]any{"id": "count", "expr": "size(state._shared)", "scope": "_shared"})
	mustTool(t, cs, "sync_invoke_action", map[string]any{"action": "claim", "params": map[string]any{"task": "t1"}})
	mustTool(t, cs, "sync_loom", map[string]any{"commands": `→ new tree "notes" "first words"`})

	// What a refusal must not change: the session as the lobby shows it
	// and the room as its token reads it.
	snapshot := func() any {
		lobby := mustTool(t, cs, "sync_lobby", nil)
		// A refused invocation is recorded in the room's _audit log, which
		// moves the room's seq; nothing else.
		for _, r := range lobby["rooms"].([]any) {
			delete(r.(map[string]any)["state_summary"].(map[string]any), "seq")
		}
		_, env, _ := restCall(ctx, srv.base, "GET", "/rooms/lab/context?depth=full&messages_limit=500", tok, nil)
		delete(env, "_context")
		for _, a := range env["agents"].(map[string]any) {
			delete(a.(map[string]any), "last_heartbeat")
		}
		return normalise(map[string]any{"lobby": lobby, "room": env})
	}
	refusals := []struct {
		tool string
		args map[string]any
	}{
		{"sync_embody", map[string]any{"room": "lab", "role": "ghost"}},
		{"sync_embody", map[string]any{"room": "lab", "agent": "stranger"}},
		{"sync_embody", map[string]any{"room": "lab", "context": "everything"}},
		{"sync_register_action", map[string]any{"id": "define_role"}},
		{"sync_register_action", map[string]any{"id": "claim", "if": "(", "writes": []any{map[string]any{"key": "x", "value": 1}}}},
		{"sync_register_view", map[string]any{"id": "count", "expr": "size("}},
		{"sync_invoke_action", map[string]any{"action": "claim", "params": map[string]any{"task": "t1"}}},
		{"sync_invoke_action", map[string]any{"action": "claim", "params": map[string]any{"task": 7}}},
		{"sync_invoke_action", map[string]any{"action": "clam"}},
		{"sync_send_message", map[string]any{"message": "hi"}},
		{"sync_delete_action", map[string]any{"id": "nope"}},
		{"sync_delete_view", map[string]any{"id": "nope"}},
		{"sync_create_room", map[string]any{"room": "lab"}},
		{"sync_share_room", map[string]any{"room": "lab", "username": "nobody"}},
		{"sync_restrict_scope", map[string]any{"scope": "bogus"}},
		{"sync_revoke_access", map[string]any{"room": "nope"}},
		{"sync_wait", map[string]any{"condition": "size(state._shared)"}},
		{"sync_loom", map[string]any{"commands": "→ frobnicate"}},
		{"sync_read_context", map[string]any{"room": "nope"}},
	}
	for _, r := range refusals {
		before := snapshot()
		out, isErr := callTool(t, cs, r.tool, r.args)
		if !isErr {
			t.Errorf("%s %v was not refused: %v", r.tool, r.args, out)
			continue
		}
		if after := snapshot(); !reflect.DeepEqual(before, after) {
			b, _ := json.Marshal(before)
			a, _ := json.Marshal(after)
			t.Errorf("refused %s %v changed the session or the room:\nbefore %s\nafter  %s", r.tool, r.args, b, a)
		}
	}
	// The session is still embodied and acts.
	mustTool(t, cs, "sync_invoke_action", map[string]any{"action": "claim", "params": map[string]any{"task": "t2"}})
}
