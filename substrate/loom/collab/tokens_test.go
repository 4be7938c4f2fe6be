package collab_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/substrate/loom"
	"github.com/syncsubstrate/sync/substrate/loom/collab"
)

// The tokens a collaborator's model receives per call (the loom's
// estimate, loom.Tokens, over every message) over a session on a 300-node
// tree. Run with -v for the figures (README, the collaborator section):
//
//	go test -count=1 -v -run TestCollaboratorTokensPerCall ./substrate/loom/collab/
func TestCollaboratorTokensPerCall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 300-node tree")
	}
	e := newEnv(t, loom.Options{}, "claude")
	var b strings.Builder
	b.WriteString(`→ new tree "t" "The house stood empty at the end of the lane, and nobody had walked up to it in years."` + "\n")
	for i := 2; i <= 300; i++ {
		words := strings.Repeat("the rain and the quiet rooms ", 2+i%9)
		fmt.Fprintf(&b, "→ add from:%d \"Node %d: %s\"\n", i/2, i, strings.TrimSpace(words))
	}
	b.WriteString("→ permit claude loom_write loom_generate doc_write\n→ yield")
	e.run(e.admin, b.String())
	script := []string{
		"→ view 1", "→ tree", "→ view 150", "→ list 2 continuations", "→ view branch:256 as:prose",
		"→ pin 150", `→ stash "rooms" summary-of:100-140`, `→ recall "rooms"`, "→ tree from:8 depth:3",
		`→ annotate 150 "the turn"`, "→ view 150 with-annotations", `→ add "And then the door."`,
		"→ memory", `→ write doc:"notes" append "grief; rain"`, `→ read doc:"notes"`,
		"Node 256 reads well.\n→ view 256", "→ list 1 continuations", "→ view branch:300 as:nodes", "→ tree summary",
		"→ preview 4 depth:3", "→ memory trace", `→ drop recall:"rooms"`, "→ view 2",
	}
	var replies []string
	for _, s := range script {
		replies = append(replies, "Looking around the tree.\n"+s)
	}
	chat := newChat(t, answers(append(replies, "Done for now.")...))
	r := e.start(collab.Config{Agent: "claude", ChatURL: chat.srv.URL, TurnCalls: 100})
	r.calls(t, chat, len(script)+1)
	var toks, sys []int
	for _, rq := range chat.requests() {
		toks = append(toks, loom.Tokens(rq.all()))
		sys = append(sys, loom.Tokens(rq.Messages[0].Content))
	}
	sorted := slices.Clone(toks)
	slices.Sort(sorted)
	p50, mx := sorted[len(sorted)/2], sorted[len(sorted)-1]
	t.Logf("tokens per collaborator call over %d calls on a 300-node tree: p50 %d, max %d (system prompt %d of each; each: %v)", len(toks), p50, mx, sys[0], toks)
	// System prompt (~1,150) + memory (≤400) + branch + earlier words
	// (≤ContextTokens, 6,000) + one result (≤600 unless full).
	if mx > 8500 {
		t.Fatalf("a call of ~%d tokens", mx)
	}
	r.stop()
	r.wait(t)
}
