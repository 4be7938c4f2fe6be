package defs

import (
	"fmt"
	"slices"
	"testing"
)

// FactsOf answers for the source asked about, whatever the table held
// before (other sources, a table that started over past its bound).
func TestFactsOfAnswersForItsSource(t *testing.T) {
	for i := range maxSrcFacts + 10 {
		src := fmt.Sprintf(`state.s%d.?k%d.orValue(0) + views.v%d`, i, i, i)
		if i%3 == 0 {
			src = fmt.Sprintf(`now > timestamp("2020-01-01T00:00:00Z") || %d > 0`, i)
		}
		f := FactsOf(src)
		want := scanFacts(src)
		if f.AnyTime != want.AnyTime || !slices.Equal(f.Scopes, want.Scopes) || !slices.Equal(f.Views, want.Views) || !slices.Equal(f.Paths, want.Paths) {
			t.Fatalf("%q: facts %+v, want %+v", src, f, want)
		}
		if i%3 != 0 && (f.AnyTime || !slices.Equal(f.Views, []string{fmt.Sprint("v", i)}) || len(f.Paths) != 1 || f.Paths[0] != [2]string{fmt.Sprint("s", i), fmt.Sprint("k", i)}) {
			t.Fatalf("%q: facts %+v", src, f)
		}
	}
}

// The table's slices are every reader's: one reader's append must not
// land in what another reader appended to its own.
func TestFactsOfSlicesAreAppendSafe(t *testing.T) {
	src := `views.a + views.b + views.c + state.s.?k.orValue(0) + state.t.?k.orValue(0) + state.u.?k.orValue(0)`
	a := append(FactsOf(src).Views, "mine")
	b := append(FactsOf(src).Views, "yours")
	if a[3] != "mine" || b[3] != "yours" {
		t.Errorf("two readers' appends share the table's array: %v, %v", a, b)
	}
	p := append(FactsOf(src).Paths, [2]string{"mine"})
	q := append(FactsOf(src).Paths, [2]string{"yours"})
	if p[3][0] != "mine" || q[3][0] != "yours" {
		t.Errorf("two readers' appends share the table's array: %v, %v", p, q)
	}
}
