package substrate

// Views: evaluated with their registrar's authority, dependencies first,
// shared while the room is unchanged, bounded per read.

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/exprbudget"
	"github.com/syncsubstrate/sync/substrate/internal/viewmemo"
)

// viewKey names a view's value as shared between the reads of one
// state (liveState.views): the view, whether the lobby's public
// evaluation made it (PublicView: the room principal, the public message
// count) or a context read, and, for a view that reads messages, the
// message count it saw (noCount when it reads none): a message's timer
// or gate changes the count without a new state.
type viewKey struct {
	view   string
	public bool
	count  int64
}

// noCount is viewKey.count for a view that reads no messages.
const noCount = -1

// keepView shares a view's value under key with later reads of the same
// state, within the memo's bounds (internal/viewmemo): past them it is
// evaluated per read, as without the memo.
func keepView(live *liveState, key viewKey, r viewResult) {
	live.views.Keep(key, r, viewmemo.Nodes(r.val), live.liveEntries)
}

// evalViews evaluates every live view enabled for the reader with its
// registrar's read authority (communal scopes plus the registrar's own
// scope), dependencies first. A cycle or an error becomes {"_error": …}
// on that view only.
//
// A view's enabled gate is decided for each reader (viewGate): a view it
// is false for is absent from that reader's views, and from the views
// that definitions evaluated in its read see. A definition reads the
// views both the reader and its registrar may (viewsAs), so neither a view
// nor an action carries a gated view to a reader or registrar it hides
// from.
//
// A view whose expression reads none of now, agents and actions (and,
// when it reads other views, only ungated ones that are so) has the same
// value for every reader of this state (and, when it reads messages,
// of the same messages.count): it is evaluated once per snapshot, timer
// epoch (and count) and shared; its gate is evaluated on every
// read. The views' total cost per read (gates included) is bounded by
// Limits.ViewCostPerRead, counted in order whether a value was shared or
// computed, so which views are cut does not depend on caching.
func (rc *roomCtx) evalViews(ctx context.Context, s *Service) {
	rc.evalViewsOf(ctx, s, nil)
}

// evalViewsOf is evalViews for the views roots and those they read
// (every live view when roots is nil): the lobby's summary of a room
// evaluates its summary view, not all the room's views.
func (rc *roomCtx) evalViewsOf(ctx context.Context, s *Service, roots []string) {
	rc.views = map[string]any{}
	byID := map[string]*viewRec{}
	for _, v := range rc.snap.views {
		if v.r.timer.live(rc.now) {
			byID[v.def.ID] = v
			rc.viewOrder = append(rc.viewOrder, v.def.ID)
		}
	}
	rc.viewByID = byID
	live := rc.snap.live(rc.now)
	ve := &viewEval{rc: rc, ctx: ctx, s: s, byID: byID, live: live}
	// Entries with their own enabled expression are decided per read
	// (they may read now and agents, which change without a new seq), so
	// views in a room that has any are never shared.
	ve.noMemo = len(live.deferred) > 0
	ve.decided = map[string]bool{}
	ve.budget = uint64(s.lim.ViewCostPerRead)
	ve.mark = map[string]int{}
	if roots == nil {
		roots = rc.viewOrder
	}
	for _, id := range roots {
		if byID[id] != nil {
			ve.eval(id, nil)
		}
	}
	if contested := rc.contested(); len(contested) > 0 {
		rc.views[viewContested] = contested
	}
	rc.viewsBuilt = true
}

// viewEval is one evalViewsOf: the live views by id, the state whose
// views memo holds the values shared across reads, and each view's
// progress.
type viewEval struct {
	rc     *roomCtx
	ctx    context.Context
	s      *Service
	byID   map[string]*viewRec
	live   *liveState
	noMemo bool
	// decided: whether a view is shareable, decided once per view.
	decided map[string]bool
	budget  uint64
	mark    map[string]int
}

// A view's progress in viewEval.eval.
const (
	viewTodo = iota
	viewBusy
	viewDone
)

// pureProg reports whether p reads none of now, agents and actions.
func pureProg(p *expr.Program) bool {
	return p == nil || !(p.Uses("now") || p.Uses("agents") || p.Uses("actions"))
}

