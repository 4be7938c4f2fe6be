package envelope

// The reader's state as the read rule leaves it: the entries it hides one
// by one taken out, the gated entries their gates admitted put in, and
// the name of what such a state was decided for, under which the results
// of its gates are shared. The core builds the state from its snapshot
// (scope → key → value; the maps of scopes not in modified are the
// snapshot's, shared by every read, and are copied before a change).

import (
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/defs"
)

// HideEntries takes out of state the entries of a scope vis shows that
// vis hides one by one (an agent's loom memory, in its scope granted to
// another): hidden from what the context shows and from what the
// reader's expressions, and those of definitions registered by it,
// compute with. It returns modified with the scopes it copied. Scopes a
// rule hides nothing in cost a call of HiddenPrefixes.
func HideEntries(state map[string]any, modified map[string]bool, vis *authority.Visibility) map[string]bool {
	for scope, m := range state {
		entries, ok := m.(map[string]any)
		if !ok || !vis.Scope(scope) {
			continue
		}
		prefixes := vis.HiddenPrefixes(scope)
		if len(prefixes) == 0 {
			continue
		}
		var cp map[string]any
		for k := range entries {
			if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(k, p) }) || vis.Entry(scope, k) {
				continue
			}
			if cp == nil {
				cp = maps.Clone(entries)
			}
			delete(cp, k)
		}
		if cp != nil {
			state[scope] = cp
			if modified == nil {
				modified = map[string]bool{}
			}
			modified[scope] = true
		}
	}
	return modified
}

// AddEntries adds the gated entries admitted (entry says each one's
// scope, key and value) to state, copying a scope's map before its first
// change, and returns modified with the scopes it copied.
func AddEntries[E any](state map[string]any, modified map[string]bool, add []E, entry func(E) (scope, key string, val any)) map[string]bool {
	for _, e := range add {
		scope, key, val := entry(e)
		if modified == nil {
			modified = map[string]bool{}
		}
		if !modified[scope] {
			cp := map[string]any{}
			if old, ok := state[scope].(map[string]any); ok {
				for k, v := range old {
					cp[k] = v
				}
			}
			state[scope] = cp
			modified[scope] = true
		}
		state[scope].(map[string]any)[key] = val
	}
	return modified
}

// ReadableState is state narrowed to the entries vis lets its reader see
// one by one (an agent's thoughts in a scope granted to another, say),
// for what is shown to it rather than what its expressions compute with.
// The reader's own scope (self) is its own.
func ReadableState(state map[string]any, vis *authority.Visibility) map[string]any {
	out := make(map[string]any, len(state))
	for scope, m := range state {
		out[scope] = m
		entries, ok := m.(map[string]any)
		if !ok || scope == defs.ScopeSelf || !vis.Scope(scope) {
			continue
		}
		var cp map[string]any
		for k := range entries {
			if vis.Entry(scope, k) {
				continue
			}
			if cp == nil {
				cp = make(map[string]any, len(entries))
				for k2, v := range entries {
					cp[k2] = v
				}
			}
			delete(cp, k)
		}
		if cp != nil {
			out[scope] = cp
		}
	}
	return out
}

// GateKey names the authority entry-level gates evaluate with: the
// reader's self, the scopes its state holds and what the read rules let
// it see in them (rules: Visibility.ShareKey, for the room token and a
// view link read the same scopes, but only the first an agent's
// operational memory). Gates see nothing else but now and agents, and
// gates reading those are not memoised.
func GateKey(self string, state map[string]any, rules string) string {
	scopes := make([]string, 0, len(state))
	for sc := range state {
		scopes = append(scopes, sc)
	}
	sort.Strings(scopes)
	return self + "\x00" + strings.Join(scopes, "\x00") + "\x00\x00" + rules
}

// SharedAndSelf completes a reader's state: _shared is always there when
// keep admits it (so state._shared.x reads "no such key: x"), and an
// agent's own scope is there as self too ({} before it has one).
func SharedAndSelf(state map[string]any, self string, keep func(scope string) bool) {
	if _, ok := state[defs.ScopeShared]; !ok && keep(defs.ScopeShared) {
		state[defs.ScopeShared] = map[string]any{}
	}
	if self != "" {
		if own, ok := state[self]; ok {
			state[defs.ScopeSelf] = own
		} else {
			state[defs.ScopeSelf] = map[string]any{}
		}
	}
}
