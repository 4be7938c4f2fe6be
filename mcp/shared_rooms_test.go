package mcp_test

import (
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/oauth/oauthtest"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// End to end, through the real consent screen and the tools as they are:
// a room shared mid-connection reaches a connection whose consent allowed
// new shared rooms (lobby, read, embody by role as the role's agent), and
// not one whose consent did not, which is told why.
func TestSharedRoomReachesOpenConnection(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	alice, bob := signup(t, srv, "alice"), signup(t, srv, "bob")
	as := connectWithToken(t, srv, mintToken(t, srv, alice, nil)["access_token"].(string))
	open := connectWithToken(t, srv, mintToken(t, srv, bob, map[string]string{oauthtest.SharedRooms: "write"})["access_token"].(string))
	closed := connectWithToken(t, srv, mintToken(t, srv, bob, nil)["access_token"].(string))
	mustTool(t, closed, "sync_lobby", nil) // the connection's session begins before the share
	// Consented before the share, first used after it: the consent's time
	// decides what is new, not the first call's.
	late := connectWithToken(t, srv, mintToken(t, srv, bob, map[string]string{oauthtest.SharedRooms: "read"})["access_token"].(string))
	mustTool(t, as, "sync_create_room", map[string]any{"room": "guild"})
	if out, isErr := callTool(t, open, "sync_read_context", map[string]any{"room": "guild"}); !isErr || out["reason"] != "not_shared" {
		t.Fatalf("before sharing: %v", out)
	}
	mustTool(t, as, "sync_embody", map[string]any{"room": "guild"})
	mustTool(t, as, "sync_register_action", map[string]any{"id": "define_scribe",
		"writes": []any{map[string]any{"key": "roles", "merge": map[string]any{"scribe": map[string]any{"filled_by": nil}}}}})
	mustTool(t, as, "sync_invoke_action", map[string]any{"action": "define_scribe"})
	mustTool(t, as, "sync_share_room", map[string]any{"room": "guild", "username": "bob", "role": "participant"})

	view := mustTool(t, open, "sync_lobby", nil)
	rooms, _ := view["rooms"].([]any)
	if len(rooms) != 1 || get(rooms[0].(map[string]any), "room") != "guild" || get(rooms[0].(map[string]any), "access") != "write" {
		t.Fatalf("bob's lobby after the share: %v", view)
	}
	read := mustTool(t, open, "sync_read_context", map[string]any{"room": "guild"})
	// The session block says the level a shared room entered scope at.
	if lvl := get(read, "_session", "scope_level"); lvl != "write" {
		t.Fatalf("_session.scope_level of a room shared since the consent: %v", read["_session"])
	}
	emb := mustTool(t, open, "sync_embody", map[string]any{"room": "guild", "role": "scribe"})
	if emb["agent"] != "scribe" {
		t.Fatalf("embodying the role: %v", emb)
	}
	// The lobby shows what a person would choose the room by (a few
	// _shared scalars) and which role each agent fills.
	mustTool(t, as, "sync_register_action", map[string]any{"id": "phase", "writes": []any{map[string]any{"key": "phase", "value": "drafting"}}})
	mustTool(t, as, "sync_invoke_action", map[string]any{"action": "phase"})
	room := asList(get(mustTool(t, as, "sync_lobby", nil), "rooms"))[0].(map[string]any)
	if get(room, "state_summary", "values", "phase") != "drafting" {
		t.Errorf("the lobby's state summary lacks the room's scalars: %v", room["state_summary"])
	}
	fills := false
	for _, a := range asList(room["agents"]) {
		if a.(map[string]any)["id"] == "scribe" && a.(map[string]any)["fills"] == "scribe" {
			fills = true
		}
	}
	if !fills {
		t.Errorf("the lobby does not say which role an agent fills: %v", room["agents"])
	}
	// A room's own summary view stands for the scalars.
	mustTool(t, as, "sync_register_view", map[string]any{"id": "summary", "scope": "_shared", "expr": `{"phase": state._shared.phase, "roles": size(state._shared.roles)}`})
	room = asList(get(mustTool(t, open, "sync_lobby", nil), "rooms"))[0].(map[string]any)
	if get(room, "state_summary", "summary", "phase") != "drafting" || get(room, "state_summary", "values") != nil {
		t.Errorf("the lobby does not show the room's summary view: %v", room["state_summary"])
	}
	if out := mustTool(t, late, "sync_lobby", nil); len(asList(get(out, "rooms"))) != 1 {
		t.Fatalf("a connection consented before the share, first used after: %v", out)
	}
	if out, isErr := callTool(t, closed, "sync_read_context", map[string]any{"room": "guild"}); !isErr || out["error"] != "room_not_in_scope" || out["reason"] != "shared_not_allowed" {
		t.Fatalf("a connection without shared rooms: %v", out)
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// room_not_in_scope carries seed 003's options (§IX: ask the owner to
// share it, re-authorize with the room ticked, create a room), each in
// MCP's words and only those that can work in the case at hand.
func TestRoomNotInScopeOptions(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	alice, bob := signup(t, srv, "alice"), signup(t, srv, "bob")
	as := connectWithToken(t, srv, mintToken(t, srv, alice, nil)["access_token"].(string))
	open := connectWithToken(t, srv, mintToken(t, srv, bob, map[string]string{oauthtest.SharedRooms: "write"})["access_token"].(string))
	closed := connectWithToken(t, srv, mintToken(t, srv, bob, nil)["access_token"].(string))
	mustTool(t, closed, "sync_lobby", nil)
	mustTool(t, as, "sync_create_room", map[string]any{"room": "guild"})
	options := func(out map[string]any) string {
		var b []string
		for _, o := range asList(out["options"]) {
			b = append(b, o.(string))
		}
		return strings.Join(b, "\n")
	}
	// Not shared, and sharing alone would reach this connection: ask the
	// owner, or create a room; re-authorizing would not help.
	out, isErr := callTool(t, open, "sync_read_context", map[string]any{"room": "guild"})
	if got := options(out); !isErr || out["error"] != "room_not_in_scope" || out["room"] != "guild" || out["message"] == nil ||
		got != `ask an owner of guild to share it with you (they call sync_share_room {"room":"guild","username":"bob"})`+"\nsync_create_room" {
		t.Fatalf("not shared, open connection: %v", out)
	}
	// Not shared, and the connection takes no new shared rooms: share,
	// then re-authorize.
	out, _ = callTool(t, closed, "sync_read_context", map[string]any{"room": "guild"})
	if got := options(out); !strings.Contains(got, "sync_share_room") || !strings.Contains(got, "re-authorizes") || !strings.Contains(got, "ticks guild") {
		t.Fatalf("not shared, closed connection: %v", out)
	}
	mustTool(t, as, "sync_share_room", map[string]any{"room": "guild", "username": "bob", "role": "participant"})
	// Shared since, not allowed: sharing again is no way out.
	out, _ = callTool(t, closed, "sync_read_context", map[string]any{"room": "guild"})
	if got := options(out); out["reason"] != "shared_not_allowed" || strings.Contains(got, "sync_share_room") ||
		!strings.Contains(got, `ticks guild on the consent screen, or allows "new rooms shared with me"`) || !strings.Contains(got, "sync_create_room") {
		t.Fatalf("shared, not allowed: %v", out)
	}
}
