package envelope

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/internal/fairshare"
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
	// sampleItems is how many of a scope's first items a cut keeps
	// whatever its fair share.
	sampleItems = 3
	// minContextBytes is the smallest budget: the envelope's frame (its
	// _context, the sections' summaries and the cuts) must fit in it.
	minContextBytes = 1000
	// maxContextBytes caps any requested budget; MaxBudget, for the help.
	maxContextBytes = 4 << 20
	MaxBudget       = maxContextBytes
	// DefaultBudget is the budget a hint's read gets when it names none:
	// the MCP adapter's default (mcp.DefaultMaxBytes). A value larger than
	// this can only be read by asking for more, which a hint then says.
	DefaultBudget = 32_000
)

// Fit shrinks env to at most in.Req.MaxBytes bytes of JSON. A budget is
// a ceiling on the whole envelope, and every cut names a read whose
// default answer fits the default budget too (a page, or a narrower
// read), so that following the server's advice never returns more than
// a client accepts.
//
// The steps: large single values become previews; then the parts that
// are not lists of items (views, actions, agents) shrink while they take
// more than half the budget; then the room left is shared fairly
// (max-min) between the item lists — the messages and each state scope —
// and each keeps as many of its items as fit, in its order: the newest
// messages (and those addressed to the reader) and the most salient keys
// of a scope; in a paged read (messages_after, keys_after, prefix, or only
// one scope) the items in order, so the next page starts exactly after the
// last item returned.
func Fit[A any](env *Envelope[A], in Fitting[A]) {
	req := in.Req
	b := &Budget{MaxBytes: req.MaxBytes}
	max := max(req.MaxBytes-req.Reserve, minContextBytes/2)
	env.Context.Budget = b
	size := func() int { raw, _ := json.Marshal(env); return len(raw) }
	if b.Bytes = size(); b.Bytes <= max {
		return
	}
	f := &fitter[A]{env: env, in: in, req: req, b: b}
	f.previews()
	if b.Bytes = size(); b.Bytes <= max {
		return
	}
	groups := f.groups()
	for _, g := range groups {
		f.clear(g)
	}
	for _, shrink := range []func(){f.shrinkViews, f.leanActions, f.shrinkAgents, f.dropDescriptions, f.shrinkAttention, f.shrinkActions} {
		if size() <= max/2 {
			break
		}
		shrink()
	}
	fixed := len(b.Cuts)
	slack := 0
	for attempt := 0; attempt < 5; attempt++ {
		b.Cuts = b.Cuts[:fixed]
		for _, g := range groups {
			f.clear(g)
		}
		avail := max - size() - 260*len(groups) - slack
		f.fill(groups, avail)
		if b.Bytes = size(); b.Bytes <= max {
			return
		}
		slack += b.Bytes - max + 200
	}
	// The frame alone is past the budget (a tiny one): summaries only.
	b.Cuts = b.Cuts[:fixed]
	for _, g := range groups {
		f.clear(g)
		f.cut(g, 0)
	}
	if b.Bytes = size(); b.Bytes > max {
		f.shrinkAgents()
		f.shrinkActions()
		f.shrinkAttention()
		f.shrinkThreads()
		b.Bytes = size()
	}
	if b.Bytes > max {
		// The least a read can be: counts, the cuts and how to read on.
		if n := len(f.env.Agents); n > 0 {
			if s, ok := f.env.Agents["_summary"].(map[string]any); ok {
				n = s["agents"].(int)
			}
			f.env.Agents = map[string]any{"_summary": map[string]any{"agents": n, "shown": 0}}
		}
		if f.env.Builtins != "" {
			f.env.Builtins = "see sync_help"
		}
		f.env.Context.Help = nil
		b.Bytes = size()
	}
}

