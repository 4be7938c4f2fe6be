// Package fairshare shares a room of bytes between lists of items,
// max-min fairly: the context's size budget fitting an envelope's item
// lists (the messages and each state scope) into what is left of it
// (substrate/envelope/budget.go's fitter). Which lists there are, their
// items' order and sizes, and what a cut says are the envelope's rule; this
// only decides how many of each list's items fit.
package fairshare

import "sort"

// List is one list of items to keep a part of.
type List struct {
	// Sizes are the items' sizes, in keeping order.
	Sizes []int
	// Ordered lists keep their items in order, stopping at the first
	// that does not fit (a page); the others skip it and keep trying.
	Ordered bool
	// Floor is the room the list gets whatever its fair share (while
	// any is left): a sample of its first items, say.
	Floor int
}

// need is what all of l's items take.
func (l List) need() int {
	n := 0
	for _, s := range l.Sizes {
		n += s
	}
	return n
}

// Fill shares avail between lists, the smallest need first, each taking
// at most an equal share of what is left (or its Floor) and leaving what
// it does not use to the others. It calls kept for each list, in the
// order it shares them, with the list's index and the indexes of the
// items that fit.
func Fill(lists []List, avail int, kept func(list int, items []int)) {
	order := make([]int, len(lists))
	needs := make([]int, len(lists))
	for i, l := range lists {
		order[i], needs[i] = i, l.need()
	}
	sort.SliceStable(order, func(a, b int) bool { return needs[order[a]] < needs[order[b]] })
	left := max(avail, 0)
	for n, i := range order {
		l := lists[i]
		share := left / (len(order) - n)
		room := max(min(needs[i], share), min(l.Floor, left))
		used := 0
		var items []int
		for j, size := range l.Sizes {
			if used+size > room {
				if l.Ordered {
					break
				}
				continue
			}
			items = append(items, j)
			used += size
		}
		left -= used
		kept(i, items)
	}
}
