package loom_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// stubModel is a scripted OpenAI-compatible server: it records every
// request's prompt (completions) or messages (chat) and answers with the
// next scripted text (the last one repeats).
type stubModel struct {
	mu      sync.Mutex
	prompts []string
	answers []string
	srv     *httptest.Server
}

func newStub(t *testing.T, answers ...string) *stubModel {
	s := &stubModel{answers: answers}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Prompt string `json:"prompt"`
			N      int    `json:"n"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		s.mu.Lock()
		s.prompts = append(s.prompts, req.Prompt)
		a := s.answers[min(len(s.prompts)-1, len(s.answers)-1)]
		s.mu.Unlock()
		choices := []map[string]string{}
		for range max(req.N, 1) {
			choices = append(choices, map[string]string{"text": a})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": choices})
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *stubModel) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.prompts...)
}

// A room token has no stored position; it gets one for the call, and a
// write with no place is refused, never attached under the root.
func TestLoomRoomTokenPositionHoldsForTheCall(t *testing.T) {
	e := newLoom(t, substrate.Options{})
	e.run(e.admin, `→ new tree "t" "root"
→ add "two"
→ add "three"`)
	res := e.run(e.admin, `→ switch to 2
→ add "under two"`)
	has(t, res.Text, "✓ node 4 (child of 2, branch 2.2)")
	// Chained in one call: 2 → 3 (first call), so each add is the child
	// of the one before.
	res = e.run(e.admin, "→ view 3")
	has(t, res.Text, "#3 ← 2")
	// A new call starts with no position: refused, with the way out.
	e.fail(e.admin, `→ add "where?"`, errs.InvalidField, "add needs a place: this credential is not an agent")
	res = e.run(e.admin, `→ add from:4 "under four"`)
	has(t, res.Text, "✓ node 5 (child of 4")
	// An agent that never moved is refused the same way.
	e2 := newLoom(t, substrate.Options{}, "al")
	e2.run(e2.admin, `→ new tree "t" "root"
→ permit al loom_write`)
	e2.fail(e2.ag["al"], `→ add "x"`, errs.InvalidField, "you have no position in tree 1 yet")
}

// The base model's prompt keeps human-typed nodes apart; model-written
// nodes continue verbatim; instructions, annotations and thinking stay out.
func TestLoomGeneratorPromptSeparators(t *testing.T) {
	stub := newStub(t, " and then")
	e := newLoom(t, substrate.Options{}, "al")
	loom.Attach(e.svc, loom.Options{GeneratorURL: stub.srv.URL})
	e.run(e.admin, `→ new tree "t" "Once upon a time"
→ add "there was"
→ annotate 2 "ANNOTATION-TEXT"
→ branch from 2 as instruction "INSTRUCTION-TEXT"
→ continue from 2`)
	e.run(e.admin, `→ switch to 4
→ add "a fox."`)
	e.run(e.ag["al"], "→ think\nTHOUGHT-TEXT\n←")
	e.run(e.admin, `→ continue from 5`)
	p := stub.got()
	if len(p) != 2 || p[0] != "Once upon a time\n\nthere was" || p[1] != "Once upon a time\n\nthere was and then\n\na fox." {
		t.Fatalf("prompts %q", p)
	}
}

// A parse failure is traced as written with verb parse, an unknown verb
// with verb unknown: never as the suggestion or <nil>.
func TestLoomTraceVerbs(t *testing.T) {
	e := newLoom(t, substrate.Options{}, "al")
	e.run(e.admin, `→ new tree "t" "root"`)
	a := e.ag["al"]
	_, err := loom.Of(e.svc).Run(context.Background(), a, "loom", "→ veiw 1")
	if !errs.Is(err, errs.InvalidField) {
		t.Fatal(err)
	}
	_, err = loom.Of(e.svc).Run(context.Background(), a, "loom", `→ annotate 1 "unclosed`)
	if !errs.Is(err, errs.InvalidField) {
		t.Fatal(err)
	}
	res := e.run(a, "→ memory trace")
	has(t, res.Text, "veiw 1", `annotate 1 "unclosed`)
	if tr := res.Steps[0].Text; strings.Contains(tr, "<nil>") || strings.Contains(tr, " help") {
		t.Fatalf("trace:\n%s", res.Text)
	}
	kvs, err := e.svc.ReadState(context.Background(), e.admin, "loom", substrate.ReadQuery{Scope: "al"})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(kvs)
	for _, want := range []string{`"verb":"unknown"`, `"verb":"parse"`, `"line":"veiw 1"`} {
		if !strings.Contains(string(raw), want) {
			t.Fatalf("missing %s in the trace entries: %s", want, raw)
		}
	}
	// The step says so too (and, one line not parsing, nothing ran).
	_, err = loom.Of(e.svc).Run(context.Background(), a, "loom", "→ view 1\n→ frobnicate 2")
	steps, _ := errs.From(err).Details["steps"].([]loom.Step)
	if len(steps) != 2 || steps[1].Verb != "unknown" || steps[1].Command != "frobnicate 2" || steps[0].Error != "not_run" {
		t.Fatalf("%v %+v", err, steps)
	}
}

