package salience

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/syncsubstrate/sync/substrate"
)

// Contested claims and blocked work (help key vocabulary_review): two
// signals the room's own data carries that a reader would otherwise find
// only by reading every entry and the whole log.

// maxBlocked and maxContested bound what _attention lists of each (the
// rest is counted, or in _vocabulary_health).
const (
	maxBlocked   = 5
	maxContested = 5
)

// claim is one claim on a target in the log window: a successful
// invocation of an action with its arguments, or a direct write of an
// entry.
type claim struct {
	seq    int64
	by     string
	action string
	params map[string]any
	entry  string
	// entries are what an invocation replaced, merged or deleted.
	entries []string
}

// contestedOnce is contested, found once per read.
func (sl *salience) contestedOnce(ctx context.Context) []substrate.Contest {
	if sl.contests == nil {
		c := contested(ctx, sl)
		sl.contests = &c
	}
	return *sl.contests
}

// contested finds, in the recent log, targets two or more agents claimed
// within cfg.ContestWithin mutations of each other: the same action
// invoked successfully with the same arguments by different agents
// (both claimed task 42), where the action inserts, replaces, merges or
// deletes an entry (appends and increments add up: votes, notes and
// counters are not contests); or the same entry written directly
// (inserted, set, merged or deleted) by different agents. A claim the vocabulary refused (a failed
// precondition) contests nothing: the room settled it. Only actions the
// reader sees and entries it is shown count. Newest first.
func contested(ctx context.Context, sl *salience) []substrate.Contest {
	r := sl.r
	var shown map[string]bool
	isShown := func(entry string) bool {
		if shown == nil {
			shown = map[string]bool{}
			r.EachShown(func(scope string) bool { return !strings.HasPrefix(scope, "_") || scope == substrate.ScopeShared },
				func(scope, key string, _ int64) { shown[scope+"."+key] = true })
		}
		return shown[entry]
	}
	groups := map[string][]claim{}
	var order []string
	for _, c := range window(ctx, r).claims {
		var k string
		switch {
		case c.action != "":
			if !r.ActionEnabled(c.action) {
				continue
			}
			raw, _ := json.Marshal(c.params) // map keys sorted: one text per arguments
			k = "a\x00" + c.action + "\x00" + string(raw)
		case isShown(c.entry):
			k = "e\x00" + c.entry
		default:
			continue
		}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], c)
	}
	var out []substrate.Contest
	for _, k := range order {
		cs := groups[k]
		var agents []string
		var last int64
		for i := 1; i < len(cs); i++ {
			for j := i - 1; j >= 0 && cs[i].seq-cs[j].seq <= sl.cfg.ContestWithin; j-- {
				if cs[j].by != cs[i].by {
					agents = appendNew(appendNew(agents, cs[j].by), cs[i].by)
					last = cs[i].seq
				}
			}
		}
		if len(agents) < 2 {
			continue
		}
		sort.Strings(agents)
		out = append(out, substrate.Contest{Action: cs[0].action, Params: cs[0].params, Entry: cs[0].entry, Agents: agents, Seq: last})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Seq > out[j].Seq })
	if len(out) > maxContested {
		out = out[:maxContested]
	}
	return out
}

func appendNew(l []string, s string) []string {
	for _, x := range l {
		if x == s {
			return l
		}
	}
	return append(l, s)
}

// claimsOf are the claims an _audit record makes, if any: a successful
// custom invocation that inserts, replaces, merges or deletes an entry, or a
// direct write (one claim per entry it inserts, sets, merges or deletes).
func claimsOf(seq int64, writer string, v map[string]any) []claim {
	ok, _ := v["ok"].(bool)
	kind, _ := v["kind"].(string)
	if !ok && kind == "invoke" {
		return nil
	}
	var entries []string
	ws, _ := v["writes"].([]any)
	for _, w := range ws {
		m, _ := w.(map[string]any)
		op, _ := m["op"].(string)
		scope, _ := m["scope"].(string)
		key, _ := m["key"].(string)
		if (op == "insert" || op == "set" || op == "merge" || op == "delete") && (scope == substrate.ScopeShared || !strings.HasPrefix(scope, "_")) {
			entries = append(entries, scope+"."+key)
		}
	}
	if len(entries) == 0 {
		return nil
	}
	by, _ := v["agent"].(string)
	if by == "" {
		by = writer
	}
	if by == "" || strings.HasPrefix(by, "_") {
		return nil // room authority settles, it does not compete
	}
	switch {
	case kind == "invoke" && v["builtin"] != true:
		action, _ := v["action"].(string)
		params, _ := v["params"].(map[string]any)
		if action == "" {
			return nil
		}
		return []claim{{seq: seq, by: by, action: action, params: params, entries: entries}}
	case kind == "state_write":
		out := make([]claim, len(entries))
		for i, e := range entries {
			out[i] = claim{seq: seq, by: by, entry: e}
		}
		return out
	}
	return nil
}

// blockedOnce is blocked, found once per read.
func (sl *salience) blockedOnce() []substrate.Blocked {
	if sl.blockedItems == nil {
		b := blocked(sl.r)
		sl.blockedItems = &b
	}
	return *sl.blockedItems
}