// Fitting is what a fit needs beyond the envelope: the request, the
// reader, and the room's own answers to what the envelope cannot know.
type Fitting[A any] struct {
	Req ContextRequest
	// Self is the reader's agent id ("" for tokens and observers): the
	// messages addressed to it are kept first.
	Self string
	// Room is the room read; Say words a step (a read, an evaluation) in
	// the reader's vocabulary, for the cuts' expand.
	Room string
	Say  func(errs.Step) string
	// Rank orders a scope's keys, most salient for the reader first
	// (RankKeys), when the read is not paged.
	Rank func(scope string, keys map[string]json.RawMessage) []string
	// Actions shapes the actions section.
	Actions ActionShape[A]
	// ReadUpTo is the newest message the read marks read; a cut of the
	// messages lowers it to what the envelope still shows.
	ReadUpTo *int64
}

// ActionShape is how a fit shrinks actions as the core shows them.
type ActionShape[A any] struct {
	// Lean is an action as a lean read shows it; full says the view held
	// more (a definition's fields), builtin that it is a builtin, which a
	// lean read lists in BuiltinsLine instead.
	Lean func(A) (lean A, full, builtin bool)
	// Undescribed is the action without its description, and whether it
	// had one.
	Undescribed func(A) (A, bool)
	// Available reports an action the reader may invoke now.
	Available func(A) bool
	// BuiltinsLine is the builtins at the lean depth, in one line.
	BuiltinsLine string
}

// fitter is one envelope being fitted.
type fitter[A any] struct {
	env *Envelope[A]
	in  Fitting[A]
	req ContextRequest
	b   *Budget
}

// expand words a read for the reader, with the budget it needs when the
// default budget would not hold need bytes.
func (f *fitter[A]) expand(args map[string]any, need int) string {
	if need+2000 > DefaultBudget {
		args["max_bytes"] = min((need+2000+999)/1000*1000, f.req.adviseMax())
	}
	return f.read(args)
}

// wholeValue words the read that returns one large value whole: a read
// of just it with the budget it needs, or, past the largest budget the
// caller may be advised (AdviseMax), the expression that evaluates to it,
// whose result a surface with a result limit pages.
func (f *fitter[A]) wholeValue(args map[string]any, size int, force bool, ref string) string {
	need := (size + 2000 + 999) / 1000 * 1000
	if need > f.req.adviseMax() {
		return f.in.Say(errs.Step{Op: errs.OpEval, Room: f.in.Room, Args: map[string]any{"expr": ref}})
	}
	if size+1500 > f.req.MaxBytes || force {
		args["max_bytes"] = need
	}
	return f.read(args)
}

// previews replaces large single values, in state and views, by
// previews, each cut naming the narrow read that returns it whole.
func (f *fitter[A]) previews() {
	env := f.env
	for scope, v := range env.State {
		keys, ok := ScopeEntries(v)
		if !ok {
			continue
		}
		changed := false
		for k, raw := range keys {
			if len(raw) > largeValue {
				keys[k] = preview(raw)
				args := map[string]any{"only": "state." + scope, "prefix": k}
				ref := "state[" + strconv.Quote(scope) + "][" + strconv.Quote(k) + "]"
				f.b.Cuts = append(f.b.Cuts, Cut{Section: "state." + scope + "." + k, Bytes: len(raw), Expand: f.wholeValue(args, len(raw), f.req.Prefix == k, ref)})
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
				args := map[string]any{"only": "views." + id}
				only := len(f.req.Only) == 1 && f.req.Only[0] == "views."+id
				f.b.Cuts = append(f.b.Cuts, Cut{Section: "views." + id, Bytes: len(raw), Expand: f.wholeValue(args, len(raw), only, "views["+strconv.Quote(id)+"]")})
				continue
			}
			views[id] = v
		}
		env.Views = views
	}
}

// group is a list of items a cut keeps a part of: the messages, or a
// state scope's entries.
type group struct {
	section string
	scope   string // the state scope; "" for messages
	items   []gItem
	ordered bool // kept in order, stopping at the first that does not fit
	need    int
	kept    []gItem
	open    int // openCount's memo; -1 until counted
}

