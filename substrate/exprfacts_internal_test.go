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
