package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/mcp"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// bigRoom is the room of the issues about what a model meets: 10 agents,
// 509 tasks and 1,017 messages (chatter, and 14 task_update messages
// about task-042 from one agent), with a claim action. It returns the
// room token and the agents' tokens.
func bigRoom(t *testing.T, srv *server) (string, []string) {
	t.Helper()
	ctx := context.Background()
	_, room, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": "board"})
	tok := room["token"].(string)
	var agents []string
	for i := range 10 {
		_, a, _ := restCall(ctx, srv.base, "POST", "/rooms/board/agents", tok, map[string]any{"id": fmt.Sprintf("worker%d", i), "name": "Worker"})
		agents = append(agents, a["token"].(string))
	}
	for batch := 0; batch*100 < 509; batch++ {
		var writes []any
		for i := batch * 100; i < min(509, batch*100+100); i++ {
			writes = append(writes, map[string]any{"scope": "_shared", "key": fmt.Sprintf("task-%03d", i),
				"value": map[string]any{"title": "a small task with a short description", "notes": "to be picked up by whoever is free; report progress in the room and mark it done when finished", "done": i%3 == 0, "owner": fmt.Sprintf("worker%d", i%10)}})
		}
		if code, out, _ := restCall(ctx, srv.base, "PUT", "/rooms/board/state/batch", tok, map[string]any{"writes": writes}); code != 200 {
			t.Fatalf("batch: %d %v", code, out)
		}
	}
	if code, out, _ := restCall(ctx, srv.base, "PUT", "/rooms/board/actions", tok, map[string]any{"id": "claim", "description": "Claim a task that nobody owns yet",
		"params": map[string]any{"task": map[string]any{"type": "string", "required": true}},
		"writes": []any{map[string]any{"key": "${params.task}", "merge": map[string]any{"owner": "${self}"}}}}); code != 201 && code != 200 {
		t.Fatalf("action: %d %v", code, out)
	}
	// 1,017 messages from 10 agents, 4 at a time.
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 1017; i += 4 {
				body := map[string]any{"body": fmt.Sprintf("progress note %d: still working through the list, nothing blocking", i)}
				from := agents[i%10]
				if i%70 == 5 && i/70 < 14 {
					from = agents[3]
					body = map[string]any{"body": fmt.Sprintf("task-042 update %d: waiting on review", i), "kind": "task_update"}
				}
				if code, out, _ := restCall(ctx, srv.base, "POST", "/rooms/board/actions/_send_message/invoke", from, map[string]any{"params": body}); code != 200 {
					t.Errorf("message: %d %v", code, out)
					return
				}
			}
		}()
	}
	wg.Wait()
	return tok, agents
}

// toolResult calls a tool and returns what the model reads (the text
// content) and the structured result, failing on an error result.
func toolResult(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) (string, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	text := ""
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			text += tc.Text
		}
	}
	var m map[string]any
	raw, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(raw, &m)
	if res.IsError {
		t.Fatalf("%s %v failed: %s", name, args, text)
	}
	return text, m
}

// resultBytes is what a result costs a model: its text content and its
// structured content, both of which the client receives.
func resultBytes(text string, m map[string]any) (int, int) {
	raw, _ := json.Marshal(m)
	return len(raw), approxTokens(text)
}

