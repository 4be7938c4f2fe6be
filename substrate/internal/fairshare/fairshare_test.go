package fairshare

import (
	"slices"
	"testing"
)

func fill(lists []List, avail int) map[int][]int {
	out := map[int][]int{}
	Fill(lists, avail, func(i int, items []int) { out[i] = items })
	return out
}

// A small list keeps all its items and leaves the rest of its share to
// the others; the others share equally.
func TestFillIsMaxMinFair(t *testing.T) {
	tens := func(n int) []int { return slices.Repeat([]int{10}, n) }
	got := fill([]List{{Sizes: tens(100)}, {Sizes: tens(2)}, {Sizes: tens(100)}}, 300)
	if len(got[1]) != 2 || len(got[0]) != 14 || len(got[2]) != 14 {
		t.Fatalf("kept %d, %d, %d items; want 14, 2, 14", len(got[0]), len(got[1]), len(got[2]))
	}
}

// An ordered list stops at the first item that does not fit; another
// skips it; a floor holds whatever the share.
func TestFillOrderAndFloor(t *testing.T) {
	sizes := []int{10, 50, 10}
	if got := fill([]List{{Sizes: sizes, Ordered: true}}, 30); !slices.Equal(got[0], []int{0}) {
		t.Fatalf("ordered kept %v", got[0])
	}
	if got := fill([]List{{Sizes: sizes}}, 30); !slices.Equal(got[0], []int{0, 2}) {
		t.Fatalf("unordered kept %v", got[0])
	}
	got := fill([]List{{Sizes: []int{40, 40}, Floor: 40}, {Sizes: []int{40, 40}}}, 60)
	if len(got[0]) != 1 {
		t.Fatalf("the floor did not hold: kept %v", got[0])
	}
}
