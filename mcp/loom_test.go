package mcp_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

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
	if _, err := srv.lobby.ClaimRoom(ctx, id, "spin", spinTok, false); err != nil {
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

// The loom-aware addendum is offered as the prompt "loom".
func TestLoomPrompt(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	_, weave, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": "weave"})
	alice := owner(t, srv, "alice", "weave", weave["token"].(string))
	cs := connect(t, alice, map[string]string{"weave": "admin"})
	list, err := cs.ListPrompts(ctx, nil)
	if err != nil || len(list.Prompts) != 1 || list.Prompts[0].Name != "loom" {
		t.Fatalf("prompts/list: %v %+v", err, list)
	}
	got, err := cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: "loom"})
	if err != nil || len(got.Messages) != 1 {
		t.Fatalf("prompts/get: %v %+v", err, got)
	}
	text := got.Messages[0].Content.(*sdk.TextContent).Text
	for _, want := range []string{"You are working in a loom", "⟨memory⟩", "within 400 tokens", "view 23 [summary|full", "recall \"label\""} {
		if !strings.Contains(text, want) {
			t.Fatalf("missing %q in the addendum:\n%s", want, text)
		}
	}
}

// sync_loom refused for want of reaching the room advises how to reach
// it, not the loom's own help (→ help in that state is refused the same
// way): the lobby for a room gone, embodying for a write or the memory
// an observer cannot have, or the lobby where the connection may not
// embody.
func TestLoomUnreachableRoomAdvisesHowToReachIt(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	_, weave, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": "weave"})
	alice := owner(t, srv, "alice", "weave", weave["token"].(string))
	reader, writer := connect(t, alice, map[string]string{"weave": "read"}), connect(t, alice, map[string]string{"weave": "admin"})
	advice := func(cs *sdk.ClientSession, commands string) string {
		t.Helper()
		out, isErr := callTool(t, cs, "sync_loom", map[string]any{"room": "weave", "commands": commands})
		if !isErr {
			t.Fatalf("%s was not refused: %v", commands, out)
		}
		return fmt.Sprint(out["next"])
	}
	if got := advice(writer, `→ new tree "t" "w"`); !strings.HasPrefix(got, `sync_embody {"room":"weave"}`) {
		t.Errorf("a write while observing advises %s", got)
	}
	if got := advice(writer, "→ memory"); !strings.HasPrefix(got, `sync_embody {"room":"weave"}`) {
		t.Errorf("memory while observing advises %s", got)
	}
	if got := advice(reader, "→ memory"); !strings.HasPrefix(got, "sync_lobby") {
		t.Errorf("memory on a read-only connection advises %s", got)
	}
	mustTool(t, writer, "sync_embody", map[string]any{"room": "weave"})
	rp, err := srv.svc.Authenticate(ctx, weave["token"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.svc.DeleteRoom(ctx, rp, "weave"); err != nil {
		t.Fatal(err)
	}
	if got := advice(writer, `→ new tree "t" "w"`); strings.Contains(got, "sync_loom") {
		t.Errorf("a write in a deleted room advises %s", got)
	}
	// Observing, the read finds the room gone (not an empty loom).
	out, isErr := callTool(t, reader, "sync_loom", map[string]any{"room": "weave", "commands": "→ view 1"})
	if !isErr || out["error"] != "room_not_found" || !strings.HasPrefix(fmt.Sprint(out["next"]), "sync_lobby") {
		t.Errorf("a read of a deleted room's loom: %v", out)
	}
}

// sync_loom with a line that does not parse: an error result, nothing
// ran, every line's outcome in order in its message (once: not repeated
// as steps).
func TestLoomUnparsedLineRefusesTheCall(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	_, weave, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": "weave"})
	alice := owner(t, srv, "alice", "weave", weave["token"].(string))
	if code, out, _ := restCall(ctx, srv.base, "POST", "/rooms/weave/loom", weave["token"].(string), map[string]any{"commands": `→ new tree "t" "root"`}); code != 200 {
		t.Fatalf("planting: %d %v", code, out)
	}
	cs := connect(t, alice, map[string]string{"weave": "admin"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "weave"})
	out, isErr := callTool(t, cs, "sync_loom", map[string]any{"commands": "→ add from:1 \"two\"\n→ memory trase\n→ tree"})
	msg := fmt.Sprint(out["message"])
	if !isErr || out["error"] != "invalid_field" || out["steps"] != nil {
		t.Fatalf("%v", out)
	}
	at := 0
	for _, w := range []string{"✗ nothing ran: 1 of the 3 commands did not parse.", "→ add from:1 \"two\"\n· not run",
		"→ memory trase\n✗ memory does not take \"trase\"", "did you mean: → memory trace", "→ tree\n· not run"} {
		i := strings.Index(msg[at:], w)
		if i < 0 {
			t.Fatalf("missing %q (in order) in:\n%s", w, msg)
		}
		at += i + len(w)
	}
	if got := fmt.Sprint(mustTool(t, cs, "sync_loom", map[string]any{"commands": "→ tree summary"})["text"]); !strings.Contains(got, "1 nodes") {
		t.Fatalf("the refused call wrote:\n%s", got)
	}
}
