package substrate

import (
	"fmt"
	"slices"
	"testing"
)

// factsOf answers for the source asked about, whatever the table held
// before (other sources, a table that started over past its bound).
func TestFactsOfAnswersForItsSource(t *testing.T) {
	for i := range maxSrcFacts + 10 {
		src := fmt.Sprintf(`state.s%d.?k%d.orValue(0) + views.v%d`, i, i, i)
		if i%3 == 0 {
			src = fmt.Sprintf(`now > timestamp("2020-01-01T00:00:00Z") || %d > 0`, i)
		}
		f := factsOf(src)
		want := scanFacts(src)
		if f.anyTime != want.anyTime || !slices.Equal(f.scopes, want.scopes) || !slices.Equal(f.views, want.views) || !slices.Equal(f.paths, want.paths) {
			t.Fatalf("%q: facts %+v, want %+v", src, f, want)
		}
		if i%3 != 0 && (f.anyTime || !slices.Equal(f.views, []string{fmt.Sprint("v", i)}) || len(f.paths) != 1 || f.paths[0] != [2]string{fmt.Sprint("s", i), fmt.Sprint("k", i)}) {
			t.Fatalf("%q: facts %+v", src, f)
		}
	}
}

// The table's slices are every reader's: one reader's append must not
// land in what another reader appended to its own.
func TestFactsOfSlicesAreAppendSafe(t *testing.T) {
	src := `views.a + views.b + views.c + state.s.?k.orValue(0) + state.t.?k.orValue(0) + state.u.?k.orValue(0)`
	a := append(ViewRefs(src), "mine")
	b := append(ViewRefs(src), "yours")
	if a[3] != "mine" || b[3] != "yours" {
		t.Errorf("two readers' appends share the table's array: %v, %v", a, b)
	}
	p := append(StatePaths(src), [2]string{"mine"})
	q := append(StatePaths(src), [2]string{"yours"})
	if p[3][0] != "mine" || q[3][0] != "yours" {
		t.Errorf("two readers' appends share the table's array: %v, %v", p, q)
	}
}
