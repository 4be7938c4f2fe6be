package substrate

import (
	"encoding/json"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// A context has a size budget (ContextRequest.MaxBytes): a model's client
// refuses or truncates results past a limit (Claude Code at 25,000 tokens,
// Claude.ai near 150,000 characters), and most of a big room is not what
// the reader needs now. What does not fit is summarised, never dropped
// silently: _context.budget lists every cut with what it left out and the
// request fields that return it.

// Budget describes how a context was fitted to its size budget.
type Budget struct {
	MaxBytes int `json:"max_bytes"`
	// Bytes is the envelope's size as sent (JSON).
	Bytes int   `json:"bytes"`
	Cuts  []Cut `json:"cuts,omitempty"`
}

// Cut is one thing the budget left out.
type Cut struct {
	// Section is what was cut: state.<scope>, state.<scope>.<key>,
	// views.<id>, messages.
	Section string `json:"section"`
	// Kept and Total count entries (keys of a scope, messages) where that
	// applies; Bytes is the size left out.
	Kept  int `json:"kept,omitempty"`
	Total int `json:"total,omitempty"`
	Bytes int `json:"bytes,omitempty"`
	// Expand is the read that returns what was cut, in the caller's
	// vocabulary.
	Expand string `json:"expand"`
}

// Budget limits.
const (
	// largeValue is the size past which a single value is shown as a
	// preview when the envelope is over budget.
	largeValue = 1024
	previewLen = 160
	// keptMessages is how many of the newest messages an over-budget
	// context keeps (plus as many again addressed to the reader).
	keptMessages = 5
	// scopeSample is how many keys a summarised scope keeps at least.
	scopeSample = 20
	// maxContextBytes caps any requested budget.
	maxContextBytes = 4 << 20
)

// fitBudget shrinks env to at most max bytes of JSON, in steps that keep
// the most salient first: large single values become previews; messages
// keep the newest few; then the largest state scopes keep a sample of
// keys (the reader's own writes and the most recently changed first) and
// say how many they left out; views' large values and, last, action
// descriptions go the same way.
func fitBudget(env *Envelope, rc *roomCtx, roomID string, max int) {
	b := &Budget{MaxBytes: max}
	env.Context.Budget = b
	size := func() int { raw, _ := json.Marshal(env); return len(raw) }
	b.Bytes = size()
	if b.Bytes <= max {
		return
	}
	over := func() bool { b.Bytes = size(); return b.Bytes > max }

	// 1. Large single values, in state and views.
	for scope, v := range env.State {
		keys, ok := scopeEntries(v)
		if !ok {
			continue
		}
		changed := false
		for k, raw := range keys {
			if len(raw) > largeValue {
				keys[k] = preview(raw)
				b.Cuts = append(b.Cuts, Cut{Section: "state." + scope + "." + k, Bytes: len(raw),
					Expand: expand(rc, roomID, map[string]any{"only": "state." + scope, "max_bytes": maxContextBytes})})
				changed = true
			}
		}
		if changed {
			env.State[scope] = keys
		}
	}
	if env.Views != nil {
		views := make(map[string]any, len(env.Views))
		for id, v := range env.Views {
			raw, _ := json.Marshal(v)
			if len(raw) > largeValue {
				views[id] = preview(raw)
				b.Cuts = append(b.Cuts, Cut{Section: "views." + id, Bytes: len(raw), Expand: expand(rc, roomID, map[string]any{"only": "views", "max_bytes": maxContextBytes})})
				continue
			}
			views[id] = v
		}
		env.Views = views
	}
	if !over() {
		return
	}

	// 2. Messages: the newest few, and those addressed to the reader.
	if m := env.Messages; m != nil && len(m.Recent) > keptMessages {
		first, _ := m.Recent[0]["seq"].(int64)
		var kept []map[string]any
		for i, msg := range m.Recent {
			if i >= len(m.Recent)-keptMessages || (addressedTo(msg, rc.self) && len(kept) < 2*keptMessages) {
				kept = append(kept, msg)
			}
		}
		b.Cuts = append(b.Cuts, Cut{Section: "messages", Kept: len(kept), Total: len(m.Recent),
			Expand: expand(rc, roomID, map[string]any{"only": "messages", "messages_after": first - 1, "max_bytes": maxContextBytes})})
		m.Recent = kept
		// Messages the reader was not shown stay unread (and so do the
		// newer ones it was: the read mark only moves forward).
		rc.readUpTo = min(rc.readUpTo, first-1)
		if !over() {
			return
		}
	}

	// 3. State scopes, largest first, keep a sample of keys.
	type scopeSize struct {
		name  string
		bytes int
	}
	var scopes []scopeSize
	for scope, v := range env.State {
		raw, _ := json.Marshal(v)
		scopes = append(scopes, scopeSize{scope, len(raw)})
	}
	sort.Slice(scopes, func(i, j int) bool { return scopes[i].bytes > scopes[j].bytes })
	for _, sc := range scopes {
		keys, ok := scopeEntries(env.State[sc.name])
		if !ok || len(keys) <= scopeSample {
			continue
		}
		// Keep the most salient keys that fit in what the rest of the
		// envelope leaves (at least scopeSample of them).
		room := max - (b.Bytes - sc.bytes) - 200
		ranked := rankKeys(rc, sc.name, keys)
		var kept []string
		used := 2
		for _, k := range ranked {
			need := len(k) + len(keys[k]) + 4
			if len(kept) >= scopeSample && used+need > room {
				break
			}
			kept = append(kept, k)
			used += need
		}
		if len(kept) == len(keys) {
			continue
		}
		sample := make(map[string]json.RawMessage, len(kept)+1)
		for _, k := range kept {
			sample[k] = keys[k]
		}
		summary, _ := json.Marshal(map[string]any{"keys": len(keys), "shown": len(kept), "bytes": sc.bytes})
		sample["_summary"] = summary
		env.State[sc.name] = sample
		b.Cuts = append(b.Cuts, Cut{Section: "state." + sc.name, Kept: len(kept), Total: len(keys), Bytes: sc.bytes,
			Expand: expand(rc, roomID, map[string]any{"only": "state." + sc.name, "max_bytes": maxContextBytes})})
		if !over() {
			return
		}
	}

	// 4. Views and action descriptions, as a last resort.
	if len(env.Views) > 0 {
		ids := make([]string, 0, len(env.Views))
		for id := range env.Views {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		raw, _ := json.Marshal(env.Views)
		env.Views = map[string]any{"_summary": map[string]any{"views": len(ids), "ids": ids}}
		b.Cuts = append(b.Cuts, Cut{Section: "views", Total: len(ids), Bytes: len(raw), Expand: expand(rc, roomID, map[string]any{"only": "views", "max_bytes": maxContextBytes})})
		if !over() {
			return
		}
	}
	for id, a := range env.Actions {
		a.Description = ""
		env.Actions[id] = a
	}
	b.Cuts = append(b.Cuts, Cut{Section: "actions", Expand: expand(rc, roomID, map[string]any{"only": "actions", "depth": "full", "max_bytes": maxContextBytes})})
	over()
}

// addressedTo reports a message directed to agent.
func addressedTo(msg map[string]any, agent string) bool {
	if agent == "" {
		return false
	}
	switch to := msg["to"].(type) {
	case string:
		return to == agent
	case []string:
		return slices.Contains(to, agent)
	case []any:
		return slices.Contains(to, any(agent))
	}
	return false
}

// expand words the context read with args for the reader.
func expand(rc *roomCtx, roomID string, args map[string]any) string {
	return rc.p.say(errs.Step{Op: errs.OpReadContext, Room: roomID, Args: args})
}

// scopeEntries returns a state scope's entries as key → JSON (a copy).
func scopeEntries(v any) (map[string]json.RawMessage, bool) {
	out := map[string]json.RawMessage{}
	switch m := v.(type) {
	case map[string]json.RawMessage:
		for k, raw := range m {
			out[k] = raw
		}
	case map[string]any:
		for k, val := range m {
			raw, err := json.Marshal(val)
			if err != nil {
				return nil, false
			}
			out[k] = raw
		}
	default:
		return nil, false
	}
	return out, true
}

// rankKeys orders a scope's keys by salience for the reader, as the
// original's focus tiers did: entries the reader wrote; then entries the
// room's rules read (action if/enabled, views) or that several actions
// write (contested); then the most recently changed; then by name.
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
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if mine(a) != mine(b) {
			return mine(a)
		}
		if watched[a] != watched[b] {
			return watched[a]
		}
		if rev(a) != rev(b) {
			return rev(a) > rev(b)
		}
		return a < b
	})
	return out
}

// statePath finds state.<scope>.<key> (or .?key, or ["key"]) in an
// expression's source: what the room's rules read.
var statePath = regexp.MustCompile(`state\.([A-Za-z_][\w:@.-]*?)(?:\.\??|\[")([A-Za-z_0-9][\w:@.-]*?)(?:"\]|\b)`)

// watchedKeys are the keys of scope that the room's action guards and views
// read, or that several actions write.
func watchedKeys(rc *roomCtx, scope string) map[string]bool {
	out := map[string]bool{}
	add := func(src string) {
		for _, m := range statePath.FindAllStringSubmatch(src, -1) {
			if m[1] == scope {
				out[m[2]] = true
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

// preview replaces a large value by its size and the start of its JSON.
func preview(raw []byte) json.RawMessage {
	cut := min(previewLen, len(raw))
	for cut > 0 && !utf8.RuneStart(raw[cut]) {
		cut--
	}
	out, _ := json.Marshal(map[string]any{"_truncated": true, "bytes": len(raw), "preview": string(raw[:cut]) + "…"})
	return out
}