type gItem struct {
	key  string
	raw  json.RawMessage
	msg  map[string]any
	seq  int64
	size int
}

// groups takes the envelope's item lists in keeping order.
func (f *fitter[A]) groups() []*group {
	var out []*group
	paged := f.req.Paged()
	if m := f.env.Messages; m != nil && len(m.Recent) > 0 {
		g := &group{section: "messages", ordered: true}
		after := f.req.MessagesAfter != nil
		for _, msg := range m.Recent {
			raw, _ := json.Marshal(msg)
			seq, _ := msg["seq"].(int64)
			g.items = append(g.items, gItem{msg: msg, seq: seq, size: len(raw) + 1})
		}
		if !after {
			// Newest first; messages addressed to the reader ahead of
			// them (at most 5: the rest are in the directed count).
			slices.Reverse(g.items)
			var to []gItem
			rest := g.items[:0:0]
			for _, it := range g.items {
				if len(to) < 5 && AddressedTo(it.msg, f.in.Self) {
					to = append(to, it)
				} else {
					rest = append(rest, it)
				}
			}
			g.items = append(to, rest...)
		}
		out = append(out, g)
	}
	names := make([]string, 0, len(f.env.State))
	for scope := range f.env.State {
		names = append(names, scope)
	}
	sort.Strings(names)
	for _, scope := range names {
		keys, ok := ScopeEntries(f.env.State[scope])
		if !ok || len(keys) == 0 {
			continue
		}
		g := &group{section: "state." + scope, scope: scope, ordered: paged, open: -1}
		var order []string
		if paged {
			for k := range keys {
				order = append(order, k)
			}
			sort.Strings(order)
		} else {
			order = f.in.Rank(scope, keys)
		}
		for _, k := range order {
			g.items = append(g.items, gItem{key: k, raw: keys[k], size: len(k) + len(keys[k]) + 4})
		}
		out = append(out, g)
	}
	for _, g := range out {
		for _, it := range g.items {
			g.need += it.size
		}
	}
	return out
}

// openCount counts g's entries that are open work.
func (g *group) openCount() int {
	if g.open < 0 {
		g.open = 0
		for _, it := range g.items {
			if OpenWork(it.raw) > 0 {
				g.open++
			}
		}
	}
	return g.open
}

// clear takes g's items out of the envelope (while the rest is sized).
func (f *fitter[A]) clear(g *group) {
	g.kept = nil
	if g.scope == "" {
		f.env.Messages.Recent = []map[string]any{}
		return
	}
	f.env.State[g.scope] = map[string]json.RawMessage{}
}

// fill shares avail bytes between the groups, max-min fair, and puts back
// what each keeps.
func (f *fitter[A]) fill(groups []*group, avail int) {
	lists := make([]fairshare.List, len(groups))
	for i, g := range groups {
		l := fairshare.List{Ordered: g.ordered}
		for _, it := range g.items {
			l.Sizes = append(l.Sizes, it.size)
		}
		if g.scope != "" && !g.ordered {
			// A sample of a scope's first items, open work first
			// (Fitting.Rank), whatever its share: a board whose items lost
			// to the messages still shows what is to do.
			for _, it := range g.items[:min(sampleItems, len(g.items))] {
				l.Floor += it.size
			}
		}
		lists[i] = l
	}
	fairshare.Fill(lists, avail, func(i int, items []int) {
		g := groups[i]
		g.kept = nil
		for _, j := range items {
			g.kept = append(g.kept, g.items[j])
		}
		f.cut(g, len(g.kept))
	})
}

