package loom_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/loom"
)

func (e *loomEnv) model(p *substrate.Principal, text string) string {
	e.t.Helper()
	res, err := loom.Of(e.svc).ForModel(context.Background(), p, e.room, text)
	if err != nil {
		e.t.Fatalf("%s: %v", text, err)
	}
	return res.Text
}

// in order: each want appears after the one before.
func inOrder(t *testing.T, text string, want ...string) {
	t.Helper()
	at := 0
	for _, w := range want {
		i := strings.Index(text[at:], w)
		if i < 0 {
			t.Fatalf("missing %q (in order) in:\n%s", w, text)
		}
		at += i + len(w)
	}
}

const root = "The house stood empty at the end of the lane."
const second = "She hadn't visited since her mother's death, and the door was open."

// What a model connected over MCP reads with every sync_loom result: its
// memory block first (pins, recalled stashes, the last trace lines, its
// turn and pending generations), the ambient line, what faded since the
// last result, the results, the marker.
func TestLoomForModelAssemblesMemory(t *testing.T) {
	e := newLoom(t, substrate.Options{}, "al")
	e.run(e.admin, `→ new tree "t" "`+root+`"
→ add "`+second+`"
→ permit al loom_write loom_generate
→ yield`)
	a := e.ag["al"]
	e.model(a, "→ switch to 1") // onboarding
	out := e.model(a, `→ pin 2
→ stash "arc" "Marie's reluctance stems from the funeral."
→ recall "arc"
→ view 1`)
	inOrder(t, out, "⟨memory⟩", "pin 2: "+second, `recalled "arc": Marie's reluctance`, "did ", "⟨node:1 depth:0",
		"→ pin 2", "→ view 1\n#1", "⟨r2: shown once")
	// The next result says what faded, by marker.
	out = e.model(a, "→ switch to 2\n→ add \"Inside, dust.\"\n→ continue from 3")
	inOrder(t, out, "⟨memory⟩", "your turn on branch 1 of tree 1", "pending g1: 0 of 1 continuations of node 3",
		"⟨r2 faded: recall \"arc\" · view 1", "⟨r3: shown once")
	if strings.Contains(out, "#1 · _room") {
		t.Fatalf("the faded result is shown again:\n%s", out)
	}
	// Dropping a recall takes it out of the block; the stash stays.
	out = e.model(a, `→ drop recall:"arc"`)
	if strings.Contains(out, `recalled "arc"`) {
		t.Fatalf("dropped recall still in the block:\n%s", out)
	}
	// Content the model names or quotes (of what it was just shown) is
	// pinned, with a line saying so.
	e.model(a, "→ view 3")
	out = e.model(a, "Node 3 is where it turns; I like \"Inside, dust.\" less than 1.\n→ tree")
	has(t, out, "pinned 3 automatically (you named or quoted it; → drop N unpins)", "pin 3: Inside, dust.")
}

// A result over the budget is summarised, with the command that shows it;
// a command that asked for full gets it.
func TestLoomForModelSummarisesLargeResults(t *testing.T) {
	long := strings.Repeat("The rain kept falling on the roof of the old house. ", 80) // ~1,000 tokens
	stub := newStub(t, " Rain falls on an old house.")
	e := newLoom(t, substrate.Options{}, "al")
	loom.Attach(e.svc, loom.Options{GeneratorURL: stub.srv.URL, GeneratorModel: "tiny"})
	e.run(e.admin, `→ new tree "t" "`+long+`"`)
	out := e.model(e.ag["al"], "→ view 1")
	has(t, out, "over the 600-token budget, summarised; the text: → view 1 full", "summary by tiny: Rain falls on an old house.")
	if strings.Count(out, "The rain kept falling") > 0 {
		t.Fatalf("the large result was shown:\n%s", out)
	}
	if p := stub.got(); len(p) != 1 || !strings.Contains(p[0], "The rain kept falling") {
		t.Fatalf("generator asked %q", p)
	}
	out = e.model(e.ag["al"], "→ view 1 full")
	if strings.Count(out, "The rain kept falling") != 80 {
		t.Fatal("view 1 full was not shown whole")
	}
	// Without a generator: extractive, and it says so.
	e2 := newLoom(t, substrate.Options{}, "al")
	e2.run(e2.admin, `→ new tree "t" "`+long+`"`)
	has(t, e2.model(e2.ag["al"], "→ view 1"), "extractive summary (sentences spread over the text; no generator is configured)")
}

