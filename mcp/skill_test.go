package mcp_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/mcp/plugin"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// skillCall is one tool call the skill shows.
type skillCall struct {
	tool string
	args string // JSON, with the skill's placeholders
}

var (
	// A fenced block's calls begin at a line's start with the tool's
	// name; an inline call is `sync_x {…}` in backquotes.
	fencedRE = regexp.MustCompile("(?s)```json\n(.*?)```")
	callRE   = regexp.MustCompile(`(?m)^(sync_[a-z_]+) `)
	inlineRE = regexp.MustCompile("`(sync_[a-z_]+)\\s+(\\{[^`]*\\})`")
	loomRE   = regexp.MustCompile("(?s)```text\n(→.*?)```")
)

// skillCalls are the skill's examples, in its order.
func skillCalls(skill string) (calls []skillCall, loom string) {
	for _, block := range fencedRE.FindAllStringSubmatch(skill, -1) {
		starts := callRE.FindAllStringSubmatchIndex(block[1], -1)
		for i, s := range starts {
			end := len(block[1])
			if i+1 < len(starts) {
				end = starts[i+1][0]
			}
			calls = append(calls, skillCall{block[1][s[2]:s[3]], strings.TrimSpace(block[1][s[1]:end])})
		}
	}
	for _, m := range inlineRE.FindAllStringSubmatch(skill, -1) {
		calls = append(calls, skillCall{m[1], m[2]})
	}
	if m := loomRE.FindStringSubmatch(skill); m != nil {
		loom = m[1]
	}
	return calls, loom
}

// Every call the skill teaches works as written, in a room of a team's
// size: 100 tasks, 100 messages, a second agent and a loom tree of 50
// nodes. The skill is what a model copies, so a tool renamed, an argument
// dropped or an expression that stops compiling fails here, not in a
// user's session. Placeholders are the room ("R"), the other agent
// ("bob:claude-code"), a message's seq (42) and elisions ("...", "<id>"),
// whose calls are left out.
func TestSkillExamplesWork(t *testing.T) {
	skill := string(plugin.Skill("https://sync.example"))
	calls, loom := skillCalls(skill)
	if len(calls) < 15 || loom == "" {
		t.Fatalf("found %d calls and loom %q in the skill: the patterns above no longer read it", len(calls), loom)
	}
	srv := startServer(t, pgtest.New(t))
	alice, bob := signup(t, srv, "alice"), signup(t, srv, "bob")
	cs := connect(t, alice, nil)
	mustTool(t, cs, "sync_create_room", map[string]any{"room": "R"})
	mustTool(t, cs, "sync_share_room", map[string]any{"room": "R", "username": "bob", "role": "participant"})
	bs := connect(t, bob, map[string]string{"R": "write"})
	bobAgent := mustTool(t, bs, "sync_embody", map[string]any{"room": "R"})["agent"].(string)
	aliceAgent := mustTool(t, cs, "sync_embody", map[string]any{"room": "R"})["agent"].(string)
	mustTool(t, cs, "sync_register_action", map[string]any{"id": "add_task", "params": map[string]any{"n": map[string]any{"type": "integer", "required": true}},
		"writes": []any{map[string]any{"scope": "_shared", "key": "task-${params.n}", "value": map[string]any{"title": "task ${params.n}"}}}})
	for n := 1; n <= 100; n++ {
		mustTool(t, cs, "sync_invoke_action", map[string]any{"action": "add_task", "params": map[string]any{"n": n}})
		mustTool(t, bs, "sync_send_message", map[string]any{"body": fmt.Sprintf("note %d", n)})
	}
	// The message the examples answer, acknowledge and read as a thread:
	// bob's, to alice, asking for an acknowledgement.
	asked := mustTool(t, bs, "sync_send_message", map[string]any{"body": "Release on Friday?", "subject": "Release date", "to": aliceAgent, "ack": true})
	seq := strconv.FormatInt(int64(asked["seq"].(float64)), 10)
	var tree strings.Builder
	tree.WriteString("→ new tree \"story\" \"Once\"\n")
	for i := 0; i < 50; i++ {
		fmt.Fprintf(&tree, "→ add \"line %d\"\n", i)
	}
	if out, isErr := callTool(t, cs, "sync_loom", map[string]any{"room": "R", "commands": tree.String()}); isErr {
		t.Fatalf("plant the tree: %v", out)
	}

	ran := map[string]bool{}
	for _, c := range calls {
		if strings.Contains(c.args, "...") || strings.Contains(c.args, "<id>") {
			continue
		}
		// bob:claude-code stands for an agent id, in JSON or in CEL.
		args := strings.ReplaceAll(c.args, "bob:claude-code", bobAgent)
		args = regexp.MustCompile(`\b42\b`).ReplaceAllString(args, seq)
		var in map[string]any
		if err := json.Unmarshal([]byte(args), &in); err != nil {
			t.Errorf("the skill's %s %s is not JSON: %v", c.tool, c.args, err)
			continue
		}
		if c.tool == "sync_wait" {
			in["timeout_ms"] = 1000 // the wait is what is shown; its waking is tested elsewhere
		}
		out, isErr := callTool(t, cs, c.tool, in)
		if isErr {
			t.Errorf("the skill's %s %s fails: %v", c.tool, c.args, out)
		}
		ran[c.tool] = true
	}
	for _, tool := range []string{"sync_lobby", "sync_read_context", "sync_embody", "sync_register_action", "sync_invoke_action",
		"sync_wait", "sync_register_view", "sync_send_message", "sync_search", "sync_help"} {
		if !ran[tool] {
			t.Errorf("the skill shows no runnable %s", tool)
		}
	}
	out, isErr := callTool(t, cs, "sync_loom", map[string]any{"room": "R", "commands": loom})
	if text := fmt.Sprint(out); isErr || strings.Contains(text, "✗") || strings.Contains(text, "not a loom command") {
		t.Errorf("the skill's loom commands fail: %s", text)
	}
}

// sync_help lists the key skill and answers it with the skill, the
// server's URL filled in; a room's own _help.skill takes its place.
func TestHelpKeySkill(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	cs := connect(t, signup(t, srv, "alice"), nil)
	keys := fmt.Sprint(mustTool(t, cs, "sync_help", map[string]any{})["keys"])
	if !strings.Contains(keys, "skill") {
		t.Fatalf("help keys %s lack skill", keys)
	}
	got := mustTool(t, cs, "sync_help", map[string]any{"key": "skill"})
	text, _ := got["content"].(string)
	if !strings.HasPrefix(text, "---\nname: sync\n") || !strings.Contains(text, srv.base+"/SKILL.md") {
		t.Fatalf("help skill: %.300s", text)
	}
	mustTool(t, cs, "sync_create_room", map[string]any{"room": "house"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "house"})
	if got := mustTool(t, cs, "sync_help", map[string]any{"room": "house", "key": "skill"}); got["source"] != "system" {
		t.Fatalf("help skill in a room without an override: %v", got)
	}
	mustTool(t, cs, "sync_register_action", map[string]any{"id": "house_rules", "writes": []any{map[string]any{"scope": "_help", "key": "skill", "value": "Ask alice first."}}})
	mustTool(t, cs, "sync_invoke_action", map[string]any{"action": "house_rules"})
	if got := mustTool(t, cs, "sync_help", map[string]any{"room": "house", "key": "skill"}); got["source"] != "room" || got["content"] != "Ask alice first." {
		t.Fatalf("help skill with the room's override: %v", got)
	}
}
