package envelope

// Entry versions in reads. A write's if_version needs the version the
// writer read, and the read that shows it is the read of one scope (only:
// "state.<scope>"): a read-modify-write reads the entries it writes, and
// the default read, which samples every scope, stays as small as it was.
// The versions sit beside the state, scope → key → version, for exactly
// the entries the envelope shows when it is encoded: a budget cut, a
// delta or a page that drops an entry drops its version with it, so the
// map never names a key the reader was not shown.

import (
	"slices"

	"github.com/syncsubstrate/sync/substrate/defs"
)

// EntryVersions are the versions of the entries of the scopes a read
// named; Envelope.Versions.
type EntryVersions struct {
	// shown is the envelope's shownVersions: which of all it shows now.
	shown func(all map[string]map[string]int64) map[string]map[string]int64
	all   map[string]map[string]int64 // scope → key → version, as read
}

// ShowVersions records the versions of the entries of the scopes a read
// named one by one (only: "state.<scope>"), scope → key → version as read:
// Versions shows those of the entries the envelope shows when encoded.
func (e *Envelope[A]) ShowVersions(all map[string]map[string]int64) {
	if all != nil {
		e.Versions = &EntryVersions{shown: e.shownVersions, all: all}
	}
}

// shownVersions is the versions of all of the entries e shows now.
func (e *Envelope[A]) shownVersions(all map[string]map[string]int64) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for scope, vs := range all {
		keys, ok := ScopeEntries(e.State[scope])
		if !ok {
			continue
		}
		m := map[string]int64{}
		for k := range keys {
			if k == "_summary" && e.summarized[scope] {
				continue // the cut's summary, not the entry of that name
			}
			if n, ok := vs[k]; ok {
				m[k] = n
			}
		}
		if len(m) > 0 {
			out[scope] = m
		}
	}
	return out
}

// current is the versions of the entries the envelope shows now.
func (v *EntryVersions) current() map[string]map[string]int64 {
	if v == nil || v.shown == nil {
		return nil
	}
	return v.shown(v.all)
}

// Of returns the version of scope/key when the envelope shows it.
func (v *EntryVersions) Of(scope, key string) (int64, bool) {
	n, ok := v.current()[scope][key]
	return n, ok
}

// IsZero reports no shown entry with a version (omitzero drops the field).
func (v *EntryVersions) IsZero() bool { return len(v.current()) == 0 }

// MarshalJSON encodes the shown versions (encoding/json sorts the keys).
func (v *EntryVersions) MarshalJSON() ([]byte, error) { return encodeJSON(v.current()) }

// VersionsRead is the read that shows the versions of scope's entries,
// as a step's arguments: what the if_version help and a version
// conflict's hint name.
func VersionsRead(scope string) map[string]any {
	return map[string]any{"only": "state." + scope}
}

// VersionsShown are the versions (scope → key → version) of the scopes
// of state, a read's state section, that req names one by one (only:
// "state.<scope>"): what ShowVersions is handed. versions are a scope's
// entries' versions by its name (self's is its agent id).
func VersionsShown(req ContextRequest, self string, state map[string]any, versions func(name string) map[string]int64) map[string]map[string]int64 {
	var all map[string]map[string]int64
	for scope := range state {
		if !slices.Contains(req.Only, "state."+scope) {
			continue
		}
		name := scope
		if scope == defs.ScopeSelf {
			name = self
		}
		vs := versions(name)
		if len(vs) == 0 {
			continue
		}
		if all == nil {
			all = map[string]map[string]int64{}
		}
		all[scope] = vs
	}
	return all
}