// summary-of and read … summary summarise: by the generator when there is
// one (asked with the text), else extractively, saying so.
func TestLoomSummaries(t *testing.T) {
	e := newLoom(t, substrate.Options{}, "al")
	e.run(e.admin, `→ new tree "t" "The house stood empty. Nobody came."
→ add "She had not visited since the funeral. It rained."
→ add "The windows watched her. She went in."
→ permit al doc_write
→ write doc:"notes" append "Theme is grief. More words here."
→ write doc:"notes" append "Second point stands. And more."`)
	a := e.ag["al"]
	res := e.run(a, `→ stash "early" summary-of:1-3
→ recall "early"
→ read doc:"notes" summary`)
	has(t, res.Text, "extractive summary (first sentence of each part; no generator is configured)",
		"1: The house stood empty.", "2: She had not visited since the funeral.", "Theme is grief.", "Second point stands.")
	if strings.Contains(res.Text, "Nobody came") || strings.Contains(res.Text, "More words here") {
		t.Fatalf("not a summary:\n%s", res.Text)
	}
	stub := newStub(t, " A woman returns to her late mother's house.")
	e2 := newLoom(t, substrate.Options{}, "al")
	loom.Attach(e2.svc, loom.Options{GeneratorURL: stub.srv.URL, GeneratorModel: "tiny"})
	e2.run(e2.admin, `→ new tree "t" "The house stood empty. Nobody came."
→ add "She had not visited since the funeral."`)
	res = e2.run(e2.ag["al"], `→ stash "early" summary-of:1-2
→ recall "early"`)
	has(t, res.Text, "summary by tiny: A woman returns to her late mother's house.")
	p := stub.got()
	if len(p) != 1 || !strings.Contains(p[0], "1: The house stood empty. Nobody came.\n2: She had not visited") || !strings.Contains(p[0], "summary of the text above") {
		t.Fatalf("prompts %q", p)
	}
}

// loom.Of looks the loom up; it does not attach one. It attached the
// defaults when called first, so a later Attach (the server's, with the
// generator configured) returned that default loom: continuations were
// queued for a generator that was configured and never asked.
func TestLoomOfDoesNotAttach(t *testing.T) {
	stub := newStub(t, " and then")
	e := newLoom(t, substrate.Options{}, "al")
	e.run(e.admin, `→ new tree "t" "Once upon a time"`)
	loom.Attach(e.svc, loom.Options{GeneratorURL: stub.srv.URL})
	e.run(e.admin, `→ continue from 1`)
	if p := stub.got(); len(p) != 1 {
		t.Fatalf("the generator Attach configured after a use of Of was asked %d times", len(p))
	}
}

// A read-only reader of a room deleted since it authenticated (a view
// link, an observing person) was told "this room has no loom tree yet"
// and invited to plant one: the loom's read found no rows and took the
// room for an empty one. It is room_not_found, as every other read says.
func TestLoomReadOfDeletedRoom(t *testing.T) {
	e := newLoom(t, substrate.Options{})
	e.run(e.admin, `→ new tree "t" "root"`)
	if err := e.svc.DeleteRoom(context.Background(), e.admin, "loom"); err != nil {
		t.Fatal(err)
	}
	_, err := loom.Of(e.svc).Run(context.Background(), e.view, "loom", "→ view 1")
	if !errs.Is(err, errs.RoomNotFound) {
		t.Fatalf("a loom read in a deleted room: %v", err)
	}
}

