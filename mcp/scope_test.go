package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/oauth/oauthtest"

	"github.com/syncsubstrate/sync/store/pgtest"
)

func connectWithToken(t testing.TB, srv *server, token string) *sdk.ClientSession {
	t.Helper()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(),
		&sdk.StreamableClientTransport{Endpoint: srv.base + "/mcp", HTTPClient: &http.Client{Transport: oauthtest.Bearer{Token: token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// Roles: embodying by role claims it once; disembodying frees it.
// Observers cannot embody. Scope narrows and never widens.
func TestRolesObserversAndScope(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	alice, bob, carol := signup(t, srv, "alice"), signup(t, srv, "bob"), signup(t, srv, "carol")
	as := connectWithToken(t, srv, mintToken(t, srv, alice, nil)["access_token"].(string))
	mustTool(t, as, "sync_create_room", map[string]any{"room": "guild"})
	mustTool(t, as, "sync_create_room", map[string]any{"room": "side"})
	mustTool(t, as, "sync_share_room", map[string]any{"room": "guild", "username": "bob", "role": "participant"})
	mustTool(t, as, "sync_share_room", map[string]any{"room": "guild", "username": "carol", "role": "observer"})
	mustTool(t, as, "sync_embody", map[string]any{"room": "guild"})
	mustTool(t, as, "sync_register_action", map[string]any{"id": "define_role", "params": map[string]any{
		"role_id": map[string]any{"type": "string", "required": true}, "description": map[string]any{"type": "string"}},
		"writes": []any{map[string]any{"key": "roles", "merge": map[string]any{"${params.role_id}": map[string]any{"description": "${params.description}", "filled_by": nil}}}}})
	mustTool(t, as, "sync_invoke_action", map[string]any{"action": "define_role", "params": map[string]any{"role_id": "scribe", "description": "keeps notes"}})
	mustTool(t, as, "sync_disembody", nil)

	bs := connectWithToken(t, srv, mintToken(t, srv, bob, map[string]string{"guild": "write"})["access_token"].(string))
	lobbyView := mustTool(t, bs, "sync_lobby", nil)
	if rooms := lobbyView["rooms"].([]any); len(rooms) != 1 || get(rooms[0].(map[string]any), "roles") == nil {
		t.Fatalf("bob's lobby: %v", lobbyView)
	}
	mustTool(t, bs, "sync_embody", map[string]any{"room": "guild", "role": "scribe"})
	as2 := connectWithToken(t, srv, mintToken(t, srv, alice, map[string]string{"guild": "write"})["access_token"].(string))
	if out, isErr := callTool(t, as2, "sync_embody", map[string]any{"room": "guild", "role": "scribe"}); !isErr {
		t.Fatalf("a filled role was filled again: %v", out)
	}
	ctx := mustTool(t, bs, "sync_read_context", nil)
	// A role's agent is named for the role (seed 003 §XI; lobby.Embody).
	if get(ctx, "state", "_shared", "roles", "scribe", "filled_by") != "scribe" || ctx["self"] != "scribe" {
		t.Fatalf("role not filled: %v", get(ctx, "state", "_shared", "roles"))
	}
	mustTool(t, bs, "sync_disembody", nil)
	ctx = mustTool(t, as2, "sync_read_context", map[string]any{"room": "guild"})
	if get(ctx, "state", "_shared", "roles", "scribe", "filled_by") != nil {
		t.Fatalf("disembody did not free the role: %v", get(ctx, "state", "_shared", "roles"))
	}

	// An observer reads communal state, never an agent's private scope,
	// sees nothing it could invoke, leaves no trace, and cannot embody.
	mustTool(t, as2, "sync_embody", map[string]any{"room": "guild"})
	mustTool(t, as2, "sync_register_action", map[string]any{"id": "stash", "scope": "alice:conformance",
		// The value is made by an expression, so the definition (public)
		// does not spell it.
		"writes": []any{map[string]any{"scope": "${self}", "key": "secret", "value": `"hidden" + " " + "plans"`, "expr": true}}})
	mustTool(t, as2, "sync_invoke_action", map[string]any{"action": "stash"})
	mustTool(t, as2, "sync_disembody", nil)
	cs := connectWithToken(t, srv, mintToken(t, srv, carol, map[string]string{"guild": "read"})["access_token"].(string))
	seen := mustTool(t, cs, "sync_read_context", map[string]any{"room": "guild", "depth": "full"})
	if raw, _ := json.Marshal(seen); strings.Contains(string(raw), "hidden plans") {
		t.Fatalf("the observer read a private scope: %s", raw)
	}
	if get(seen, "state", "_shared", "roles") == nil {
		t.Fatalf("the observer does not see communal state: %v", seen["state"])
	}
	if get(seen, "actions", "stash", "available") != false {
		t.Fatalf("stash shown available to an observer: %v", get(seen, "actions", "stash"))
	}
	if agents := seen["agents"].(map[string]any); len(agents) != 2 {
		t.Fatalf("observing left a trace (agents %v)", agents)
	}
	if out, isErr := callTool(t, cs, "sync_eval_cel", map[string]any{"room": "guild", "expr": `state["alice:conformance"].secret`}); !isErr {
		t.Fatalf("the observer evaluated a private scope: %v", out)
	}
	if out, isErr := callTool(t, cs, "sync_invoke_action", map[string]any{"action": "stash"}); !isErr || out["error"] != "not_embodied" {
		t.Fatalf("the observer invoked: %v", out)
	}
	if out, isErr := callTool(t, cs, "sync_embody", map[string]any{"room": "guild"}); !isErr || out["error"] != "forbidden" {
		t.Fatalf("observer embodied: %v", out)
	}

	// Narrowing: alice keeps only guild at read; side is gone, nothing widens.
	// A room the connection does not hold is refused, not granted.
	if out, isErr := callTool(t, as, "sync_restrict_scope", map[string]any{"scope": "rooms:guild:read rooms:other:admin create_rooms"}); !isErr {
		t.Fatalf("restrict to a room not held: %v", out)
	}
	mustTool(t, as, "sync_restrict_scope", map[string]any{"scope": "rooms:guild:read create_rooms"})
	if out, isErr := callTool(t, as, "sync_read_context", map[string]any{"room": "side"}); !isErr || out["error"] != "room_not_in_scope" {
		t.Fatalf("side still in scope: %v", out)
	}
	if out, isErr := callTool(t, as, "sync_embody", map[string]any{"room": "guild"}); !isErr {
		t.Fatalf("read-only scope embodied: %v", out)
	}
	view := mustTool(t, as, "sync_lobby", nil)
	if rooms := view["rooms"].([]any); len(rooms) != 1 || rooms[0].(map[string]any)["access"] != "read" || view["can_create_rooms"] != true {
		t.Fatalf("lobby after restrict: %v", view)
	}
}

// sync_restrict_scope refuses what it cannot honour as asked: a
// misspelt level (rooms:<id>:raed read as a room named "<id>:raed"), a
// room this connection does not hold, a shared_rooms level that is none.
// Each narrowed the connection silently, to nothing for those rooms.
func TestRestrictScopeRefusesTypos(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	alice := signup(t, srv, "alice")
	as := connectWithToken(t, srv, mintToken(t, srv, alice, nil)["access_token"].(string))
	mustTool(t, as, "sync_create_room", map[string]any{"room": "guild"})
	mustTool(t, as, "sync_create_room", map[string]any{"room": "side"})
	cs := connectWithToken(t, srv, mintToken(t, srv, alice, map[string]string{"guild": "write", "side": "read"})["access_token"].(string))
	for _, c := range []struct{ scope, mean string }{
		{"rooms:guild:raed", "rooms:guild:read"},
		{"rooms:gild:read", "guild"},
		{"rooms:side:read shared_rooms:wrte", "shared_rooms:write"},
	} {
		out, isErr := callTool(t, cs, "sync_restrict_scope", map[string]any{"scope": c.scope})
		if !isErr || out["error"] != "invalid_field" || !strings.Contains(fmt.Sprint(out), c.mean) {
			t.Errorf("restrict %q: %v", c.scope, out)
		}
	}
	if rooms := mustTool(t, cs, "sync_lobby", nil)["rooms"].([]any); len(rooms) != 2 {
		t.Fatalf("a refused restrict narrowed the connection: %v", rooms)
	}
	mustTool(t, cs, "sync_restrict_scope", map[string]any{"scope": "rooms:guild:read"})
	if rooms := mustTool(t, cs, "sync_lobby", nil)["rooms"].([]any); len(rooms) != 1 || rooms[0].(map[string]any)["access"] != "read" {
		t.Fatalf("after restrict: %v", rooms)
	}
}
