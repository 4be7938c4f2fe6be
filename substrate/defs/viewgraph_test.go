package defs_test

import (
	"slices"
	"testing"

	"github.com/syncsubstrate/sync/substrate/defs"
)

// A view is the same for everyone exactly when neither it nor any view it
// reads, however indirectly, is gated; a view the room lacks and a cycle
// are the same for everyone too.
func TestPublicReads(t *testing.T) {
	room := map[string]defs.ViewNode{
		"total":  {Reads: []string{"sum", "gone"}},
		"sum":    {Reads: []string{"parts"}},
		"parts":  {},
		"secret": {Gated: true},
		"leaks":  {Reads: []string{"sum", "secret"}},
		"deep":   {Reads: []string{"leaks"}},
		"ping":   {Reads: []string{"pong"}},
		"pong":   {Reads: []string{"ping"}},
	}
	node := func(id string) (defs.ViewNode, bool) { n, ok := room[id]; return n, ok }
	for _, c := range []struct {
		id     string
		public bool
		reads  []string
	}{
		{"total", true, []string{"total", "sum", "parts"}},
		{"parts", true, []string{"parts"}},
		{"secret", false, nil},
		{"leaks", false, nil},
		{"deep", false, nil},
		{"ping", true, []string{"ping", "pong"}},
	} {
		reads, public := defs.PublicReads(c.id, node)
		if public != c.public || !slices.Equal(reads, c.reads) {
			t.Errorf("PublicReads(%s) = %v, %v; want %v, %v", c.id, reads, public, c.reads, c.public)
		}
	}
}