// TestModelLoopCosts measures what a model receives on the big room, and
// holds the targets: every default result and every result reached by
// following the server's advice fits the default budget; ten wait cycles
// in which one task changes each cycle cost at most 10,000 tokens; an
// embodiment arrives in at most 2,000. Figures are logged (go test ./mcp
// -run TestModelLoopCosts -v).
func TestModelLoopCosts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a room of 1,017 messages")
	}
	srv := startServer(t, pgtest.New(t))
	tok, agents := bigRoom(t, srv)
	alice := owner(t, srv, "alice", "board", tok)
	cs := connect(t, alice, map[string]string{"board": "admin"})
	ctx := context.Background()

	type figure struct {
		name           string
		bytes, tokens  int
		structuredSize int
		// structuredTokens: what Claude Code's model reads (it is handed
		// the structured content as JSON, not the text).
		structuredTokens int
	}
	var figs []figure
	measure := func(label, tool string, args map[string]any) map[string]any {
		text, m := toolResult(t, cs, tool, args)
		b, tk := resultBytes(text, m)
		raw, _ := json.Marshal(m)
		figs = append(figs, figure{label, len(text), tk, b, approxTokens(string(raw))})
		return m
	}
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rawList, _ := json.Marshal(list)
	listTokens := approxTokens(string(rawList))
	t.Logf("tools/list: %d bytes, ~%d tokens", len(rawList), listTokens)

	embody := measure("sync_embody (arrival)", "sync_embody", map[string]any{"room": "board"})
	measure("sync_lobby", "sync_lobby", nil)
	ctxRes := measure("sync_read_context", "sync_read_context", nil)
	// The room's strongest signal reaches _attention though the budget
	// cuts the _vocabulary_health view: 14 task_update messages about a
	// task no action writes, among a thousand lines of chatter.
	if f, _ := get(ctxRes, "_context", "_attention", "finding").(string); !strings.Contains(f, "task-042") {
		t.Errorf("_attention.finding = %q, want the task-042 pattern", f)
	}
	// A cut keeps as much of each section as fits (it kept 5 messages
	// whatever the budget left), and the budget is used.
	if n := len(asList(get(ctxRes, "messages", "recent"))); n < 30 {
		t.Errorf("the default read kept %d messages of 100", n)
	}
	if b, _ := get(ctxRes, "_context", "budget", "bytes").(float64); b < 0.85*float64(mcp.DefaultMaxBytes) {
		t.Errorf("the default read used %v bytes of a %d budget", b, mcp.DefaultMaxBytes)
	}
	_, views := toolResult(t, cs, "sync_read_context", map[string]any{"only": "views._vocabulary_health"})
	pats := asList(get(views, "views", "_vocabulary_health", "patterns"))
	for _, p := range pats {
		if k := get(p.(map[string]any), "key"); k != "_shared.task-042" {
			t.Errorf("a pattern that is chatter, not a pattern: %v", p)
		}
	}
	t.Logf("patterns on the big room: %v; the default read kept %d messages and %v bytes", pats, len(asList(get(ctxRes, "messages", "recent"))), get(ctxRes, "_context", "budget", "bytes"))
	small := measure("sync_read_context max_bytes 2000", "sync_read_context", map[string]any{"max_bytes": 2000})
	if raw, _ := json.Marshal(small); len(raw) > 2000 {
		t.Errorf("max_bytes 2000 returned %d bytes: %s", len(raw), raw)
	}
	measure("sync_wait (condition true)", "sync_wait", map[string]any{"condition": "true"})
	measure("sync_wait (timeout 1s)", "sync_wait", map[string]any{"condition": "false", "timeout_ms": 1000})
	measure("sync_invoke_action", "sync_invoke_action", map[string]any{"action": "claim", "params": map[string]any{"task": "task-001"}})
	measure("sync_send_message", "sync_send_message", map[string]any{"body": "hello"})
	measure("sync_eval_cel", "sync_eval_cel", map[string]any{"expr": "size(state._shared)"})
	measure("sync_help", "sync_help", nil)
	measure("sync_help guide", "sync_help", map[string]any{"key": "guide"})
	measure("sync_loom", "sync_loom", map[string]any{"commands": "→ help"})
	measure("sync_register_view", "sync_register_view", map[string]any{"id": "open", "expr": "size(state._shared)"})

	measure("sync_register_action", "sync_register_action", map[string]any{"id": "finish", "params": map[string]any{"task": map[string]any{"type": "string", "required": true}},
		"writes": []any{map[string]any{"key": "${params.task}", "merge": map[string]any{"done": true}}}})
	measure("sync_delete_action", "sync_delete_action", map[string]any{"id": "finish"})
	measure("sync_delete_view", "sync_delete_view", map[string]any{"id": "open"})
	measure("sync_create_room", "sync_create_room", map[string]any{"room": "side"})
	measure("sync_embody (back to board)", "sync_embody", map[string]any{"room": "board"})
	measure("sync_disembody", "sync_disembody", nil)
	measure("sync_embody (again)", "sync_embody", map[string]any{"room": "board"})
	measure("sync_revoke_access", "sync_revoke_access", map[string]any{"room": "side"})
	measure("sync_restrict_scope", "sync_restrict_scope", map[string]any{"scope": "rooms:board:admin create_rooms"})

	// Pages are exact: following the messages cut from the first message
	// returns every message once, in order; following a scope's cut
	// returns every key once.
	seqs := map[float64]bool{}
	var last float64
	hint := `sync_read_context {"only": "messages", "messages_after": 0}`
	for pages := 0; hint != "" && pages < 100; pages++ {
		tool, args, _ := parseCall(hint)
		_, page := toolResult(t, cs, tool, args)
		for _, m := range asList(get(page, "messages", "recent")) {
			seq := m.(map[string]any)["seq"].(float64)
			if seqs[seq] || seq <= last {
				t.Fatalf("paging messages returned seq %v again or out of order (after %v)", seq, last)
			}
			seqs[seq], last = true, seq
		}
		hint = ""
		for _, c := range asList(get(page, "_context", "budget", "cuts")) {
			if c.(map[string]any)["section"] == "messages" {
				hint = c.(map[string]any)["expand"].(string)
			}
		}
		if next, ok := get(page, "messages", "_elided", "_expand").(string); ok && hint == "" {
			hint = next
		}
	}
	if len(seqs) < 1017 {
		t.Errorf("paging the messages returned %d of at least 1,017", len(seqs))
	}
	keys := map[string]bool{}
	hint = `sync_read_context {"only": "state._shared"}`
	pages := 0
	for ; hint != "" && pages < 100; pages++ {
		tool, args, _ := parseCall(hint)
		_, page := toolResult(t, cs, tool, args)
		for k := range get(page, "state", "_shared").(map[string]any) {
			if k == "_summary" {
				continue
			}
			if keys[k] {
				t.Fatalf("paging _shared returned %s twice", k)
			}
			keys[k] = true
		}
		hint = ""
		for _, c := range asList(get(page, "_context", "budget", "cuts")) {
			if c.(map[string]any)["section"] == "state._shared" {
				hint = c.(map[string]any)["expand"].(string)
			}
		}
	}
	if len(keys) != 509 {
		t.Errorf("paging _shared returned %d of 509 keys in %d pages", len(keys), pages)
	}
	t.Logf("paged %d messages and %d keys (%d pages) by following the cuts", len(seqs), len(keys), pages)

	// Every read the server advises, followed one step (cuts' expand,
	// elided sections, next pages), and the pages after those.
	largest, largestCall := 0, ""
	seen := map[string]bool{}
	var follow func(m map[string]any, depth int)
	follow = func(m map[string]any, depth int) {
		for _, hint := range advice(m) {
			if seen[hint] || depth > 2 {
				continue
			}
			seen[hint] = true
			tool, args, ok := parseCall(hint)
			if !ok {
				t.Errorf("advice that is not a call: %q", hint)
				continue
			}
			text, got := toolResult(t, cs, tool, args)
			if len(text) > largest {
				largest, largestCall = len(text), hint
			}
			if raw, _ := json.Marshal(got); len(raw) > mcp.DefaultMaxBytes+512 {
				t.Errorf("following %q returned %d bytes, past the default budget", hint, len(raw))
			}
			follow(got, depth+1)
		}
	}
	follow(ctxRes, 0)
	follow(embody, 0)
	follow(small, 0)
	t.Logf("largest result by following the server's advice: %d bytes of text (~%d tokens), from %s (%d advised reads followed)",
		largest, largest/3, largestCall, len(seen))

	// Ten wait cycles: each, another agent changes one task, and the
	// model's wait wakes on it.
	waitTokens, waitBytes := 0, 0
	for i := range 10 {
		done := make(chan struct{})
		go func() {
			defer close(done)
			code, out, _ := restCall(ctx, srv.base, "POST", "/rooms/board/actions/claim/invoke", agents[(i+1)%10], map[string]any{"params": map[string]any{"task": fmt.Sprintf("task-%03d", 100+i)}})
			if code != 200 {
				t.Errorf("claim: %d %v", code, out)
			}
		}()
		<-done
		text, m := toolResult(t, cs, "sync_wait", map[string]any{"condition": fmt.Sprintf(`state._shared["task-%03d"].owner == "worker%d"`, 100+i, (i+1)%10)})
		if m["triggered"] != true {
			t.Fatalf("wait cycle %d did not wake: %.300s", i, text)
		}
		if i == 9 {
			t.Logf("a wait cycle's wake-up as the model reads it:\n%s", text)
		}
		waitTokens += approxTokens(text)
		raw, _ := json.Marshal(m)
		waitBytes += len(text) + len(raw)
	}
	sort.Slice(figs, func(i, j int) bool { return figs[i].tokens > figs[j].tokens })
	var b strings.Builder
	for _, f := range figs {
		fmt.Fprintf(&b, "\n  %-36s %6d bytes text (~%5d tokens), %6d bytes JSON (~%5d tokens)", f.name, f.bytes, f.tokens, f.structuredSize, f.structuredTokens)
	}
	t.Logf("default results on the 10-agent / 509-task / 1,017-message room:%s", b.String())
	t.Logf("ten wait cycles, one task changing each: ~%d tokens (%d bytes of text and structured content together)", waitTokens, waitBytes)
	embodyText, _ := json.Marshal(embody)
	t.Logf("embody arrival: ~%d tokens", approxTokens(mcp.Text(embodyText)))
	if waitTokens > 10_000 {
		t.Errorf("ten wait cycles cost ~%d tokens, over 10,000", waitTokens)
	}
	if n := approxTokens(mcp.Text(embodyText)); n > 2_000 {
		t.Errorf("the arrival costs ~%d tokens, over 2,000", n)
	}
}