// cut writes g's kept items into the envelope and, when it left some
// out, the cut that says what and how to read the rest.
func (f *fitter[A]) cut(g *group, n int) {
	kept := g.kept[:min(n, len(g.kept))]
	if g.scope == "" {
		f.cutMessages(g, kept)
		return
	}
	entries := make(map[string]json.RawMessage, len(kept)+1)
	for _, it := range kept {
		entries[it.key] = it.raw
	}
	if len(kept) == len(g.items) {
		f.env.State[g.scope] = entries
		delete(f.env.summarized, g.scope)
		return
	}
	sum := map[string]any{"keys": len(g.items), "shown": len(kept), "bytes": g.need}
	// How much of the scope is open work, and how much of it was shown:
	// the sample's size against the board's.
	if open := g.openCount(); open > 0 {
		shown := 0
		for _, it := range kept {
			if OpenWork(it.raw) > 0 {
				shown++
			}
		}
		sum["open"], sum["open_shown"] = open, shown
	}
	summary, _ := json.Marshal(sum)
	entries["_summary"] = summary
	f.env.State[g.scope] = entries
	if f.env.summarized == nil {
		f.env.summarized = map[string]bool{}
	}
	f.env.summarized[g.scope] = true
	args := map[string]any{"only": "state." + g.scope}
	if f.req.Prefix != "" {
		args["prefix"] = f.req.Prefix
	}
	if g.ordered {
		// The next page starts right after the last key returned.
		last := f.req.KeysAfter
		if len(kept) > 0 {
			last = kept[len(kept)-1].key
		}
		if last != "" {
			args["keys_after"] = last
		}
	}
	next := 0
	if len(kept) < len(g.items) {
		next = g.items[len(kept)].size
	}
	f.b.Cuts = append(f.b.Cuts, Cut{Section: g.section, Kept: len(kept), Total: len(g.items), Bytes: g.need, Expand: f.expand(args, next)})
}

// cutMessages writes the kept messages (in seq order) and the cut.
func (f *fitter[A]) cutMessages(g *group, kept []gItem) {
	m := f.env.Messages
	all := len(g.items)
	msgs := make([]map[string]any, 0, len(kept))
	for _, it := range kept {
		msgs = append(msgs, it.msg)
	}
	// A wake-up (a delta) shows the messages to its reader first, as
	// deltaOf orders them; each part is in seq order.
	first := func(msg map[string]any) bool { return f.req.Since != nil && AddressedTo(msg, f.in.Self) }
	sort.SliceStable(msgs, func(i, j int) bool {
		if a, b := first(msgs[i]), first(msgs[j]); a != b {
			return a
		}
		a, _ := msgs[i]["seq"].(int64)
		b, _ := msgs[j]["seq"].(int64)
		return a < b
	})
	m.Recent = msgs
	if len(kept) == all {
		return
	}
	// The cut says how to read the rest; the section's own note on the
	// older messages would say it twice.
	m.Elided, f.env.Context.MessagesTruncated = nil, nil
	var args map[string]any
	if f.req.MessagesAfter != nil {
		// A page: the next one starts right after the last message
		// returned; messages not shown stay unread.
		last := *f.req.MessagesAfter
		for _, msg := range msgs {
			seq, _ := msg["seq"].(int64)
			last = max(last, seq)
		}
		args = map[string]any{"only": "messages", "messages_after": last}
		*f.in.ReadUpTo = min(*f.in.ReadUpTo, last)
	} else {
		// The newest: the older ones the window held are exactly the
		// messages after the window's first minus one, this many.
		first, older := int64(0), 0
		var oldestKept int64 = 1 << 62
		for _, it := range kept {
			if !AddressedTo(it.msg, f.in.Self) || len(kept) == 0 {
				oldestKept = min(oldestKept, it.seq)
			}
		}
		for _, it := range g.items {
			if first == 0 || it.seq < first {
				first = it.seq
			}
			if it.seq < oldestKept {
				older++
			}
		}
		args = map[string]any{"only": "messages", "messages_after": first - 1}
		if older > 0 && older < 500 {
			args["messages_limit"] = older
		}
		*f.in.ReadUpTo = min(*f.in.ReadUpTo, first-1)
	}
	f.b.Cuts = append(f.b.Cuts, Cut{Section: "messages", Kept: len(kept), Total: all, Bytes: g.need, Expand: f.expand(args, 0)})
}

