package mcp_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// A model that guards a write with if_version follows the help to the read
// that shows the version, writes with it, and a stale version is refused
// with a hint naming that same read, whose result shows the version to
// retry with. The default read shows no versions (its size is unchanged).
func TestIfVersionHelpNamesTheReadThatShowsIt(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	alice := signup(t, srv, "alice")
	cs := connectWithToken(t, srv, mintToken(t, srv, alice, nil)["access_token"].(string))
	mustTool(t, cs, "sync_create_room", map[string]any{"room": "desk"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "desk"})
	mustTool(t, cs, "sync_register_action", map[string]any{"id": "set_note",
		"params": map[string]any{"text": map[string]any{"type": "string", "required": true}, "version": map[string]any{"type": "integer", "required": true}},
		"writes": []any{map[string]any{"scope": "_shared", "key": "note", "value": "${params.text}", "if_version": "${params.version}"}}})
	mustTool(t, cs, "sync_invoke_action", map[string]any{"action": "set_note", "params": map[string]any{"text": "first", "version": 0}})

	// The help names one read; the model fills in the scope and makes it.
	help := mustTool(t, cs, "sync_help", map[string]any{"key": "if_version"})
	content, _ := help["content"].(string)
	m := regexp.MustCompile(`sync_read_context (\{[^}]*\})`).FindStringSubmatch(content)
	if m == nil {
		t.Fatalf("the if_version help names no read:\n%s", content)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(strings.ReplaceAll(m[1], "<scope>", "_shared")), &args); err != nil {
		t.Fatalf("the help's read %s: %v", m[1], err)
	}
	text, read := toolResult(t, cs, "sync_read_context", args)
	version, ok := get(read, "versions", "_shared", "note").(float64)
	if !ok || version != 1 {
		t.Fatalf("the help's read %v shows no version of _shared/note (want 1): %v", args, read["versions"])
	}
	if !regexp.MustCompile(`(?s)versions:.*_shared:.*note: 1\b`).MatchString(text) {
		t.Fatalf("the text rendering of %v lacks the versions:\n%s", args, text)
	}
	mustTool(t, cs, "sync_invoke_action", map[string]any{"action": "set_note", "params": map[string]any{"text": "second", "version": version}})

	// The default read stays without versions.
	if v := mustTool(t, cs, "sync_read_context", nil)["versions"]; v != nil {
		t.Fatalf("the default read shows versions: %v", v)
	}

	// A stale version: refused, nothing written, and the hint names the
	// read, which shows the version to retry with.
	out, isErr := callTool(t, cs, "sync_invoke_action", map[string]any{"action": "set_note", "params": map[string]any{"text": "stale", "version": version}})
	if !isErr || out["error"] != "version_conflict" {
		t.Fatalf("a stale if_version was not refused: %v", out)
	}
	next, _ := out["next"].(string)
	hint, _ := out["hint"].(string)
	if !strings.HasPrefix(next, `sync_read_context {"only":"state._shared"`) || !strings.Contains(hint, "versions._shared.note") {
		t.Fatalf("the conflict names no read of the version: next %q, hint %q", next, hint)
	}
	var nextArgs map[string]any
	if err := json.Unmarshal([]byte(strings.TrimPrefix(next, "sync_read_context ")), &nextArgs); err != nil {
		t.Fatalf("next %q: %v", next, err)
	}
	after := mustTool(t, cs, "sync_read_context", nextArgs)
	if get(after, "versions", "_shared", "note") != float64(2) || get(after, "state", "_shared", "note") != "second" {
		t.Fatalf("the conflict's read shows %v, %v (want version 2 of \"second\")", get(after, "versions"), get(after, "state", "_shared"))
	}
}
