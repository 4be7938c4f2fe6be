package mcp_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// A model's working loop on the big room, acting only on what the tools
// return: it arrives, is asked by another agent (a directed message) to
// take a task, waits on messages.directed_unread > 0 as sync_wait's
// description suggests, acts from the wake-up's delta alone (no full
// read), and waits again: the next wait must wait, not wake on the message
// it has already been shown. A since it gets wrong is refused.
func TestModelActsFromDeltas(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a room of 1,017 messages")
	}
	srv := startServer(t, pgtest.New(t))
	tok, agents := bigRoom(t, srv)
	alice := owner(t, srv, "alice", "board", tok)
	cs := connect(t, alice, map[string]string{"board": "write"})

	_, arrival := toolResult(t, cs, "sync_embody", map[string]any{"room": "board"})
	me, _ := arrival["agent"].(string)
	if get(arrival, "context", "actions", "claim") == nil {
		t.Fatalf("the arrival does not list the room's action: %v", arrival)
	}
	// A look around that cuts most of the room (the model's first read).
	toolResult(t, cs, "sync_read_context", map[string]any{"max_bytes": 4000})

	for round, task := range []string{"task-200", "task-201"} {
		restCall(t.Context(), srv.base, "POST", "/rooms/board/actions/_send_message/invoke", agents[3],
			map[string]any{"params": map[string]any{"body": "could you take " + task + "? I'm swamped", "to": me}})
		restCall(t.Context(), srv.base, "POST", "/rooms/board/actions/claim/invoke", agents[4],
			map[string]any{"params": map[string]any{"task": fmt.Sprintf("task-%d", 150+round)}})
		text, w := toolResult(t, cs, "sync_wait", map[string]any{"condition": "messages.directed_unread > 0"})
		if w["triggered"] != true || !strings.Contains(text, "could you take "+task) {
			t.Fatalf("round %d: the wake-up does not show the request:\n%s", round, text)
		}
		if get(w, "context", "_context", "delta", "changed", fmt.Sprintf("_shared.task-%d", 150+round)) == nil {
			t.Fatalf("round %d: the delta does not name the task another agent claimed:\n%s", round, text)
		}
		if n := approxTokens(text); n > 2000 {
			t.Errorf("round %d: the wake-up costs ~%d tokens", round, n)
		}
		// The request names the task; the delta listed claim's signature
		// at arrival: act without reading the room again.
		toolResult(t, cs, "sync_invoke_action", map[string]any{"action": "claim", "params": map[string]any{"task": task}})
		text, w = toolResult(t, cs, "sync_wait", map[string]any{"condition": "messages.directed_unread > 0", "timeout_ms": 1000})
		if w["timeout"] != true || w["context"] != nil || w["unmet"] == nil {
			t.Fatalf("round %d: the wait after acting woke on the message already shown (or a timeout carried a context):\n%s", round, text)
		}
	}
	if out, isErr := callTool(t, cs, "sync_wait", map[string]any{"condition": "true", "since": -5}); !isErr || out["error"] != "invalid_field" {
		t.Fatalf("since -5 is accepted: %v", out)
	}
}

// What help key context_shaping tells a model about the shaping fields
// holds: every field it says the read takes, sync_read_context takes, and
// every field it says the wait takes, sync_wait takes. (It said the wait
// took the read's fields, and a model following it had messages_after and
// include refused.)
func TestContextShapingHelpMatchesTheTools(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	_, room, _ := restCall(t.Context(), srv.base, "POST", "/rooms", "", map[string]any{"id": "shape"})
	alice := owner(t, srv, "alice", "shape", room["token"].(string))
	cs := connect(t, alice, map[string]string{"shape": "admin"})
	toolResult(t, cs, "sync_embody", map[string]any{"room": "shape"})
	_, help := toolResult(t, cs, "sync_help", map[string]any{"key": "context_shaping", "room": "shape"})
	text, _ := help["content"].(string)
	first, _, _ := strings.Cut(text, "\n")
	_, waitPart, ok := strings.Cut(first, "sync_wait")
	if !ok {
		t.Fatalf("the help does not say what the wait takes: %q", first)
	}
	value := map[string]any{"depth": "lean", "only": "state", "prefix": "a", "keys_after": "a", "messages_after": 0,
		"messages_limit": 5, "include": "_messages", "max_bytes": 5000, "context": "full", "since": 0}
	listed := func(field string) bool { // in a "- field: …" or "- …, field: …" line
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "- ") && (strings.HasPrefix(line, "- "+field+":") || strings.Contains(line, ", "+field+":")) {
				return true
			}
		}
		return false
	}
	for field, v := range value {
		// The wait takes what its part of the first line names, or every
		// listed field when it says it takes "the same".
		wait := strings.Contains(waitPart, field) || strings.Contains(waitPart, "same") && listed(field)
		if listed(field) {
			if out, isErr := callTool(t, cs, "sync_read_context", map[string]any{field: v}); isErr {
				t.Errorf("the help names %s for the read; sync_read_context refuses it: %v", field, out)
			}
		}
		if wait {
			if out, isErr := callTool(t, cs, "sync_wait", map[string]any{"condition": "true", field: v}); isErr {
				t.Errorf("the help says the wait takes %s; sync_wait refuses it: %v", field, out)
			}
		}
	}
}
