package mcp_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// Adaptive salience reaches a model through the tools as it reaches REST
// readers: the first read is enriched once, the registrar's broken view is
// promoted into its lean context with the error, and since_your_last_read
// counts what someone else changed. The guidance it carries speaks the
// tools' vocabulary.
func TestSalienceOverMCP(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	_, room, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": "attn"})
	tok := room["token"].(string)
	alice := owner(t, srv, "alice", "attn", tok)
	cs := connect(t, alice, map[string]string{"attn": "admin"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "attn"})

	// sync_embody returned the arrival (agents, actions, attention), which
	// is not the agent's first read: that one is enriched, the next lean.
	first := mustTool(t, cs, "sync_read_context", nil)
	if d := get(first, "_context", "depth"); d != "full" {
		t.Fatalf("the first read after embodying (which returned only the arrival) is %v, want full", d)
	}
	if d := get(mustTool(t, cs, "sync_read_context", nil), "_context", "depth"); d != "lean" {
		t.Fatalf("the second read is %v, want lean", d)
	}

	mustTool(t, cs, "sync_register_view", map[string]any{"id": "total", "expr": "state._shared.missing + 1"})
	lean := mustTool(t, cs, "sync_read_context", map[string]any{"only": "state"})
	att, _ := get(lean, "_context", "_attention").(map[string]any)
	if !slices.Contains(anyStrings(att["broken_views"]), "total") || get(att, "your_broken_views", "total", "_error") == nil {
		t.Fatalf("the registrar's broken view is not promoted with its error: %v", att)
	}

	if code, out, _ := restCall(ctx, srv.base, "PUT", "/rooms/attn/state", tok, map[string]any{"scope": "_shared", "key": "news", "value": 1}); code != 200 {
		t.Fatalf("the room token holder.s write: %d %v", code, out)
	}
	after := mustTool(t, cs, "sync_read_context", map[string]any{"only": "state"})
	if n := get(after, "_context", "_attention", "since_your_last_read", "state_changes"); n != float64(1) {
		t.Fatalf("since_your_last_read after one write by the room token: %v", get(after, "_context", "_attention"))
	}

	help := mustTool(t, cs, "sync_help", map[string]any{"key": "vocabulary_review"})
	raw, _ := json.Marshal(help)
	text := strings.ToLower(string(raw))
	if !strings.Contains(text, "sync_") || strings.Contains(text, "get /rooms") || strings.Contains(text, "put /rooms") {
		t.Fatalf("vocabulary_review does not speak the tools' vocabulary: %s", text)
	}
}

func anyStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