// shareableID: reads only state, and other views only by name and only
// shareable, ungated ones (whether a gated one is there depends on the
// reader). Decided once per view (a cycle counts as not).
func (ve *viewEval) shareableID(id string, seen map[string]bool) bool {
	if ok, known := ve.decided[id]; known {
		return ok
	}
	v := ve.byID[id]
	if v == nil || seen[id] {
		return false
	}
	seen[id] = true
	ok := v.err == nil && pureProg(v.prog) && !v.prog.DynamicViews
	for _, d := range v.prog.ViewDeps {
		ok = ok && ve.shareableID(d, seen) && ve.byID[d].enabledProg == nil
	}
	ve.decided[id] = ok
	return ok
}

func (ve *viewEval) shareable(v *viewRec) bool {
	return !ve.noMemo && ve.shareableID(v.def.ID, map[string]bool{})
}

// readsMsgs: a shareable view that reads messages, or reads one that
// does, sees the reader's messages.count, which is not the state's: gated
// messages the reader may not read are left out of it, and a message's
// timer ends it without a new seq or timer epoch (the liveState knows
// only keyed entries). Its value is shared only between reads of the same
// count. (Only called for shareable views: their reads by name form no
// cycle.)
func (ve *viewEval) readsMsgs(v *viewRec) bool {
	if v == nil || v.prog == nil {
		return false
	}
	if v.prog.UsesMessages {
		return true
	}
	for _, d := range v.prog.ViewDeps {
		if ve.readsMsgs(ve.byID[d]) {
			return true
		}
	}
	return false
}

func (ve *viewEval) memoKey(v *viewRec) viewKey {
	if ve.readsMsgs(v) {
		return viewKey{view: v.def.ID, count: ve.rc.msgs.Count}
	}
	return viewKey{view: v.def.ID, count: noCount}
}

// eval evaluates view id after the views it reads by name (path: the
// views being evaluated that led to it), marking a dependency cycle's
// views with an error, within the read's views budget and behind the
// view's gate.
func (ve *viewEval) eval(id string, path []string) {
	rc := ve.rc
	v := ve.byID[id]
	switch ve.mark[id] {
	case viewDone:
		return
	case viewBusy:
		cycle := append(append([]string{}, path[max(slices.Index(path, id), 0):]...), id)
		for _, c := range cycle[:len(cycle)-1] {
			rc.views[c] = map[string]any{"_error": "view dependency cycle: " + strings.Join(cycle, " → ")}
			ve.mark[c] = viewDone
		}
		return
	}
	ve.mark[id] = viewBusy
	if v.err != nil {
		rc.views[id] = map[string]any{"_error": errorText(v.err)}
		ve.mark[id] = viewDone
		return
	}
	for _, d := range v.prog.ViewDeps {
		if _, ok := ve.byID[d]; ok {
			ve.eval(d, append(path, id))
		}
	}
	if ve.mark[id] == viewDone { // settled as part of a cycle
		return
	}
	ve.mark[id] = viewDone
	if rc.viewCost >= ve.budget {
		rc.viewsCut++
		rc.views[id] = map[string]any{"_error": fmt.Sprintf("not evaluated: this room's views cost more than %d per read (cel-go cost), the server's limit", ve.budget),
			"hint": "delete or simplify views (the context's views section lists them); expensive views can often read a precomputed key instead"}
		return
	}
	if !rc.viewGate(ve.ctx, ve.s, v, rc.self) {
		return
	}
	res := ve.value(v)
	rc.viewCost += res.cost
	rc.views[id] = res.val
}

// value is v's result: shared from the memo when v is shareable (and
// kept there when this read computed it), else computed for this read.
func (ve *viewEval) value(v *viewRec) viewResult {
	if !ve.shareable(v) {
		return ve.rc.evalView(ve.ctx, ve.s, v)
	}
	key := ve.memoKey(v)
	res, ok := ve.live.views.Get(key)
	if !ok {
		res = ve.rc.evalView(ve.ctx, ve.s, v)
		keepView(ve.live, key, res)
	}
	return res
}

