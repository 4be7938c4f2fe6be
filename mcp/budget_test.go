package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/mcp"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// rawTool calls a tool and returns its structured result's bytes.
func rawTool(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) []byte {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if res.IsError {
		t.Fatalf("%s failed: %s", name, resultText(res))
	}
	return raw
}

// What a model gets from a big room fits its client: the lean context of a
// room with 10 agents and 500 tasks was about 108 KB (36,000 tokens, past
// Claude Code's 25,000), a wait wake-up about 96 KB, and an invocation
// echoed every value it wrote. Results now keep to a 32,000-byte budget
// unless the call asks for more, say what they cut and how to get it, and
// invocations return references instead of values. The figures are logged
// (go test ./mcp -run TestResultSizes -v).
func TestResultSizes(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	_, room, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": "board"})
	tok := room["token"].(string)
	for i := range 10 {
		restCall(ctx, srv.base, "POST", "/rooms/board/agents", tok, map[string]any{"id": fmt.Sprintf("worker%d", i), "name": "Worker"})
	}
	for batch := range 5 {
		var writes []any
		for i := range 100 {
			writes = append(writes, map[string]any{"scope": "_shared", "key": fmt.Sprintf("task-%03d", batch*100+i),
				"value": map[string]any{"title": "a small task with a short description", "notes": "to be picked up by whoever is free; report progress in the room and mark it done when finished", "done": i%3 == 0, "owner": fmt.Sprintf("worker%d", i%10)}})
		}
		if code, out, _ := restCall(ctx, srv.base, "PUT", "/rooms/board/state/batch", tok, map[string]any{"writes": writes}); code != 200 {
			t.Fatalf("batch: %d %v", code, out)
		}
	}
	restCall(ctx, srv.base, "PUT", "/rooms/board/actions", tok, map[string]any{"id": "note", "params": map[string]any{"text": map[string]any{"type": "string"}},
		"writes": []any{map[string]any{"key": "note", "value": "${params.text}"}}})
	alice := owner(t, srv, "alice", "board", tok)
	cs := connect(t, alice, map[string]string{"board": "admin"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "board"})

	// The whole context, as REST (which has no result limit) returns it.
	_, whole, _ := restCall(ctx, srv.base, "GET", "/rooms/board/context?max_bytes=4194304", tok, nil)
	full, _ := json.Marshal(whole)
	lean := rawTool(t, cs, "sync_read_context", nil)
	const budget = 32_000
	if len(full) < 2*budget {
		t.Fatalf("the room is too small to test the budget: %d bytes whole", len(full))
	}
	if len(lean) > budget+512 { // the budget covers the envelope; the session block rides along
		t.Fatalf("lean context is %d bytes, over the %d budget", len(lean), budget)
	}
	var env map[string]any
	_ = json.Unmarshal(lean, &env)
	cuts, _ := get(env, "_context", "budget", "cuts").([]any)
	if len(cuts) == 0 {
		t.Fatalf("the budget cut nothing it says: %v", get(env, "_context", "budget"))
	}
	first := cuts[0].(map[string]any)
	if first["section"] == nil || first["expand"] == nil {
		t.Fatalf("a cut without what and how: %v", first)
	}
	if now, _ := get(env, "_session", "now").(string); len(now) < 20 {
		t.Fatalf("result without the server time: %v", env["_session"])
	}
	if get(env, "state", "_shared", "_summary", "keys") != float64(500) {
		t.Fatalf("the summarised scope does not count its keys: %v", get(env, "state", "_shared", "_summary"))
	}
	wake := rawTool(t, cs, "sync_wait", map[string]any{"condition": "true"})
	if len(wake) > budget+512 {
		t.Fatalf("wait wake-up is %d bytes", len(wake))
	}
	big := strings.Repeat("x", 5000)
	inv := rawTool(t, cs, "sync_invoke_action", map[string]any{"action": "note", "params": map[string]any{"text": big}})
	if strings.Contains(string(inv), big) || !strings.Contains(string(inv), `"bytes":5002`) {
		t.Fatalf("invocation result echoes the value or lacks its size: %.300s", inv)
	}
	// The text a model reads is the compact rendering of the same JSON.
	leanText := mcp.Text(lean)
	if len(leanText) >= len(lean) {
		t.Errorf("the text rendering (%d bytes) is no smaller than the JSON (%d)", len(leanText), len(lean))
	}
	t.Logf("500-task room: whole context %d bytes (~%d tokens); lean context %d bytes JSON (~%d tokens), %d bytes as text (~%d tokens); wait wake-up %d bytes JSON (~%d tokens), %d as text (~%d tokens); invocation of a 5 KB write %d bytes",
		len(full), approxTokens(string(full)), len(lean), approxTokens(string(lean)), len(leanText), approxTokens(leanText),
		len(wake), approxTokens(string(wake)), len(mcp.Text(wake)), approxTokens(mcp.Text(wake)), len(inv))
}