// shrinkViews keeps the views that fit in a third of the budget, in id
// order, and lists the others by id with the read that returns them.
func (f *fitter[A]) shrinkViews() {
	if len(f.env.Views) == 0 {
		return
	}
	ids := make([]string, 0, len(f.env.Views))
	for id := range f.env.Views {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	kept := map[string]any{}
	var omitted []string
	used, room := 0, f.req.MaxBytes/3
	total := 0
	for _, id := range ids {
		raw, _ := json.Marshal(f.env.Views[id])
		total += len(raw)
		if used+len(raw)+len(id)+4 > room {
			omitted = append(omitted, id)
			continue
		}
		kept[id] = f.env.Views[id]
		used += len(raw) + len(id) + 4
	}
	if len(omitted) == 0 {
		return
	}
	kept["_summary"] = map[string]any{"views": len(ids), "shown": len(ids) - len(omitted), "omitted": omitted}
	f.env.Views = kept
	// The read of the omitted ones, as many as a page holds.
	var only []string
	for _, id := range omitted {
		if len(only) >= 20 {
			break
		}
		only = append(only, "views."+id)
	}
	f.b.Cuts = append(f.b.Cuts, Cut{Section: "views", Kept: len(ids) - len(omitted), Total: len(ids), Bytes: total,
		Expand: f.read(map[string]any{"only": strings.Join(only, ",")})})
}

// leanActions shows actions as a lean read does (signature, availability,
// description).
func (f *fitter[A]) leanActions() {
	full := false
	for id, a := range f.env.Actions {
		lean, more, builtin := f.in.Actions.Lean(a)
		full = full || more
		if builtin {
			delete(f.env.Actions, id)
			continue
		}
		f.env.Actions[id] = lean
	}
	if full {
		f.env.Builtins = f.in.Actions.BuiltinsLine
		f.b.Cuts = append(f.b.Cuts, Cut{Section: "actions.definitions", Total: len(f.env.Actions),
			Expand: f.read(map[string]any{"only": "actions", "depth": "full"})})
	}
}

// dropDescriptions leaves actions their signatures.
func (f *fitter[A]) dropDescriptions() {
	n := 0
	for id, a := range f.env.Actions {
		if bare, had := f.in.Actions.Undescribed(a); had {
			f.env.Actions[id] = bare
			n++
		}
	}
	if n > 0 {
		f.b.Cuts = append(f.b.Cuts, Cut{Section: "actions.descriptions", Total: n, Expand: f.read(map[string]any{"only": "actions"})})
	}
}

// shrinkActions keeps the available actions that fit in a quarter of the
// budget.
func (f *fitter[A]) shrinkActions() {
	if len(f.env.Actions) == 0 {
		return
	}
	ids := make([]string, 0, len(f.env.Actions))
	for id := range f.env.Actions {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		a, b := f.in.Actions.Available(f.env.Actions[ids[i]]), f.in.Actions.Available(f.env.Actions[ids[j]])
		if a != b {
			return a
		}
		return ids[i] < ids[j]
	})
	used, room := 0, f.req.MaxBytes/4
	kept := map[string]A{}
	for _, id := range ids {
		raw, _ := json.Marshal(f.env.Actions[id])
		if used+len(raw)+len(id)+4 > room {
			break
		}
		kept[id] = f.env.Actions[id]
		used += len(raw) + len(id) + 4
	}
	if len(kept) == len(ids) {
		return
	}
	f.env.Actions = kept
	f.b.Cuts = append(f.b.Cuts, Cut{Section: "actions", Kept: len(kept), Total: len(ids), Expand: f.read(map[string]any{"only": "actions"})})
}

