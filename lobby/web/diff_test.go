package web

import (
	"golang.org/x/net/html"

	"encoding/json"
	"strings"
	"testing"
)

// A live update sends what changed: one cell of a 60-row table travels
// alone; an item added to a keyed list is inserted, one gone removed;
// a section whose own children change shape is sent whole.
func TestDiffSendsWhatChanged(t *testing.T) {
	table := func(changed int, extra string) string {
		var b strings.Builder
		b.WriteString(`<h1>room</h1><p>seq <span id="seq">7</span></p><section id="state"><table><tbody>`)
		for i := range 60 {
			v := "open"
			if i == changed {
				v = "done"
			}
			b.WriteString(`<tr><td>task:0` + string(rune('0'+i/10)) + string(rune('0'+i%10)) + `</td><td>` + v + `</td><td>1</td></tr>`)
		}
		b.WriteString(`</tbody></table></section><ol id="feed"><li id="a-3">three</li><li id="a-2">two</li>` + extra + `</ol>`)
		return b.String()
	}
	parse := func(s string) []*html.Node {
		ns, err := parseMain(s)
		if err != nil {
			t.Fatal(err)
		}
		return ns
	}
	old, now := parse(table(-1, "")), parse(table(42, ""))
	ps, ok := diffMain(old, now)
	if !ok || len(ps) != 1 || ps[0].ID != "state" || ps[0].Tag != "td" || ps[0].HTML != "<td>done</td>" {
		t.Fatalf("one cell changed: %+v %v", ps, ok)
	}
	if got, want := ps[0].Path, []int{0, 0, 42, 1}; !equalInts(got, want) {
		t.Fatalf("path %v, want %v", got, want)
	}
	if raw, _ := json.Marshal(ps); len(raw) > 200 || len(table(42, "")) < 3000 {
		t.Fatalf("a one-cell change costs %d bytes (the section %d)", len(raw), len(table(42, "")))
	}
	// A new item at the head of a keyed feed, the oldest gone.
	ps, ok = diffMain(parse(`<ol id="feed"><li id="a-3">three</li><li id="a-2">two</li></ol>`), parse(`<ol id="feed"><li id="a-4">four</li><li id="a-3">three</li></ol>`))
	if !ok || len(ps) != 2 || ps[0].Op != "remove" || ps[0].ID != "a-2" || ps[1].Op != "insert" || ps[1].ID != "feed" || ps[1].Before != "a-3" || ps[1].HTML != `<li id="a-4">four</li>` {
		t.Fatalf("keyed feed: %+v %v", ps, ok)
	}
	// Nothing changed: nothing to send.
	if ps, ok := diffMain(old, parse(table(-1, ""))); !ok || len(ps) != 0 {
		t.Fatalf("no change: %+v", ps)
	}
	// The section's own shape changed (a banner appeared): sent whole.
	if _, ok := diffMain(parse(`<h1>a</h1><p>x</p>`), parse(`<h1>a</h1><p class="error">boom</p><p>x</p>`)); ok {
		t.Fatal("a new unkeyed child of main was patched")
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A refusal reads as a sentence when its clause is a simple comparison.
func TestRefusalInWords(t *testing.T) {
	for _, c := range []struct{ clause, want string }{
		{`state._shared[params.task].status == "open"`, `it needs the status of task:010 to be open, and it is claimed`},
		{`state._shared.ready == true`, `it needs _shared.ready to be true, and it is not set`},
		{`size(state._shared) > 3 && x`, ``},
	} {
		read := map[string]any{`state._shared[params.task].status`: "claimed"}
		if got := clauseWords(c.clause, read, map[string]string{"task": "task:010"}); got != c.want {
			t.Errorf("%s: %q, want %q", c.clause, got, c.want)
		}
	}
}