// approxTokens estimates a BPE tokenizer's count without one: a word or
// number with its leading space is a token, and so is a run of
// punctuation (`":"`, `},{`). It is a comparison, not a bill.
func approxTokens(s string) int { return len(tokenish.FindAllStringIndex(s, -1)) }

var tokenish = regexp.MustCompile(`\s?[A-Za-z]+|\s?[0-9]{1,3}|\s?[^\sA-Za-z0-9]+|\s+`)

// No result a model can reach passes what Claude Code shows it whole
// (mcp.MaxResultChars, as text and as JSON): on the big room with a value
// and a view past that size, every default and widest read, and every
// read the results advise (cuts' expand, pages, an evaluation's next
// page), followed to three steps, stays under it, and a budget past the
// cap is refused with the way to page.
func TestAdviceStaysUnderResultLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a room of 1,017 messages")
	}
	srv := startServer(t, pgtest.New(t))
	tok, _ := bigRoom(t, srv)
	ctx := context.Background()
	spec := strings.Repeat("the specification of the board, one long paragraph after another. ", 900)
	if code, out, _ := restCall(ctx, srv.base, "PUT", "/rooms/board/state/batch", tok, map[string]any{"writes": []any{
		map[string]any{"scope": "_shared", "key": "spec", "value": spec}}}); code != 200 {
		t.Fatalf("spec: %d %v", code, out)
	}
	alice := owner(t, srv, "alice", "board", tok)
	cs := connect(t, alice, map[string]string{"board": "admin"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "board"})

	type call struct {
		tool string
		args map[string]any
	}
	calls := []call{
		{"sync_register_view", map[string]any{"id": "everything", "expr": "state._shared"}},
		{"sync_read_context", nil},
		{"sync_read_context", map[string]any{"depth": "full", "max_bytes": mcp.MaxContextBytes}},
		{"sync_read_context", map[string]any{"only": "views.everything"}},
		{"sync_read_context", map[string]any{"only": "state._shared", "prefix": "spec"}},
		{"sync_read_context", map[string]any{"only": "messages", "messages_limit": 500, "max_bytes": mcp.MaxContextBytes}},
		{"sync_read_context", map[string]any{"include": "_messages,_audit", "max_bytes": mcp.MaxContextBytes}},
		{"sync_embody", map[string]any{"room": "board", "context": "full", "max_bytes": mcp.MaxContextBytes}},
		{"sync_wait", map[string]any{"condition": "true", "context": "full", "max_bytes": mcp.MaxContextBytes}},
		{"sync_eval_cel", map[string]any{"expr": "state._shared"}},
		{"sync_eval_cel", map[string]any{"expr": `state._shared["spec"]`}},
		{"sync_eval_cel", map[string]any{"expr": "state._shared.map(k, state._shared[k])"}},
		{"sync_search", map[string]any{"q": "progress", "limit": 50}},
		{"sync_lobby", nil},
		{"sync_help", nil},
	}
	for _, k := range []string{"guide", "standard_library", "expressions", "context_shaping", "threads", "search"} {
		calls = append(calls, call{"sync_help", map[string]any{"key": k}})
	}
	readOnly := map[string]bool{"sync_read_context": true, "sync_eval_cel": true, "sync_search": true, "sync_help": true, "sync_lobby": true}
	seen := map[string]bool{}
	largest, largestCall, followed := 0, "", 0
	var run func(c call, depth int, from string)
	run = func(c call, depth int, from string) {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil {
			t.Fatalf("%s %v: %v", c.tool, c.args, err)
		}
		text := resultText(res)
		raw, _ := json.Marshal(res.StructuredContent)
		label := fmt.Sprintf("%s %v", c.tool, c.args)
		if from != "" {
			label += " (advised by " + from + ")"
		}
		if res.IsError {
			t.Errorf("%s failed: %.400s", label, text)
			return
		}
		for what, n := range map[string]int{"text": len(text), "JSON": len(raw)} {
			if n > mcp.MaxResultChars {
				t.Errorf("%s: %d characters of %s, past %d", label, n, what, mcp.MaxResultChars)
			}
			if n > largest {
				largest, largestCall = n, label
			}
		}
		if depth >= 3 {
			return
		}
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		for _, hint := range advisedCalls(m) {
			tool, args, ok := parseCall(hint)
			if !ok || !readOnly[tool] || seen[hint] {
				continue
			}
			seen[hint] = true
			followed++
			run(call{tool, args}, depth+1, c.tool)
		}
	}
	for _, c := range calls {
		run(c, 0, "")
	}
	if followed < 20 {
		t.Errorf("only %d advised reads followed: the room is too small to test the limit", followed)
	}
	t.Logf("largest result, following %d advised reads: %d characters, %s", followed, largest, largestCall)

	// A budget past what a result holds is refused, saying to page.
	for _, c := range []call{{"sync_read_context", map[string]any{"max_bytes": 100_000}}, {"sync_wait", map[string]any{"condition": "true", "max_bytes": 4 << 20}}} {
		out, isErr := callTool(t, cs, c.tool, c.args)
		if !isErr || out["error"] != "invalid_field" || !strings.Contains(fmt.Sprint(out["hint"]), "page") {
			t.Errorf("%s %v: want invalid_field saying to page, got %v", c.tool, c.args, out)
		}
	}
	// The help says so.
	help := mustTool(t, cs, "sync_help", map[string]any{"key": "context_shaping"})
	if s := fmt.Sprint(help["content"]); !strings.Contains(s, "48000 characters") || !strings.Contains(s, "page instead") {
		t.Errorf("context_shaping does not say to page past the result limit: %s", s)
	}
}