// blocked are the work items the reader is shown whose fields say they
// are blocked: an object (an entry of _shared or of a scope it reads, or
// an item of a list such an entry holds) whose status is blocked,
// waiting, on hold or stuck, or that names what it waits on
// (blocked_by, waiting_on, waiting_for) or says blocked: true, and whose
// status is not done. Sorted by entry.
func blocked(r *substrate.Read) []substrate.Blocked {
	var out []substrate.Blocked
	r.EachShown(func(scope string) bool { return !strings.HasPrefix(scope, "_") || scope == substrate.ScopeShared },
		func(scope, key string, _ int64) {
			if strings.HasPrefix(key, "_") {
				return
			}
			name := scope + "." + key
			switch v := r.Value(scope, key).(type) {
			case map[string]any:
				if b, ok := blockedItem(name, v); ok {
					out = append(out, b)
				}
			case []any:
				for i, it := range v {
					m, _ := it.(map[string]any)
					if m == nil {
						continue
					}
					id := fmt.Sprint(i)
					if s, ok := m["id"].(string); ok && s != "" {
						id = s
					}
					if b, ok := blockedItem(name+"["+id+"]", m); ok {
						out = append(out, b)
					}
				}
			}
		})
	sort.Slice(out, func(i, j int) bool { return out[i].Entry < out[j].Entry })
	return out
}

var blockedStatuses = map[string]bool{"blocked": true, "waiting": true, "on_hold": true, "on hold": true, "on-hold": true, "stuck": true}

var doneStatuses = map[string]bool{"done": true, "closed": true, "cancelled": true, "canceled": true, "resolved": true, "shipped": true}

// waitFields name what an item waits on.
var waitFields = []string{"blocked_by", "waiting_on", "waiting_for"}

func blockedItem(name string, m map[string]any) (substrate.Blocked, bool) {
	status, _ := m["status"].(string)
	st := strings.ToLower(strings.TrimSpace(status))
	b := substrate.Blocked{Entry: name, Status: status}
	for _, f := range waitFields {
		if w := m[f]; w != nil && w != "" && w != false {
			if l, ok := w.([]any); ok && len(l) == 0 {
				continue
			}
			b.WaitingOn = w
			break
		}
	}
	if blockedStatuses[st] || strings.HasPrefix(st, "blocked") || strings.HasPrefix(st, "waiting") || m["blocked"] == true {
		return b, true
	}
	return b, b.WaitingOn != nil && !doneStatuses[st]
}

// writtenKeys are the _shared keys one of acts writes: by a template's
// literal key, by a template with literal parts and ${…} ones (claim:${…}
// covers claim:T-3), or, for a template that is all ${…}, by what the
// action wrote in the recent log and those keys' siblings (the same name
// up to a trailing number: an action that wrote task_212 writes task_7).
// Messages about such a key are about a concept the vocabulary has.
func writtenKeys(r *substrate.Read, acts []string, win *logWindow) func(key string) bool {
	literal, families := map[string]bool{}, map[string]bool{}
	var globs [][]string
	open := map[string]bool{} // actions with an all-${…} key
	for _, id := range acts {
		a, _ := r.Action(id)
		for _, w := range a.Def.Writes {
			if w.Scope != "" && w.Scope != substrate.ScopeShared {
				continue
			}
			parts := literalParts(w.Key)
			switch {
			case len(parts) == 1 && parts[0] == w.Key:
				literal[w.Key] = true
			case strings.Join(parts, "") == "":
				open[id] = true
			default:
				globs = append(globs, parts)
			}
		}
	}
	for _, c := range win.claims {
		if !open[c.action] {
			continue
		}
		for _, e := range c.entries {
			if k, ok := strings.CutPrefix(e, substrate.ScopeShared+"."); ok {
				literal[k] = true
				families[family(k)] = true
			}
		}
	}
	return func(key string) bool {
		if literal[key] || families[family(key)] {
			return true
		}
		for _, g := range globs {
			if matchParts(g, key) {
				return true
			}
		}
		return false
	}
}

// literalParts splits a key template at its ${…} parts: the literal text
// before, between and after them (one part, the key, when it has none).
func literalParts(tmpl string) []string {
	var out []string
	for {
		i := strings.Index(tmpl, "${")
		if i < 0 {
			return append(out, tmpl)
		}
		out = append(out, tmpl[:i])
		j := strings.Index(tmpl[i:], "}")
		if j < 0 {
			return append(out, "")
		}
		tmpl = tmpl[i+j+1:]
	}
}

// matchParts reports whether key is parts with anything non-empty between
// them.
func matchParts(parts []string, key string) bool {
	if !strings.HasPrefix(key, parts[0]) {
		return false
	}
	rest := key[len(parts[0]):]
	for i, p := range parts[1:] {
		last := i == len(parts)-2
		if last {
			return len(rest) > len(p) && strings.HasSuffix(rest, p)
		}
		j := strings.Index(rest[min(1, len(rest)):], p)
		if j < 0 {
			return false
		}
		rest = rest[min(1, len(rest))+j+len(p):]
	}
	return true
}

// family is a key without its trailing number (task_7 → task_), or the key.
func family(key string) string {
	f := strings.TrimRight(key, "0123456789")
	if f == key || f == "" {
		return key
	}
	return f
}