// viewGate reports whether view v is enabled for who: the reader
// (rc.self) or the registrar of a definition reading views (viewsAs).
// The gate reads what the view's value reads (its registrar's
// authority, state.self the registrar's scope) with who as self, and,
// for the reader, its unread counts. Its cost counts against the read's
// views budget; past it, or on an error, the view is hidden (fail
// closed). Decided once per read and who.
func (rc *roomCtx) viewGate(ctx context.Context, s *Service, v *viewRec, who string) bool {
	if v.enabledProg == nil {
		return true
	}
	key := who + "\x00" + v.def.ID
	if on, ok := rc.viewGates[key]; ok {
		return on
	}
	on := false
	if rc.viewCost < uint64(s.lim.ViewCostPerRead) {
		msgs := envelope.MessagesVar(rc.msgs.Count, 0, 0)
		if who == rc.self && rc.vars.Messages != nil {
			msgs = rc.vars.Messages
		}
		vars := &expr.Vars{State: rc.stateAs(ctx, s, v.def.Scope, v.def.RegisteredBy, true), Views: rc.views, Agents: rc.vars.Agents, Actions: rc.vars.Actions,
			Messages: msgs, Self: who, Now: rc.now}
		val, cost, err := s.cel.EvalCost(ctx, v.enabledProg, vars)
		rc.viewCost += max(cost, exprbudget.MinCost)
		b, _ := val.(bool)
		on = err == nil && b
	}
	if rc.viewGates == nil {
		rc.viewGates = map[string]bool{}
	}
	rc.viewGates[key] = on
	return on
}

// viewsAs are the views a definition registered by who sees in this read:
// those shown to the reader whose gates also hold for who. A definition
// of the reader's own sees the reader's views.
func (rc *roomCtx) viewsAs(ctx context.Context, s *Service, who string) map[string]any {
	if who == rc.self || rc.views == nil {
		return rc.views
	}
	if out, ok := rc.viewsOf[who]; ok {
		return out
	}
	out, copied := rc.views, false
	for id := range rc.views {
		v := rc.viewByID[id]
		if v == nil || v.enabledProg == nil || rc.viewGate(ctx, s, v, who) {
			continue
		}
		if !copied {
			out, copied = maps.Clone(rc.views), true
		}
		delete(out, id)
	}
	if rc.viewsBuilt {
		if rc.viewsOf == nil {
			rc.viewsOf = map[string]map[string]any{}
		}
		rc.viewsOf[who] = out
	}
	return out
}

// evalView evaluates one view's value (its dependencies already in
// rc.views), seeing the views its registrar and the reader both see.
func (rc *roomCtx) evalView(ctx context.Context, s *Service, v *viewRec) viewResult {
	s.viewEvals.Add(1)
	self := viewSelf(v.def)
	views := rc.views
	if len(v.prog.ViewDeps) > 0 || v.prog.DynamicViews {
		views = rc.viewsAs(ctx, s, defs.RegistrarOf(v.def.Scope, v.def.RegisteredBy))
	}
	vars := &expr.Vars{State: rc.stateAs(ctx, s, v.def.Scope, v.def.RegisteredBy, true), Views: views, Agents: rc.vars.Agents, Actions: rc.vars.Actions,
		Messages: envelope.MessagesVar(rc.msgs.Count, 0, 0), Self: self, Now: rc.now}
	val, cost, err := s.cel.EvalCost(ctx, v.prog, vars)
	if err != nil {
		val = map[string]any{"_error": errorText(err)}
	} else if valueDepth(val, s.lim.MaxValueDepth) > s.lim.MaxValueDepth {
		// Literals nest a view's result deeper than the state it reads:
		// held to the limit every stored value keeps, so what reads views
		// (other views, pages, the model's text) never meets a deeper one.
		val = map[string]any{"_error": fmt.Sprintf("the view's value nests arrays and objects more than %d levels deep, the server's limit (invalid_value): return a flatter value", s.lim.MaxValueDepth)}
	}
	return viewResult{val: val, cost: cost}
}

const viewContested = "_contested"

// ViewHealth is the system view of the vocabulary's health.
const ViewHealth = "_vocabulary_health"

// ViewContested is the system view of contested state keys.
const ViewContested = viewContested

// contested maps "<scope>.<key>" to the actions that write it, for keys
// written by more than one action (defs.Contested).
func (snap *snapshot) contested() map[string]any { return defs.Contested(snap.actionDefs()) }

// contested is the snapshot's contested targets as the reader sees them
// (defs.ContestedAmong): only actions enabled for it (rc.actEnabled).
func (rc *roomCtx) contested() map[string]any {
	return defs.ContestedAmong(rc.snap.contested(), func(id string) bool { return rc.actEnabled[id] })
}

// actionDefs are the room's actions' definitions, by id.
func (snap *snapshot) actionDefs() iter.Seq2[string, *ActionDef] {
	return func(yield func(string, *ActionDef) bool) {
		for id, a := range snap.actions {
			if !yield(id, a.def) {
				return
			}
		}
	}
}
