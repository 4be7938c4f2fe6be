package mcp_test

import (
	"fmt"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// Seed 003 §VI and §X: the user's default room (smcp_user_rooms.is_default,
// their first room) is what sync_lobby focuses when a session has nothing
// in focus, and each room's state_summary summarises its state (key counts
// per scope, messages, last activity, open roles) as far as the session
// may read: a participant is not told how many keys another agent's
// private scope holds.
func TestLobbyDefaultRoomAndStateSummary(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	alice, bob := signup(t, srv, "alice"), signup(t, srv, "bob")
	as := connectWithToken(t, srv, mintToken(t, srv, alice, nil)["access_token"].(string))
	mustTool(t, as, "sync_create_room", map[string]any{"room": "home"})
	mustTool(t, as, "sync_create_room", map[string]any{"room": "work"})
	mustTool(t, as, "sync_embody", map[string]any{"room": "home"})
	mustTool(t, as, "sync_register_action", map[string]any{"id": "setup", "writes": []any{
		map[string]any{"scope": "_shared", "key": "roles", "value": map[string]any{"scribe": map[string]any{"filled_by": nil}, "judge": map[string]any{"filled_by": "x"}}},
		map[string]any{"scope": "_shared", "key": "phase", "value": "open"},
		map[string]any{"scope": "${self}", "key": "notes", "value": "mine"},
	}})
	mustTool(t, as, "sync_invoke_action", map[string]any{"action": "setup"})
	mustTool(t, as, "sync_share_room", map[string]any{"room": "home", "username": "bob", "role": "participant"})
	mustTool(t, as, "sync_share_room", map[string]any{"room": "work", "username": "bob", "role": "participant"})

	// A new connection of alice's: nothing in focus, so the lobby focuses
	// her default room, and a call without a room reads it.
	fresh := connectWithToken(t, srv, mintToken(t, srv, alice, map[string]string{"home": "admin", "work": "admin"})["access_token"].(string))
	view := mustTool(t, fresh, "sync_lobby", nil)
	if view["focus"] != "home" {
		t.Fatalf("lobby focus: %v", view)
	}
	summary := func(v map[string]any, room string) map[string]any {
		for _, r := range asList(v["rooms"]) {
			if rm := r.(map[string]any); rm["room"] == room {
				if room == "home" && rm["default"] != true {
					t.Fatalf("home not marked default: %v", rm)
				}
				return rm["state_summary"].(map[string]any)
			}
		}
		t.Fatalf("no room %s: %v", room, v)
		return nil
	}
	s := summary(view, "home")
	if fmt.Sprint(s["keys"]) != "map[_shared:2 alice:conformance:1]" || fmt.Sprint(s["open_roles"]) != "[scribe]" ||
		s["last_activity"] == nil || s["last_active"] == nil || s["messages"] == nil {
		t.Fatalf("owner's state_summary: %v", s)
	}
	if ctx := mustTool(t, fresh, "sync_read_context", nil); get(ctx, "state", "_shared", "phase") != "open" {
		t.Fatalf("a call without a room after the lobby does not read the default room: %v", ctx)
	}

	// Bob, a participant, sees the communal counts only; his default is
	// his own first room (work was shared second, home first).
	bs := connectWithToken(t, srv, mintToken(t, srv, bob, map[string]string{"home": "write", "work": "write"})["access_token"].(string))
	bv := mustTool(t, bs, "sync_lobby", nil)
	if s := summary(bv, "home"); fmt.Sprint(s["keys"]) != "map[_shared:2]" {
		t.Fatalf("HOLE: a participant is told about a private scope: %v", s)
	}
	if bv["focus"] != "home" {
		t.Fatalf("bob's focus: %v", bv)
	}
	// An embodied session keeps its room: the default does not move it.
	mustTool(t, bs, "sync_embody", map[string]any{"room": "work"})
	if v := mustTool(t, bs, "sync_lobby", nil); v["focus"] != "work" {
		t.Fatalf("embodied in work, focus %v", v["focus"])
	}
}