// The default read of a busy board says what the room is for (the
// description its creator gave over REST) and shows a sample of its
// open work, counted against the board's, within the same budget: the
// board's 300 open tasks were written before the 100 finished ones were
// changed last, and the read kept the most recently changed first (all
// 100 finished ones, then 108 of the open), never counted the open work,
// and never said what the room was for.
func TestDefaultReadSaysPurposeAndOpenWork(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	const purpose = "Review of the payments rewrite: claim an open task, review it, mark it done."
	_, room, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": "review", "meta": map[string]any{"label": "Payments review", "description": purpose}})
	tok := room["token"].(string)
	write := func(from, to int, done bool) {
		var writes []any
		for i := from; i < to; i++ {
			writes = append(writes, map[string]any{"scope": "_shared", "key": fmt.Sprintf("task-%03d", i),
				"value": map[string]any{"title": "review one part of the rewrite", "notes": "read the diff, run the tests, leave comments in the room", "done": done}})
		}
		if code, out, _ := restCall(ctx, srv.base, "PUT", "/rooms/review/state/batch", tok, map[string]any{"writes": writes}); code != 200 {
			t.Fatalf("batch: %d %v", code, out)
		}
	}
	for i := 0; i < 400; i += 100 {
		write(i, i+100, false)
	}
	write(300, 400, true)
	alice := owner(t, srv, "alice", "review", tok)
	cs := connect(t, alice, map[string]string{"review": "admin"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "review"})
	text, m := toolResult(t, cs, "sync_read_context", nil)
	raw, _ := json.Marshal(m)
	if len(raw) > mcp.DefaultMaxBytes+512 {
		t.Errorf("the default read is %d bytes, past its budget", len(raw))
	}
	if get(m, "about", "description") != purpose || !strings.HasPrefix(text, "about:") {
		t.Errorf("the default read does not begin with what the room is for: %.300s", text)
	}
	shared, _ := get(m, "state", "_shared").(map[string]any)
	open := 0
	for k, v := range shared {
		if e, ok := v.(map[string]any); ok && k != "_summary" {
			if e["done"] == false {
				open++
			} else {
				t.Errorf("finished %s shown while open tasks were left out", k)
			}
		}
	}
	sum, _ := shared["_summary"].(map[string]any)
	if open < 3 || sum["open"] != float64(300) || sum["open_shown"] != float64(open) {
		t.Errorf("the default read shows %d open tasks of 300 (summary %v)", open, sum)
	}
	// Pages and deltas do not repeat the purpose.
	if _, page := toolResult(t, cs, "sync_read_context", map[string]any{"only": "state._shared"}); page["about"] != nil {
		t.Errorf("a page repeats the room's purpose")
	}
	t.Logf("default read of the 400-task board: %d bytes JSON (~%d tokens), %d bytes text (~%d tokens), %d open tasks shown", len(raw), approxTokens(string(raw)), len(text), approxTokens(text), open)
}
