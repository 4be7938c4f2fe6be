package substrate

// Which of a scope's entries a reader is shown first when the context's
// size budget (contextsize.go) cannot show them all.

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/syncsubstrate/sync/substrate/defs"
)

// rankKeys orders a scope's keys by salience for the reader, as the
// original's focus tiers did: entries the reader wrote; then entries the
// room's rules read (action if/enabled, views) or that several actions
// write (contested); then open work (openWork), so that a cut board shows
// a sample of what is still to do rather than what is done; then the
// most recently changed; then by name.
func rankKeys(rc *roomCtx, scope string, keys map[string]json.RawMessage) []string {
	name := scope
	if scope == ScopeSelf {
		name = rc.self
	}
	rows := rc.snap.scopes[name]
	watched := watchedKeys(rc, scope)
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	mine := func(k string) bool { r := rows[k]; return r != nil && rc.self != "" && r.Writer == rc.self }
	rev := func(k string) int64 {
		if r := rows[k]; r != nil {
			return r.Revision
		}
		return 0
	}
	open := make(map[string]bool, len(keys))
	for k, raw := range keys {
		open[k] = openWork(raw) > 0
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if mine(a) != mine(b) {
			return mine(a)
		}
		if watched[a] != watched[b] {
			return watched[a]
		}
		if open[a] != open[b] {
			return open[a]
		}
		if rev(a) != rev(b) {
			return rev(a) > rev(b)
		}
		return a < b
	})
	return out
}

// closedStatus are the status words of work that is over.
var closedStatus = map[string]bool{"done": true, "closed": true, "complete": true, "completed": true, "resolved": true, "finished": true,
	"cancelled": true, "canceled": true, "merged": true, "rejected": true, "wontfix": true, "archived": true}

// openWork tells, from an entry's value alone, whether it is work still
// open (1), work that is over (-1), or not work at all (0): an object
// with done false or true, or a status (or state) word, closedStatus or
// not.
func openWork(raw json.RawMessage) int {
	if len(raw) == 0 || raw[0] != '{' {
		return 0
	}
	var v struct {
		Done   *bool   `json:"done"`
		Status *string `json:"status"`
		State  *string `json:"state"`
	}
	if json.Unmarshal(raw, &v) != nil {
		return 0
	}
	switch {
	case v.Done != nil && *v.Done, v.Status != nil && closedStatus[strings.ToLower(*v.Status)]:
		return -1
	case v.Done != nil, v.Status != nil:
		return 1
	case v.State != nil:
		if closedStatus[strings.ToLower(*v.State)] {
			return -1
		}
		return 1
	}
	return 0
}

// watchedKeys are the keys of scope that the room's action guards and views
// read, or that several actions write.
func watchedKeys(rc *roomCtx, scope string) map[string]bool {
	out := map[string]bool{}
	add := func(src string) {
		for _, m := range defs.FactsOf(src).Paths {
			if m[0] == scope {
				out[m[1]] = true
			}
		}
	}
	for _, a := range rc.snap.actions {
		add(a.def.If)
		add(a.def.Enabled)
	}
	for _, v := range rc.snap.views {
		add(v.def.Expr)
	}
	if c, ok := rc.views[viewContested].(map[string]any); ok {
		for target := range c {
			if sc, key, ok := strings.Cut(target, "."); ok && sc == scope {
				out[key] = true
			}
		}
	}
	return out
}
