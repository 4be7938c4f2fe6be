package loom_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/substrate"
)

// The tokens a model receives per sync_loom result (loom.ForModel's text,
// ~4 bytes a token) over a session on a 300-node tree. Run with -v for the
// figures (README, the loom section):
//
//	go test -count=1 -v -run TestLoomModelResultTokens ./substrate/loom/
func TestLoomModelResultTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 300-node tree")
	}
	e := newLoom(t, substrate.Options{}, "al")
	var b strings.Builder
	b.WriteString(`→ new tree "t" "The house stood empty at the end of the lane, and nobody had walked up to it in years."` + "\n")
	for i := 2; i <= 300; i++ {
		words := strings.Repeat("the rain and the quiet rooms ", 2+i%9)
		fmt.Fprintf(&b, "→ add from:%d \"Node %d: %s\"\n", i/2, i, strings.TrimSpace(words))
	}
	b.WriteString("→ permit al loom_write loom_generate doc_write\n→ yield")
	e.run(e.admin, b.String())
	calls := []string{
		"→ view 1", "→ tree", "→ view 150", "→ list 2 continuations", "→ view branch:256 as:prose",
		"→ pin 150", `→ stash "rooms" summary-of:100-140`, `→ recall "rooms"`, "→ tree from:8 depth:3",
		`→ annotate 150 "the turn"`, "→ view 150 with-annotations", "→ switch to 299", `→ add "And then the door."`,
		"→ continue from 301", "→ memory", `→ write doc:"notes" append "grief; rain"`, `→ read doc:"notes"`,
		"Node 299 reads well.\n→ view 299", "→ list 1 continuations", "→ view branch:300 as:nodes", "→ tree summary",
		"→ preview 4 depth:3", "→ memory trace", `→ drop recall:"rooms"`, "→ view 2", "→ yield",
	}
	var toks []int
	for _, c := range calls {
		out := e.model(e.ag["al"], c)
		toks = append(toks, (len(out)+3)/4)
	}
	sorted := slices.Clone(toks)
	slices.Sort(sorted)
	p50, mx := sorted[len(sorted)/2], sorted[len(sorted)-1]
	t.Logf("tokens per sync_loom result over %d calls on a 300-node tree: p50 %d, max %d (each: %v)", len(toks), p50, mx, toks)
	// The first result carries the onboarding (~300 tokens) once; after
	// it, memory (≤400) + ambient + one result (≤600 unless full).
	if mx > 1600 {
		t.Fatalf("a result of ~%d tokens", mx)
	}
}
