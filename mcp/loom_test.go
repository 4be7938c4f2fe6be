package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
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
	if !strings.Contains(fmt.Sprint(out["results"]), "SPUN-WORDS") {
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
	out = mustTool(t, cs, "sync_loom", map[string]any{"commands": "→ switch to 1\n→ pin 1\n→ view 1"})
	got := fmt.Sprint(out)
	for _, want := range []string{"memory:[", "pin 1: WOVEN", "faded:r1 faded: view 1", "marker:r2: shown once", "command:view 1 result:[#1"} {
		if !strings.Contains(got, want) {
			t.Fatalf("missing %q in:\n%s", want, got)
		}
	}
	if pos, _ := out["position"].(map[string]any); pos["node"] != float64(1) || pos["tree"] != float64(1) || pos["tree_name"] != "t" {
		t.Fatalf("position: %v", out["position"])
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
	if !isErr || out["error"] != "invalid_field" || out["steps"] != nil || out["message"] != "✗ nothing ran: 1 of the 3 commands did not parse. Fix it and send the call again." {
		t.Fatalf("%v", out)
	}
	text := loomErrorText(t, cs, "→ add from:1 \"two\"\n→ memory trase\n→ tree")
	at := 0
	for _, w := range []string{"results:", `command: "add from:1 \"two\"", result: [· not run`, "command: memory trase",
		`✗ memory does not take \"trase\"`, "did you mean: → memory trace", "command: tree, result: [· not run"} {
		i := strings.Index(text[at:], w)
		if i < 0 {
			t.Fatalf("missing %q (in order) in:\n%s", w, text)
		}
		at += i + len(w)
	}
	if got := fmt.Sprint(mustTool(t, cs, "sync_loom", map[string]any{"commands": "→ tree summary"})["results"]); !strings.Contains(got, "1 nodes") {
		t.Fatalf("the refused call wrote:\n%s", got)
	}
}

// loomErrorText is the text of the error result sync_loom gives for
// commands.
func loomErrorText(t *testing.T, cs *sdk.ClientSession, commands string) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "sync_loom", Arguments: map[string]any{"commands": commands}})
	if err != nil || !res.IsError {
		t.Fatalf("%s: %v %v", commands, err, res)
	}
	return resultText(res)
}

// A call whose third line fails stops there, and its error result says
// which line failed, which ran (and stand) and which did not, with each
// line's outcome as a result of lines, never one escaped string.
func TestLoomBatchFailureSaysWhichLine(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	_, weave, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": "weave"})
	alice := owner(t, srv, "alice", "weave", weave["token"].(string))
	if code, out, _ := restCall(ctx, srv.base, "POST", "/rooms/weave/loom", weave["token"].(string), map[string]any{"commands": `→ new tree "t" "root"`}); code != 200 {
		t.Fatalf("planting: %d %v", code, out)
	}
	cs := connect(t, alice, map[string]string{"weave": "admin"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "weave"})
	cmds := "→ switch to 1\n→ add \"two\"\n→ view 99\n→ add \"three\""
	out, isErr := callTool(t, cs, "sync_loom", map[string]any{"commands": cmds})
	if !isErr || out["error"] != "not_found" || out["message"] != "✗ line 3 of 4 failed (→ view 99); lines 1–2 ran and stand; line 4 did not run." ||
		out["failed_line"] != "3" || !strings.Contains(fmt.Sprint(out["hint"]), "do not send lines 1–2 again") {
		t.Fatalf("%v", out)
	}
	text := loomErrorText(t, cs, "→ view 98\n→ add \"never\"")
	for _, w := range []string{"message: ✗ line 1 of 2 failed (→ view 98); nothing was done; line 2 did not run.", "failed_line: 1", "done: []", "not_run: [2]",
		"results: [{command: view 98, result: [✗ node 98 does not exist", `{command: "add \"never\"", result: [· not run (line 1 failed before it)]}]`} {
		if !strings.Contains(text, w) {
			t.Fatalf("missing %q in:\n%s", w, text)
		}
	}
	got := fmt.Sprint(mustTool(t, cs, "sync_loom", map[string]any{"commands": "→ tree summary"})["results"])
	if !strings.Contains(got, "2 nodes") {
		t.Fatalf("line 2 did not stand, or line 4 ran: %s", got)
	}
}

// One model's sync_loom calls sent at once over one session, each
// "→ jump N" then "→ add", on a two-connection pool: every node lands
// under the node its own call jumped to, round after round.
func TestLoomParallelCallsLandWhereMeant(t *testing.T) {
	srv := startServer(t, pgtest.NewPool(t, 2))
	ctx := context.Background()
	_, weave, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": "weave"})
	alice := owner(t, srv, "alice", "weave", weave["token"].(string))
	plant := `→ new tree "t" "root"` + strings.Repeat("\n→ add \"a line\"", 7) + "\n→ yield"
	if code, out, _ := restCall(ctx, srv.base, "POST", "/rooms/weave/loom", weave["token"].(string), map[string]any{"commands": plant}); code != 200 {
		t.Fatalf("planting: %d %v", code, out)
	}
	cs := connect(t, alice, map[string]string{"weave": "admin"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "weave"})
	targets := []int{2, 4, 6, 8}
	for round := range 3 {
		start := make(chan struct{})
		var wg sync.WaitGroup
		errc := make(chan error, len(targets))
		for _, target := range targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "sync_loom", Arguments: map[string]any{
					"commands": fmt.Sprintf("→ jump tree:1 node:%d\n→ add \"round %d under %d\"", target, round, target)}})
				if err != nil || res.IsError {
					text := ""
					if res != nil {
						text = resultText(res)
					}
					errc <- fmt.Errorf("round %d, under %d: %v %s", round, target, err, text)
					return
				}
				raw, _ := json.Marshal(res.StructuredContent)
				var out LoomOutForTest
				_ = json.Unmarshal(raw, &out)
				if len(out.Results) != 2 || len(out.Results[1].Result) == 0 || !strings.Contains(out.Results[1].Result[0], fmt.Sprintf("(child of %d,", target)) {
					errc <- fmt.Errorf("round %d: the add meant for %d: %s", round, target, raw)
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Error(err)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
}

// LoomOutForTest is sync_loom's result as a client decodes it.
type LoomOutForTest struct {
	Results []struct {
		Command string   `json:"command"`
		Result  []string `json:"result"`
	} `json:"results"`
}
