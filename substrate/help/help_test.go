package help_test

import (
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/help"
)

// limited is a surface with a result limit, as MCP's words are.
type limited struct{ errs.Words }

func (limited) ResultLimit() (int, int) { return 25000, 20000 }

// Every listed key has a text, on a surface with and without a result
// limit, and nothing else is a system key: a key added to Keys without
// its text (or the reverse) would answer help_key_not_found or hide.
func TestEveryKeyHasContent(t *testing.T) {
	lim := help.Limits{MaxContextBytes: 4 << 20, VersionsRead: func(scope string) map[string]any { return map[string]any{"only": "state." + scope} },
		StandardLibrary: []string{"set"}}
	for _, w := range []errs.Words{errs.Plain, limited{errs.Plain}} {
		for _, k := range help.Keys {
			if c, ok := help.Content(k, w, lim); !ok || c == nil {
				t.Errorf("key %q has no content", k)
			}
		}
	}
	if _, ok := help.Content("no_such_key", errs.Plain, lim); ok {
		t.Error("an unlisted key has content")
	}
}

// The context shaping text quotes the surface's largest max_bytes, and
// the server's where the surface sets none.
func TestContextShapingQuotesTheSurfacesBudget(t *testing.T) {
	lim := help.Limits{MaxContextBytes: 4194304}
	plain, _ := help.Content("context_shaping", errs.Plain, lim)
	mcp, _ := help.Content("context_shaping", limited{errs.Plain}, lim)
	if !strings.Contains(plain.(string), "1000 to 4194304") || strings.Contains(plain.(string), "Here a result holds") {
		t.Errorf("plain surface: %s", plain)
	}
	if !strings.Contains(mcp.(string), "1000 to 20000") || !strings.Contains(mcp.(string), "at most 25000 characters") {
		t.Errorf("limited surface: %s", mcp)
	}
}