// advice collects the calls a result advises: budget cuts' expand, the
// context's _expand and next-page hints.
func advice(m map[string]any) []string {
	var out []string
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch x := v.(type) {
		case map[string]any:
			for k, val := range x {
				walk(val, k)
			}
		case []any:
			for _, val := range x {
				walk(val, key)
			}
		case string:
			if (key == "expand" || key == "_expand" || key == "next_page" || key == "more") && strings.HasPrefix(x, "sync_") {
				out = append(out, x)
			}
		}
	}
	walk(m, "")
	sort.Strings(out)
	return out
}

// parseCall reads a hint "sync_tool {json args}".
func parseCall(hint string) (string, map[string]any, bool) {
	name, rest, _ := strings.Cut(hint, " ")
	args := map[string]any{}
	if rest = strings.TrimSpace(rest); rest != "" {
		dec := json.NewDecoder(strings.NewReader(rest))
		if err := dec.Decode(&args); err != nil {
			return "", nil, false
		}
	}
	return name, args, strings.HasPrefix(name, "sync_")
}

// Results are in reading order, in the JSON Claude Code's model reads as
// in the text rendered from it (same order): a context's _context (what
// needs attention, what the budget cut) before its sections, and inside
// it _attention first and the request echo last; an evaluation's value
// before the echoed expression; a registration's outcome before the
// definition it echoes. Before, a 31 KB context ended with _context and
// began it with depth and sections.
func TestResultsInReadingOrder(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	_, room, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": "board", "meta": map[string]any{"description": "a board"}})
	tok := room["token"].(string)
	restCall(ctx, srv.base, "PUT", "/rooms/board/state/batch", tok, map[string]any{"writes": []any{map[string]any{"scope": "_shared", "key": "task", "value": map[string]any{"done": false}}}})
	alice := owner(t, srv, "alice", "board", tok)
	cs := connect(t, alice, map[string]string{"board": "admin"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "board"})
	inOrder := func(what, text string, keys ...string) {
		t.Helper()
		at := -1
		for _, k := range keys {
			i := strings.Index(text, k)
			if i < 0 || i < at {
				t.Errorf("%s: %q missing or out of order (want %q):\n%.600s", what, k, keys, text)
				return
			}
			at = i
		}
	}
	text, _ := toolResult(t, cs, "sync_read_context", nil)
	inOrder("context", text, "about:", "\nself:", "\n_context:", "\n  _attention:", "\n  depth:", "\n  request:", "\nstate:", "\n_session:")
	text, _ = toolResult(t, cs, "sync_eval_cel", map[string]any{"expr": "1 + 1"})
	inOrder("evaluation", text, "value:", "\nexpression:")
	text, _ = toolResult(t, cs, "sync_register_view", map[string]any{"id": "open", "expr": "size(state._shared)"})
	inOrder("registration", text, "created:", "\nvalue:", "\ndefinition:")
}
