package defs

// The views' graph as a rule: which views a view's value depends on, and
// when that value is the same for every reader. A view reads others by
// name (views.<id>); a gate on any of them, or a read by a computed name,
// makes what it sees depend on who reads it.

// A ViewNode is what the graph walk needs of one view.
type ViewNode struct {
	// Gated: its value may differ between readers on its own account (an
	// enabled gate, a program that did not compile, views read by a
	// computed name, whose dependencies Reads cannot list).
	Gated bool
	// Reads are the views it reads by name.
	Reads []string
}

// PublicReads walks view id and the views it reads, directly or through
// others (node answers for each; false when the room has no such view),
// and reports whether none of them is gated: only then is id's value the
// same for everyone. reads lists every view visited, id first. A view
// the room lacks is absent for everyone alike, and a cycle is an error
// value, the same for everyone too.
func PublicReads(id string, node func(id string) (ViewNode, bool)) (reads []string, public bool) {
	seen := map[string]bool{}
	var ungated func(id string) bool
	ungated = func(id string) bool {
		n, ok := node(id)
		if !ok || seen[id] {
			return true
		}
		seen[id] = true
		reads = append(reads, id)
		if n.Gated {
			return false
		}
		for _, dep := range n.Reads {
			if !ungated(dep) {
				return false
			}
		}
		return true
	}
	if !ungated(id) {
		return nil, false
	}
	return reads, true
}
