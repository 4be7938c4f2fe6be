package loom_test

import (
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// Every command line of seed 002, as the seed writes it, and what it
// parses to.
func TestLoomParserSeedLines(t *testing.T) {
	cases := []struct{ line, want string }{
		// §Tool Syntax
		{`→ view 23`, `view 23`},
		{`→ branch from 47`, `branch 47`},
		{`→ annotate 23 "this is where the tone shifts"`, `annotate 23 "this is where the tone shifts"`},
		{`→ view node 23`, `view 23`},
		{`→ show 23`, `view 23`},
		{`→ show me node 23`, `view 23`},
		// §Core Navigation Tools
		{`→ view 23 summary`, `view 23 summary`},
		{`→ view 23 with-annotations`, `view 23 with-annotations`},
		{`→ list 47 continuations`, `list 47 continuations`},
		{`→ list 47 annotations`, `list 47 annotations`},
		{`→ list 23 links`, `list 23 links`},
		{`→ preview 47 depth:3`, `preview 47 depth:3`},
		{`→ tree`, `tree`},
		{`→ tree from:20 depth:5`, `tree depth:5 from:20`},
		{`→ tree summary`, `tree summary`},
		// §Content Tools
		{`→ branch from 47 as context`, `branch 47 as context`},
		{`→ branch from 47 as instruction "respond more formally"`, `branch 47 as instruction "respond more formally"`},
		{`→ continue from 47`, `continue 47`},
		{`→ continue from 47 n:3 tokens:40`, `continue 47 n:3 tokens:40`},
		{`→ annotate 47 "key turning point in the argument"`, `annotate 47 "key turning point in the argument"`},
		{`→ annotate 23 "consider returning here if the other branch dead-ends"`, `annotate 23 "consider returning here if the other branch dead-ends"`},
		{`→ link 47 to 23`, `link 47 23 to`},
		{`→ link 47 to doc:"character notes"`, `link 47 to doc:"character notes"`},
		{`→ link 47 to doc:"research" note:"supports the theory discussed here"`, `link 47 to doc:research note:"supports the theory discussed here"`},
		{`→ edit 47 "revised content here"`, `edit 47 "revised content here"`},
		{`→ switch to 23`, `switch 23`},
		{`→ switch to branch 8.2`, `switch 8.2 branch`},
		// §Document Tools
		{`→ read doc:"character notes"`, `read doc:"character notes"`},
		{`→ read doc:"research" summary`, `read summary doc:research`},
		{`→ read doc:"chapter 3" lines:1-50`, `read doc:"chapter 3" lines:1-50`},
		{`→ write doc:"notes" append "new insight about theme"`, `write append doc:notes "new insight about theme"`},
		{`→ write doc:"notes" at:end "conclusion paragraph"`, `write at:end doc:notes "conclusion paragraph"`},
		// §Memory Tools
		{`→ pin 47`, `pin 47`},
		{`→ pin doc:"character notes" section:2`, `pin doc:"character notes" section:2`},
		{`→ stash "character arc insight" "Marie's reluctance stems from..."`, `stash "character arc insight" "Marie's reluctance stems from..."`},
		{`→ stash "key reference" content-of:47`, `stash content-of:47 "key reference"`},
		{`→ recall "character arc insight"`, `recall "character arc insight"`},
		{`→ drop lines:3-7`, `drop lines:3-7`},
		{`→ drop stash:"old notes"`, `drop stash:"old notes"`},
		{`→ memory`, `memory`},
		{`→ memory trace (show action history)`, `memory trace`},
		{`→ memory stashed (show stashed items)`, `memory stashed`},
		// §Context management rules
		{`→ stash "early discussion" summary-of:12-34`, `stash summary-of:12-34 "early discussion"`},
		{`→ drop lines:1-20`, `drop lines:1-20`},
		// §Buffer Mode Considerations
		{`→ view branch:8 as:prose (stitched together, natural reading, as in above example)`, `view as:prose branch:8`},
		{`→ view branch:8 as:nodes (separated with full metadata)`, `view as:nodes branch:8`},
		// §Error Handling
		{`→ view 999`, `view 999`},
		{`→ edit 47 "new content"`, `edit 47 "new content"`},
		{`→ jump tree:7 node:23`, `jump node:23 tree:7`},
		{`→ memory errors`, `memory errors`},
		// §Onboarding
		{`→ help`, `help`},
		// Agent ids of people's clients have a colon; they are not options.
		{`→ permit alice:claude-ai loom_write`, `permit alice:claude-ai loom_write`},
		// ASCII arrow, curly quotes.
		{`-> view 23`, `view 23`},
		{`→ annotate 4 “curly”`, `annotate 4 "curly"`},
	}
	for _, c := range cases {
		cmds, err := loom.Parse(c.line)
		if err != nil {
			t.Errorf("%s: %v", c.line, err)
			continue
		}
		if len(cmds) != 1 {
			t.Errorf("%s: %d commands", c.line, len(cmds))
			continue
		}
		if got := cmds[0].Canon(); got != c.want {
			t.Errorf("%s\n got  %s\n want %s", c.line, got, c.want)
		}
	}
}

// The seed's think block (§Thinking Tool): several lines, closed by ←,
// kept verbatim, between other commands.
func TestLoomParserThinkBlock(t *testing.T) {
	text := "Some prose the model wrote.\n→ think\nI notice the human seems stuck on this scene. The problem might be that \nthe motivation for the character's choice isn't clear yet.\n←\n→ view 23\n→ think short one ←"
	cmds, err := loom.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 3 || cmds[0].Verb != "think" || cmds[1].Canon() != "view 23" || cmds[2].Texts[0] != "short one" {
		t.Fatalf("got %+v", cmds)
	}
	if !strings.Contains(cmds[0].Texts[0], "motivation for the character") {
		t.Fatalf("think text %q", cmds[0].Texts[0])
	}
	if _, err := loom.Parse("→ think\nnever closed"); !errs.Is(err, errs.InvalidField) {
		t.Fatalf("unclosed think: %v", err)
	}
}

// Invalid syntax answers with the nearest command.
func TestLoomParserNearest(t *testing.T) {
	for line, nearest := range map[string]string{
		"→ veiw 23":               "view",
		"→ anotate 4 \"x\"":       "annotate",
		"→ contnue from 3":        "continue",
		"→ frobnicate everything": "help",
		"→ \"just a quote\"":      "help",
	} {
		_, err := loom.Parse(line)
		e := errs.From(err)
		if e.Code != errs.InvalidField || e.Details["nearest"] != nearest || !strings.HasPrefix(e.Message, "✗ unknown command") {
			t.Errorf("%s: %v %v", line, err, e.Details)
		}
	}
	if _, err := loom.Parse("no arrow here"); err == nil {
		t.Error("text without a command parsed")
	}
}

// A word a command does not take is refused (it used to be ignored, so
// "view 1 bogus" viewed 1), with what was wrong and the command as most
// likely meant; the words each verb reads still parse.
func TestLoomParserRefusesUnknownWords(t *testing.T) {
	for line, want := range map[string][2]string{
		"→ view 1 bogus":             {`✗ view does not take "bogus" (it takes only summary, full, with-annotations, with-links, branch). did you mean: → view 1`, "view 1"},
		"→ view 1 ful":               {`did you mean: → view 1 full`, "view 1 full"},
		"→ list 47 anotations":       {`✗ list does not take "anotations"`, "list 47 annotations"},
		"→ memory trase":             {`did you mean: → memory trace`, "memory trace"},
		"→ continue from 3 quickly":  {`✗ continue does not take "quickly" (it takes no bare words)`, "continue from 3"},
		"→ tree summry depth:2":      {`did you mean: → tree summary depth:2`, "tree summary depth:2"},
		"→ help viwe":                {`✗ help does not take "viwe"`, "help view"},
		"→ stop claude please now":   {`✗ stop takes one collaborator`, "stop"},
		`→ add "text" as instrucion`: {`did you mean: → add "text" as instruction`, `add "text" as instruction`},
	} {
		_, err := loom.Parse(line)
		e := errs.From(err)
		if e.Code != errs.InvalidField || !strings.Contains(e.Message, want[0]) || e.Details["nearest"] != want[1] || !strings.HasPrefix(e.Hint, "usage: → ") {
			t.Errorf("%s:\n got  %v %v (hint %q)\n want %q nearest %q", line, err, e.Details["nearest"], e.Hint, want[0], want[1])
		}
	}
	for _, line := range []string{"→ help view", "→ help", "→ stop", "→ stop claude", "→ permit bob loom_write human", "→ switch to branch 8.2",
		"→ branch from 4 as context", "→ write doc:\"n\" append \"x\"", "→ view 2 with-links with-annotations full", "→ show me the node 23 please",
		"→ tree from 20", `→ add from 3 "text"`} {
		if _, err := loom.Parse(line); err != nil {
			t.Errorf("%s: %v", line, err)
		}
	}
}
