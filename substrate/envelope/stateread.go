package envelope

import (
	"slices"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/write"
)

// A state read (the core's ReadState) as the rules say it: what it asks
// for and may ask for, and which of the entries its queries selected the
// reader is shown. The core runs the queries and evaluates the gates.

// ReadQuery selects what a state read returns.
type ReadQuery struct {
	// Scope limits the read to one scope ("self" for the caller's own): its
	// mutable entries, then a page of its append entries. Without Scope,
	// the mutable entries of every visible scope are returned; logs are
	// read one scope at a time.
	Scope string
	// Key selects one entry of Scope.
	Key string
	// After pages a log: append entries with sort_key > After.
	After int64
	// Before, when set, reads a log from its newest end: the newest Limit
	// append entries with After < sort_key < Before, still oldest first
	// (math.MaxInt64 for the very newest); More then says older entries
	// were left out (page back with before=<first sort_key>). Zero: the
	// oldest Limit after After.
	Before int64
	// Limit caps the append entries returned. Default 100, at most
	// Limits.MaxLogPage.
	Limit int
	// Disabled keeps the entries whose enabled expression hides them,
	// marked Disabled, and marks every gated entry Gated: an owner's view
	// of the room (the dashboard). Room authority only; ignored for
	// anyone else, whom a gate hides an entry from as always.
	Disabled bool
}

// StateRead is the result of a state read.
type StateRead struct {
	// Seq is the room's seq at the snapshot the read saw.
	Seq     int64         `json:"seq"`
	Entries []write.Entry `json:"entries"`
	// More is true when entries were cut: page a log on with
	// after=<last sort_key>; for a whole-room read, read scope by scope.
	More bool `json:"more,omitempty"`
}

// CheckReadQuery bounds q's page (at most maxPage) and resolves its scope
// into the one p may read, refusing a key without a scope and a scope p
// may not read.
func CheckReadQuery(p *authority.Principal, q *ReadQuery, maxPage int) error {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	q.Limit = min(q.Limit, maxPage)
	if q.Key != "" && q.Scope == "" {
		return errs.New(errs.InvalidField, "key needs scope").WithHint("send scope and key together")
	}
	if q.Scope != "" {
		scope, err := authority.ResolveScope(p, q.Scope)
		if err != nil {
			return err
		}
		if !authority.CanRead(p, scope) {
			return authority.ReadDenied(scope, "")
		}
		q.Scope = scope
	}
	return nil
}

// GatedEntry is an entry a read collected that has an `enabled`
// expression: its index in the read's entries and the expression.
type GatedEntry struct {
	At      int
	Enabled string
}

// VisibleEntries keeps the entries vis admits, and the gated entries
// among them (re-indexed): what the queries select, the read rule thins,
// so that a mistake in a query cannot show a private scope.
func VisibleEntries(vis *authority.Visibility, entries []write.Entry, gated []GatedEntry) ([]write.Entry, []GatedEntry) {
	gate := make(map[int]string, len(gated))
	for _, g := range gated {
		gate[g.At] = g.Enabled
	}
	kept, keptGated := entries[:0], gated[:0]
	for i, e := range entries {
		if !vis.Entry(e.Scope, e.Key) {
			continue
		}
		if g, ok := gate[i]; ok {
			keptGated = append(keptGated, GatedEntry{At: len(kept), Enabled: g})
		}
		kept = append(kept, e)
	}
	return kept, keptGated
}

// DropEntry removes entries[i], keeping gated's indices on the entries
// they name.
func DropEntry(entries []write.Entry, gated []GatedEntry, i int) ([]write.Entry, []GatedEntry) {
	entries = slices.Delete(entries, i, i+1)
	kept := gated[:0]
	for _, g := range gated {
		switch {
		case g.At == i:
			continue
		case g.At > i:
			g.At--
		}
		kept = append(kept, g)
	}
	return entries, kept
}

// GateEntries applies the gates of a state read's entries (seed 001:
// enabled gates visibility, universally), as the context read decides
// them: a mutable entry is shown iff it is in state, the state the
// reader's context would hold; an append entry is shown iff its gate,
// evaluated by eval with that state, holds within the read's budget
// (limit, of which spent is already spent), failing closed past it.
// With mark (an owner's view of the room, ReadQuery.Disabled) nothing is
// dropped: every gated entry is marked Gated, and Disabled when hidden.
func GateEntries(entries []write.Entry, gated []GatedEntry, state map[string]any, spent, limit uint64, eval func(src string) (on bool, cost uint64), mark bool) []write.Entry {
	drop := make(map[int]bool, len(gated))
	for _, g := range gated {
		e := entries[g.At]
		if e.SortKey == nil {
			m, _ := state[e.Scope].(map[string]any)
			if _, ok := m[e.Key]; !ok {
				drop[g.At] = true
			}
			continue
		}
		if spent >= limit {
			drop[g.At] = true
			continue
		}
		on, cost := eval(g.Enabled)
		spent += cost
		if !on {
			drop[g.At] = true
		}
	}
	if mark {
		for _, g := range gated {
			entries[g.At].Gated, entries[g.At].Disabled = true, drop[g.At]
		}
		return entries
	}
	kept := entries[:0]
	for i, e := range entries {
		if !drop[i] {
			kept = append(kept, e)
		}
	}
	return kept
}
