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
