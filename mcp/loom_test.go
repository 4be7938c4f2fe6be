package mcp_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// sync_loom acts on the room it is given, not only the focused one.
func TestLoomTakesRoom(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	_, weave, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": "weave"})
	_, spin, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": "spin"})
	spinTok := spin["token"].(string)
	alice := owner(t, srv, "alice", "weave", weave["token"].(string))
	var id string
	_ = srv.db.QueryRow(ctx, `SELECT id FROM smcp_users WHERE username = 'alice'`).Scan(&id)
	if err := srv.lobby.ClaimRoom(ctx, id, "spin", spinTok); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := restCall(ctx, srv.base, "POST", "/rooms/spin/loom", spinTok, map[string]any{"commands": `→ new tree "t" "SPUN-WORDS"`}); code != 200 {
		t.Fatalf("planting: %d %v", code, out)
	}
	cs := connect(t, alice, map[string]string{"weave": "admin", "spin": "admin"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "weave"})
	out := mustTool(t, cs, "sync_loom", map[string]any{"room": "spin", "commands": "→ view 1"})
	if !strings.Contains(fmt.Sprint(out["text"]), "SPUN-WORDS") {
		t.Fatalf("sync_loom in spin: %v", out)
	}
	// Without room: the focused room, weave, which has no tree.
	if out, isErr := callTool(t, cs, "sync_loom", map[string]any{"commands": "→ view 1"}); !isErr || !strings.Contains(fmt.Sprint(out), "no loom tree yet") {
		t.Fatalf("sync_loom without room: %v", out)
	}
	// The embodied agent's results carry the intermediary's assembly:
	// memory block, ambient line, marker.
	if code, out, _ := restCall(ctx, srv.base, "POST", "/rooms/weave/loom", weave["token"].(string), map[string]any{"commands": `→ new tree "t" "WOVEN"`}); code != 200 {
		t.Fatalf("planting: %d %v", code, out)
	}
	mustTool(t, cs, "sync_loom", map[string]any{"commands": "→ view 1"})
	got := fmt.Sprint(mustTool(t, cs, "sync_loom", map[string]any{"commands": "→ pin 1\n→ view 1"})["text"])
	for _, want := range []string{"⟨memory⟩", "pin 1: WOVEN", "⟨node:1 depth:0", "⟨r1 faded: view 1", "⟨r2: shown once"} {
		if !strings.Contains(got, want) {
			t.Fatalf("missing %q in:\n%s", want, got)
		}
	}
}