// A call in which a line does not parse runs none of its commands, and
// reports every line in order: the ones that did not parse with what was
// wrong and the nearest command, the others as not run. (A model that
// mistyped one line of a plan must not have the rest run without it.)
func TestLoomCallWithAnUnparsedLineRunsNothing(t *testing.T) {
	e := newLoom(t, substrate.Options{}, "al")
	e.run(e.admin, `→ new tree "t" "root"
→ permit al loom_write`)
	a := e.ag["al"]
	_, err := loom.Of(e.svc).Run(context.Background(), a, "loom", "Here is my plan.\n→ add from:1 \"first\"\n→ veiw 1\n→ add \"second\"\n→ view 1 bogus")
	x := errs.From(err)
	if x.Code != errs.InvalidField {
		t.Fatalf("%v", err)
	}
	inOrder := []string{"✗ nothing ran: 2 of the 4 commands did not parse. Fix them and send the call again.",
		"→ add from:1 \"first\"\n· not run", "→ veiw 1\n✗ unknown command \"veiw\". did you mean: → view 1",
		"→ add \"second\"\n· not run", "→ view 1 bogus\n✗ view does not take \"bogus\""}
	at := 0
	for _, w := range inOrder {
		i := strings.Index(x.Message[at:], w)
		if i < 0 {
			t.Fatalf("missing %q (in order) in:\n%s", w, x.Message)
		}
		at += i + len(w)
	}
	steps, _ := x.Details["steps"].([]loom.Step)
	if len(steps) != 4 || steps[0].Error != "not_run" || steps[1].Error != errs.InvalidField || steps[3].Verb != "view" && steps[3].Verb != "parse" {
		t.Fatalf("%+v", steps)
	}
	if res := e.run(e.admin, "→ tree summary"); !strings.Contains(res.Text, "1 nodes") {
		t.Fatalf("a command of the refused call ran:\n%s", res.Text)
	}
	// A command that fails when it runs (not a parse failure) stops the
	// call: the error names the failed line, the lines that ran (their
	// writes stand) and those that did not run.
	_, err = loom.Of(e.svc).Run(context.Background(), a, e.room, "→ add from:1 \"first\"\n→ view 99\n→ add \"second\"")
	x = errs.From(err)
	if x.Code != errs.NotFound || !strings.HasPrefix(x.Message, "✗ line 2 of 3 failed (→ view 99); line 1 ran and stands; line 3 did not run.") ||
		!strings.Contains(x.Message, "· not run (line 2 failed before it)") || !strings.Contains(x.Hint, "do not send line 1 again") {
		t.Fatalf("%v (hint %q)", err, x.Hint)
	}
	if x.Details["failed_line"] != 2 || fmt.Sprint(x.Details["done"]) != "[1]" || fmt.Sprint(x.Details["not_run"]) != "[3]" {
		t.Fatalf("%v", x.Details)
	}
	if res := e.run(e.admin, "→ tree summary"); !strings.Contains(res.Text, "2 nodes") {
		t.Fatalf("line 3 ran, or line 1 did not:\n%s", res.Text)
	}
}

// An extractive summary of text on one long line (a paragraph, prose
// joined on one line) is sentences spread over all of it, in order, not
// only its first sentence; text of many lines keeps the first sentence of
// each; either stays within the summary's bound.
func TestLoomExtractiveSummaryBySentences(t *testing.T) {
	var ss []string
	for i := 1; i <= 40; i++ {
		ss = append(ss, fmt.Sprintf("Sentence %d tells part %d of the story.", i, i))
	}
	one := strings.Join(ss, " ")
	e := newLoom(t, substrate.Options{}, "al")
	e.run(e.admin, `→ new tree "t" "`+one+`"`)
	sum := e.run(e.ag["al"], `→ stash "s" summary-of:1-1
→ recall "s"`).Text
	has(t, sum, "extractive summary (sentences spread over the text; no generator is configured)", "Sentence 1 tells", " … ")
	var got []int
	for i := 1; i <= 40; i++ {
		if strings.Contains(sum, fmt.Sprintf("Sentence %d tells", i)) {
			got = append(got, i)
		}
	}
	if len(got) < 5 || len(got) > 20 || got[len(got)-1] < 30 || !slices.IsSorted(got) {
		t.Fatalf("sentences %v of 40 in:\n%s", got, sum)
	}
	if i := strings.Index(sum, "Sentence 1 tells"); i < 0 || utf8.RuneCountInString(sum[i:]) > 700 {
		t.Fatalf("a summary over its bound:\n%s", sum)
	}
}
