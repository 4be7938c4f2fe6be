package substrate

import "slices"

// Entry versions in reads. A write's if_version needs the version the
// writer read, and the read that shows it is the read of one scope (only:
// "state.<scope>"): a read-modify-write reads the entries it writes, and
// the default read, which samples every scope, stays as small as it was.
// The versions sit beside the state, scope → key → version, for exactly
// the entries the envelope shows when it is encoded: a budget cut, a
// delta or a page that drops an entry drops its version with it, so the
// map never names a key the reader was not shown.

// EntryVersions are the versions of the entries of the scopes a read
// named; Envelope.Versions.
type EntryVersions struct {
	env *Envelope
	all map[string]map[string]int64 // scope → key → version, as read
}

// versionsRead is the read that shows the versions of scope's entries,
// as a step's arguments: what the if_version help and a version
// conflict's hint name.
func versionsRead(scope string) map[string]any {
	return map[string]any{"only": "state." + scope}
}

// setVersions records the versions of the scopes req names one by one
// (only: "state.<scope>") that env's state shows.
func (env *Envelope) setVersions(rc *roomCtx, req ContextRequest) {
	var all map[string]map[string]int64
	for scope := range env.State {
		if !slices.Contains(req.Only, "state."+scope) {
			continue
		}
		name := scope
		if scope == ScopeSelf {
			name = rc.self
		}
		rows := rc.snap.scopes[name]
		if len(rows) == 0 {
			continue
		}
		vs := make(map[string]int64, len(rows))
		for k, r := range rows {
			vs[k] = r.Version
		}
		if all == nil {
			all = map[string]map[string]int64{}
		}
		all[scope] = vs
	}
	if all != nil {
		env.Versions = &EntryVersions{env: env, all: all}
	}
}

// shown is the versions of the entries the envelope shows now.
func (v *EntryVersions) shown() map[string]map[string]int64 {
	if v == nil || v.env == nil {
		return nil
	}
	out := map[string]map[string]int64{}
	for scope, vs := range v.all {
		keys, ok := scopeEntries(v.env.State[scope])
		if !ok {
			continue
		}
		m := map[string]int64{}
		for k := range keys {
			if k == "_summary" && v.env.summarized[scope] {
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

// Of returns the version of scope/key when the envelope shows it.
func (v *EntryVersions) Of(scope, key string) (int64, bool) {
	n, ok := v.shown()[scope][key]
	return n, ok
}

// IsZero reports no shown entry with a version (omitzero drops the field).
func (v *EntryVersions) IsZero() bool { return len(v.shown()) == 0 }

// MarshalJSON encodes the shown versions (encoding/json sorts the keys).
func (v *EntryVersions) MarshalJSON() ([]byte, error) { return encodeJSON(v.shown()) }
