package envelope

// Which of a scope's entries a reader is shown first when the context's
// size budget (budget.go) cannot show them all, and which keys the
// room's rules watch.

import (
	"encoding/json"
	"iter"
	"sort"
	"strings"

	"github.com/syncsubstrate/sync/substrate/defs"
)

// RankKeys orders a scope's keys by salience for the reader, as the
// original's focus tiers did: entries the reader wrote (mine); then
// entries the room's rules read (action if/enabled, views) or that
// several actions write (contested; watched); then open work (OpenWork),
// so that a cut board shows a sample of what is still to do rather than
// what is done; then the most recently changed (rev); then by name.
func RankKeys(keys map[string]json.RawMessage, mine func(string) bool, watched map[string]bool, rev func(string) int64) []string {
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	open := make(map[string]bool, len(keys))
	for k, raw := range keys {
		open[k] = OpenWork(raw) > 0
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

// OpenWork tells, from an entry's value alone, whether it is work still
// open (1), work that is over (-1), or not work at all (0): an object
// with done false or true, or a status (or state) word, closedStatus or
// not.
func OpenWork(raw json.RawMessage) int {
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

// WatchedKeys are the keys of scope that the room's rules read (srcs:
// its actions' guards and its views' expressions) or that several
// actions write (contested: the _contested view's value, scope.key →
// the claims).
func WatchedKeys(scope string, srcs iter.Seq[string], contested map[string]any) map[string]bool {
	out := map[string]bool{}
	for src := range srcs {
		for _, m := range defs.FactsOf(src).Paths {
			if m[0] == scope {
				out[m[1]] = true
			}
		}
	}
	for target := range contested {
		if sc, key, ok := strings.Cut(target, "."); ok && sc == scope {
			out[key] = true
		}
	}
	return out
}