// Over its budget the memory block prunes, says what it dropped and how
// to recall it.
func TestLoomForModelPrunes(t *testing.T) {
	e := newLoom(t, substrate.Options{}, "al")
	loom.Attach(e.svc, loom.Options{MemoryTokens: 120})
	e.run(e.admin, `→ new tree "t" "`+root+`"
→ add "`+second+`"
→ add "`+second+` Again."`)
	a := e.ag["al"]
	out := e.model(a, `→ pin 1
→ pin 2
→ pin 3
→ stash "arc" "`+strings.Repeat("long stash words ", 20)+`"
→ recall "arc"`)
	has(t, out, "pruned to fit 120 tokens:", "older trace lines (→ memory trace)", `recalled "arc"'s text (→ recall "arc")`)
	blk := out[strings.Index(out, "⟨memory⟩"):]
	blk = blk[:strings.Index(blk, "\n\n")]
	if n := (len(blk) + 3) / 4; n > 120 {
		t.Fatalf("block of ~%d tokens over 120:\n%s", n, blk)
	}
}

// The pruning notice stays within the block's budget: it names the first
// things it pruned and counts the rest (it listed every one, and with a
// dozen pins the notice alone was several times the budget).
func TestLoomForModelPruneNoticeFits(t *testing.T) {
	e := newLoom(t, substrate.Options{}, "al")
	loom.Attach(e.svc, loom.Options{MemoryTokens: 100})
	var b strings.Builder
	b.WriteString(`→ new tree "t" "` + root + `"` + "\n")
	for i := 2; i <= 14; i++ {
		b.WriteString(`→ add from:1 "` + second + `"` + "\n")
	}
	e.run(e.admin, b.String())
	a := e.ag["al"]
	var pins strings.Builder
	for i := 1; i <= 14; i++ {
		pins.WriteString("→ pin " + strconv.Itoa(i) + "\n")
	}
	out := e.model(a, pins.String()+"→ view 1")
	blk := out[strings.Index(out, "⟨memory⟩"):]
	blk = blk[:strings.Index(blk, "\n\n")]
	has(t, blk, "pruned to fit 100 tokens:", "more (→ memory lists everything)")
	if n := loom.Tokens(blk); n > 100 {
		t.Fatalf("block of ~%d tokens over 100:\n%s", n, blk)
	}
}

// One assembly of a path's text, read two ways: the base model's prompt
// (→ continue) and the collaborator's prose (→ view branch:B as:prose and
// a collaborator's conversation). Human-typed nodes are kept apart in
// both; instruction nodes steer the collaborator only.
func TestPathTextForBothModels(t *testing.T) {
	path := []loom.Node{
		{ID: 1, Content: "Once upon a time"},
		{ID: 2, Content: "there was", Edge: "primary"},
		{ID: 3, Content: " a fox", Model: true},
		{ID: 4, Content: "make it darker", Edge: "instruction"},
		{ID: 5, Content: "It hunted."},
	}
	if got, want := loom.PathText(path, loom.ForBase), "Once upon a time\n\nthere was a fox\n\nIt hunted."; got != want {
		t.Fatalf("base: %q, want %q", got, want)
	}
	if got, want := loom.PathText(path, loom.ForCollaborator), "Once upon a time ︱ there was ︱› a fox ︱ make it darker ︱ It hunted."; got != want {
		t.Fatalf("collaborator: %q, want %q", got, want)
	}
}
