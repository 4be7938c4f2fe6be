package defs_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/substrate/defs"
)

// An invocation's message names it with its params in key order, and a
// long one is cut on a character boundary, still closed.
func TestCallText(t *testing.T) {
	if got := defs.CallText("claim", map[string]any{"task": "t1", "at": 2}); got != `claim(at=2, task="t1")` {
		t.Fatalf("got %s", got)
	}
	if got := defs.CallText("ping", nil); got != "ping()" {
		t.Fatalf("got %s", got)
	}
	long := defs.CallText("says", map[string]any{"text": strings.Repeat("é", defs.MaxCallText)})
	if !utf8.ValidString(long) || !strings.HasSuffix(long, "…)") || len(long) > defs.MaxCallText+len("…)") {
		t.Fatalf("a long call is %d bytes, valid %v: %.40s…", len(long), utf8.ValidString(long), long)
	}
}

// A refusal's explanation shows the invoker a value it read only when the
// invoker reads the same at that path itself.
func TestShownOf(t *testing.T) {
	read := map[string]any{"state._shared.n": 2, "state.bob.secret": "x", "state.ann.mine": map[string]any{"a": 1}}
	again := map[string]any{"state._shared.n": 2, "state.bob.secret": nil, "state.ann.mine": map[string]any{"a": 1}}
	got := defs.ShownOf(read, again)
	if got["state._shared.n"] != 2 || got["state.bob.secret"] != "<not yours to read>" || got["state.ann.mine"] == "<not yours to read>" || len(got) != 3 {
		t.Fatalf("shown %v", got)
	}
	if got := defs.ShownOf(map[string]any{"state.x": 1}, map[string]any{}); got["state.x"] != "<not yours to read>" {
		t.Fatalf("a path not read again: %v", got)
	}
}
