package defs_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/substrate/defs"
)

// A room's about is its meta's description (trimmed, cut to AboutLen on a
// character boundary) with its label; a label alone, or meta that is not
// an object, says nothing.
func TestAbout(t *testing.T) {
	if label, desc, ok := defs.About([]byte(`{"label":"Demo","description":"  a room  "}`)); !ok || label != "Demo" || desc != "a room" {
		t.Fatalf("got %q %q %v", label, desc, ok)
	}
	for _, meta := range []string{`{"label":"Demo"}`, `{"description":"   "}`, `{"description":3}`, `[]`, ``} {
		if _, _, ok := defs.About([]byte(meta)); ok {
			t.Errorf("%s: no about", meta)
		}
	}
	_, desc, ok := defs.About([]byte(`{"description":"x` + strings.Repeat("é", defs.AboutLen) + `"}`))
	if !ok || !utf8.ValidString(desc) || !strings.HasSuffix(desc, "…") || len(desc) > defs.AboutLen+len("…") {
		t.Fatalf("a long description is %d bytes, valid %v", len(desc), utf8.ValidString(desc))
	}
}