// shrinkAgents keeps the reader and the agents that fit in a quarter of
// the budget (active ones first) and counts the rest.
func (f *fitter[A]) shrinkAgents() {
	if len(f.env.Agents) == 0 {
		return
	}
	if _, done := f.env.Agents["_summary"]; done {
		return
	}
	ids := make([]string, 0, len(f.env.Agents))
	for id := range f.env.Agents {
		ids = append(ids, id)
	}
	status := func(id string) string {
		if m, ok := f.env.Agents[id].(map[string]any); ok {
			s, _ := m["status"].(string)
			return s
		}
		return ""
	}
	sort.Slice(ids, func(i, j int) bool {
		a, b := ids[i], ids[j]
		if (a == f.in.Self) != (b == f.in.Self) {
			return a == f.in.Self
		}
		if (status(a) == "idle") != (status(b) == "idle") {
			return status(b) == "idle"
		}
		return a < b
	})
	used, room := 0, f.req.MaxBytes/5
	kept := map[string]any{}
	for _, id := range ids {
		raw, _ := json.Marshal(f.env.Agents[id])
		if used+len(raw)+len(id)+4 > room && id != f.in.Self {
			break
		}
		kept[id] = f.env.Agents[id]
		used += len(raw) + len(id) + 4
	}
	if len(kept) == len(ids) {
		return
	}
	kept["_summary"] = map[string]any{"agents": len(ids), "shown": len(kept)}
	f.env.Agents = kept
	f.b.Cuts = append(f.b.Cuts, Cut{Section: "agents", Kept: len(kept) - 1, Total: len(ids), Expand: f.read(map[string]any{"only": "agents"})})
}

// shrinkAttention keeps _attention's lists to their first few.
func (f *fitter[A]) shrinkAttention() {
	at := f.env.Context.Attention
	if at == nil {
		return
	}
	trim := func(l []string) []string {
		if len(l) > 5 {
			return append(l[:5:5], fmt.Sprintf("… %d more", len(l)-5))
		}
		return l
	}
	at.StaleActions, at.LowSalience, at.BrokenViews = trim(at.StaleActions), trim(at.LowSalience), trim(at.BrokenViews)
	if s := at.SinceYourLastRead; s != nil {
		s.NewActions, s.ActionsInvoked, s.ViewsChanged = trim(s.NewActions), trim(s.ActionsInvoked), trim(s.ViewsChanged)
	}
}

// read words the context read with args for the reader.
func (f *fitter[A]) read(args map[string]any) string {
	return f.in.Say(errs.Step{Op: errs.OpReadContext, Room: f.in.Room, Args: args})
}

// ScopeEntries returns a state scope's entries as key → JSON (a copy).
func ScopeEntries(v any) (map[string]json.RawMessage, bool) {
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

// preview replaces a large value by its size and the start of its JSON.
func preview(raw []byte) json.RawMessage {
	cut := min(previewLen, len(raw))
	for cut > 0 && !utf8.RuneStart(raw[cut]) {
		cut--
	}
	out, _ := json.Marshal(map[string]any{"_truncated": true, "bytes": len(raw), "preview": string(raw[:cut]) + "…"})
	return out
}

// shrinkThreads leaves the thread list out of a context whose budget is
// too small for its frame, and says how to read it (the messages read
// lists the threads again).
func (f *fitter[A]) shrinkThreads() {
	m := f.env.Messages
	if m == nil || len(m.Threads) == 0 {
		return
	}
	raw, _ := json.Marshal(m.Threads)
	f.b.Cuts = append(f.b.Cuts, Cut{Section: "messages.threads", Total: len(m.Threads), Bytes: len(raw),
		Expand: f.expand(map[string]any{"only": "messages", "messages_limit": 20}, len(raw))})
	m.Threads = nil
}
