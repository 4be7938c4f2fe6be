package substrate

// The room context: what one principal perceives of a room at a moment,
// and the variables its expressions see.

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/expr"
)

// presence is an agent's public presence, loaded fresh for each
// context (envelope.Presence).
type presence = envelope.Presence

// msgCounts are the caller's message counters.
type msgCounts struct {
	Count, Unread, Directed int64
	// seen is the reader's last read message (Agent.LastSeenSeq) the
	// counts start after.
	seen int64
	// gated are the gated messages Unread and Directed count, until
	// hideGated takes out those hidden from the reader.
	gated []gatedUnread
	// hidden are the messages Count counts that a reader may not see,
	// until hideGated takes out those hidden from this one; unseen are
	// then the seqs of those (ascending; nil: it sees them all).
	hidden []hiddenMsg
	unseen []int64
	// next is when the timer of one of the hidden messages next changes
	// Count or the unread counts (zero: none pending), kept when hidden
	// is dropped: no write, so no notification, marks that moment, and a
	// wait on messages must read again then (roomCtx.nextChange).
	next time.Time
}

// gatedUnread is an unread message with an `enabled` gate.
type gatedUnread struct {
	enabled  string
	directed bool
	// uncounted: a directed message Unread does not count (past its
	// bound), only Directed.
	uncounted bool
}

// hideGated takes the unread messages whose gate hides them from rc's
// reader out of its counts, their gates evaluated as log pages evaluate
// them (logGate): a message the reader cannot read must not raise its
// unread counts, nor wake its waits. A room without gated messages pays
// nothing here.
func (s *Service) hideGated(ctx context.Context, rc *roomCtx) {
	s.uncountHidden(ctx, rc)
	if len(rc.msgs.gated) == 0 {
		return
	}
	shown := s.logGate(ctx, rc)
	for _, g := range rc.msgs.gated {
		if shown(&g.enabled) {
			continue
		}
		if !g.uncounted {
			rc.msgs.Unread--
		}
		if g.directed {
			rc.msgs.Directed--
		}
	}
	rc.msgs.gated = nil
}

// roomCtx is everything one principal perceives of a room at one moment:
// the CEL variables and the pieces the context envelope is made of.
type roomCtx struct {
	now    time.Time
	snap   *snapshot
	p      *Principal // nil: the system's own view (everything)
	self   string
	agents []presence
	msgs   msgCounts
	// counted reports whether msgs holds the caller's unread counts.
	counted bool
	// partial: only state, self, now and messages were read (waitRead);
	// agents, views and actions are absent, not empty.
	partial bool
	// readUpTo is the newest message seq the context returned to its
	// agent; readCtx marks it read once the read transaction is over.
	readUpTo int64

	state     map[string]any  // visible scope → key → value
	modified  map[string]bool // scopes of state not shared with the snapshot's cache
	views     map[string]any  // id → value (or {"_error": …})
	viewOrder []string
	// viewByID are the live views; viewGates the decisions of their
	// gates in this read, by who they were decided for and view id;
	// viewsOf, once the views are built, the views a definition's
	// registrar sees in this read (viewsAs).
	viewByID   map[string]*viewRec
	viewGates  map[string]bool
	viewsOf    map[string]map[string]any
	viewsBuilt bool
	actEnabled map[string]bool
	actAvail   map[string]bool
	// ifHeld are the actions whose `if` build evaluated to true, without
	// an error, in an expression that does not read actions (which build
	// fills as it goes): an invocation of one evaluates the same `if` on
	// the same variables, so it takes the result (issue 32).
	ifHeld map[string]bool
	vars   expr.Vars
	// viewCost is what evaluating the views cost this read (cel-go cost);
	// viewsCut counts the views left unevaluated past the budget.
	viewCost uint64
	viewsCut int
	// actionCost is what evaluating actions' enabled and if for
	// availability cost this read; actionsCut are the actions left
	// unevaluated past Limits.ActionCostPerRead.
	actionCost uint64
	actionsCut map[string]bool
	// authority caches, per registrar scope, the state that registrar
	// reads (views and actions evaluate with their registrar's authority).
	authority map[string]map[string]any
	// gates is the read's budget for entry-level enabled expressions,
	// shared by every state the read builds (the reader's and each
	// registrar's); gatesHidden counts the entries hidden from the
	// reader's own state because the budget could not afford their gate.
	gates       *gateBudget
	gatesHidden int
	// vis is p's read rule in this read, loaded when first asked.
	vis *authority.Visibility
	// shown and logShown are what a search asks of the read (search.go):
	// the state shown to p, and whether p sees a gated log entry.
	shown    map[string]any
	logShown func(enabled *string) bool
}

// gateBudget is what one read has spent on entry-level enabled
// expressions (cel-go cost), and how many gated entries it hid unevaluated.
type gateBudget struct {
	spent uint64
	cut   int
}

// budget returns the read's gate budget (the one its parent read shares).
func (rc *roomCtx) budget() *gateBudget {
	if rc.gates == nil {
		rc.gates = &gateBudget{}
	}
	return rc.gates
}

// stateAs is the state the registrar of a definition in scope reads: the
// communal scopes and its own (seen as `self` when asSelf), never the
// reader's. Views and actions evaluate with it, so what they project or
// write never carries what their registrar could not read.
//
// A communal definition (scope _shared) is no agent's, but its registrant
// (registeredBy) is one: it reads the loom with the registrant's loom
// permissions, so an agent denied the loom cannot read it through a
// _shared view or action of its own (a confused deputy).
func (rc *roomCtx) stateAs(ctx context.Context, s *Service, scope, registeredBy string, asSelf bool) map[string]any {
	key := scope
	if !asSelf {
		key += "\x00"
	}
	reg := authority.DefinitionReader(scope, registeredBy)
	var vis *authority.Visibility
	if scope == ScopeShared {
		// Registrants the read rules see alike (the loom: the same loom
		// permissions) read the same state: one state (and one spend of
		// the gate budget) for all of them.
		vis = snapVisibility(reg, rc.snap)
		if k, ok := vis.ShareKey(); ok {
			key += "\x00\x00" + k
		} else {
			key += "\x00" + registeredBy
		}
	}
	if st, ok := rc.authority[key]; ok {
		return st
	}
	sub := &roomCtx{now: rc.now, snap: rc.snap, p: reg, agents: rc.agents, gates: rc.budget(), vis: vis}
	if asSelf && scope != ScopeShared && !strings.HasPrefix(scope, "_") {
		sub.self = scope
	}
	st, _ := s.stateFor(ctx, sub, func(sc string) bool { return sub.visible(sc) && sc != ScopeAudit })
	if rc.authority == nil {
		rc.authority = map[string]map[string]any{}
	}
	rc.authority[key] = st
	return st
}

// actionVars are what an action's expressions (enabled, if, write values,
// result) see: the state its registrar reads, plus the invocation's params
// and the invoker's identity (self, messages). The invoker's own scope is
// `state.self` only when the invoker is the registrar.
func (rc *roomCtx) actionVars(ctx context.Context, s *Service, def *defs.ActionDef, params map[string]any) *expr.Vars {
	views := rc.vars.Views
	if views != nil {
		// The views its registrar and the invoker both see: an action
		// carries a gated view neither to an invoker nor to a registrar
		// it hides from.
		views = rc.viewsAs(ctx, s, defs.RegistrarOf(def.Scope, def.RegisteredBy))
	}
	return &expr.Vars{State: rc.stateAs(ctx, s, def.Scope, def.RegisteredBy, rc.self != "" && rc.self == def.Scope), Views: views,
		Agents: rc.vars.Agents, Actions: rc.vars.Actions, Messages: rc.vars.Messages, Self: rc.self, Params: params, Now: rc.now}
}

// visible reports whether the context's principal reads scope (the one
// read rule, authority.VisibilityOf, decided from the read's snapshot).
func (rc *roomCtx) visible(scope string) bool {
	return rc.p == nil || rc.visibility().Scope(scope)
}

// visibility is the context's principal's read rule in this read,
// decided from the read's snapshot when first asked.
func (rc *roomCtx) visibility() *authority.Visibility {
	if rc.vis == nil {
		rc.vis = snapVisibility(rc.p, rc.snap)
	}
	return rc.vis
}

// readable reports an entry of scope the read rule shows the context's
// principal one by one: its scope visible, and the entry readable to it
// (Visibility.Entry). What salience is handed is narrowed by it too.
func (rc *roomCtx) readable(scope, key string) bool {
	return rc.visible(scope) && (rc.p == nil || rc.vis.Entry(scope, key))
}

// readableState is the context's state narrowed to the entries the read
// rule lets its principal see one by one (envelope.ReadableState).
func (rc *roomCtx) readableState() map[string]any {
	if rc.p == nil {
		return rc.state
	}
	return envelope.ReadableState(rc.state, rc.visibility())
}

// snapVisibility is p's visibility decided from snap. A snapshot read
// cannot fail, but if a rule did, p would see only what no rule governs.
func snapVisibility(p *Principal, snap *snapshot) *authority.Visibility {
	v, err := authority.VisibilityOf(snap.rules, p, snapRows(snap))
	if err != nil {
		return authority.Unreadable(p)
	}
	return v
}

// build assembles the context: state (timers and entry `enabled` applied),
// agents, messages, action enablement, views in dependency order, then
// action availability (whose `if` may read views).
func (s *Service) build(ctx context.Context, snap *snapshot, p *Principal, agents []presence, msgs msgCounts, now time.Time, params map[string]any) *roomCtx {
	rc := &roomCtx{now: now, snap: snap, p: p, agents: agents, msgs: msgs}
	if p != nil && p.Kind == KindAgent {
		rc.self = p.AgentID
	}
	rc.state, rc.gatesHidden = s.stateFor(ctx, rc, func(scope string) bool { return rc.visible(scope) })
	s.hideGated(clockFor(ctx, "messages"), rc)
	rc.vars = expr.Vars{
		State:    rc.state,
		Agents:   rc.visibleAgents(clockFor(ctx, "agents"), s),
		Messages: envelope.MessagesVar(rc.msgs.Count, rc.msgs.Unread, rc.msgs.Directed),
		Self:     rc.self,
		Params:   params,
		Now:      now,
	}
	// Action enablement first (it may not read views), then views.
	actx := clockFor(ctx, "actions")
	actVar := rc.enableActions(actx, s, params)
	rc.vars.Actions = actVar
	rc.evalViews(clockFor(ctx, "views"), s)
	rc.vars.Views = rc.views
	rc.actAvail = map[string]bool{}
	for id, enabled := range rc.actEnabled {
		avail := enabled && s.cooldownOf(snap, id, now) == nil
		if avail && snap.actions[id].def.If != "" {
			avail = rc.affordAction(actx, s, id, snap.actions[id].def.If, rc.actionVars(actx, s, snap.actions[id].def, params), true)
		}
		rc.actAvail[id] = avail
		actVar[id] = map[string]any{"enabled": enabled, "available": avail}
	}
	return rc
}

// enableActions decides which live actions are enabled for the reader
// (rc.actEnabled) and returns the actions variable views see, in id
// order, so which registrar's state the gate budget runs out in does not
// vary between reads.
func (rc *roomCtx) enableActions(ctx context.Context, s *Service, params map[string]any) map[string]any {
	rc.actEnabled = map[string]bool{}
	actVar := map[string]any{}
	for _, id := range slices.Sorted(maps.Keys(rc.snap.actions)) {
		a := rc.snap.actions[id]
		if !a.r.timer.live(rc.now) {
			continue
		}
		ok := true
		if a.def.Enabled != "" {
			ok = rc.affordAction(ctx, s, id, a.def.Enabled, rc.actionVars(ctx, s, a.def, params), false)
		}
		rc.actEnabled[id] = ok
		actVar[id] = map[string]any{"enabled": ok}
	}
	return actVar
}

// stateFor builds the state map for scopes keep admits. An agent's own
// scope also appears as "self". Entries with an `enabled` expression are
// shown when it holds, as far as the read's gate budget
// (Limits.EnabledCostPerRead) affords their evaluation; hidden reports how
// many it could not afford (those are not shown: fail closed).
func (s *Service) stateFor(ctx context.Context, rc *roomCtx, keep func(string) bool) (state map[string]any, hidden int) {
	live := rc.snap.live(rc.now)
	state = make(map[string]any, len(live.vals)+2)
	for scope, m := range live.vals {
		if keep(scope) {
			state[scope] = m
		}
	}
	// Before the gates: they compute with what the reader may read.
	rc.hideEntries(state)
	var deferred []*srow
	for _, r := range live.deferred {
		if keep(r.Scope) {
			deferred = append(deferred, r)
		}
	}
	if len(deferred) > 0 {
		hidden = s.showGated(ctx, rc, live, state, deferred)
	}
	if len(deferred) > 0 {
		rc.hideEntries(state) // entries the gates admitted
	}
	envelope.SharedAndSelf(state, rc.self, keep)
	return state, hidden
}

// showGated adds to state the deferred entries whose `enabled` holds, as
// far as the read's gate budget affords, and returns how many it could
// not afford. Entry-level `enabled` sees the state without such entries.
// The cached scope maps are shared, so the scopes that gain entries are
// copied first.
func (s *Service) showGated(ctx context.Context, rc *roomCtx, live *liveState, state map[string]any, deferred []*srow) (hidden int) {
	vars := &expr.Vars{State: state, Self: rc.self, Now: rc.now, Agents: envelope.AgentsVar(rc.agents)}
	b := rc.budget()
	limit := uint64(s.lim.EnabledCostPerRead)
	g := &entryGates{s: s, vars: vars}
	g.key, g.shared = rc.gateKey(state)
	if g.shared {
		g.memo = live.gates.Results(g.key)
	}
	g.clk = expr.ClockOf(ctx)
	g.quantum = -1
	if s.lim.GateQuantum > 0 && g.shared {
		g.quantum = rc.now.UnixNano() / int64(s.lim.GateQuantum)
		g.timed = live.gates.Timed(g.key, g.quantum)
	}
	var add []*srow
	for _, r := range deferred {
		// Counted whether memoised or evaluated, so which entries
		// the budget hides does not depend on what was cached.
		if b.spent >= limit {
			b.cut++
			hidden++
			continue
		}
		res := g.eval(ctx, r)
		b.spent += res.cost
		if res.on {
			add = append(add, r)
		}
	}
	if len(g.fresh) > 0 {
		live.gates.KeepResults(g.key, g.fresh, live.liveEntries)
	}
	if len(g.freshTimed) > 0 {
		live.gates.KeepTimed(g.key, g.quantum, g.freshTimed, live.liveEntries)
	}
	rc.addEntries(state, add)
	return hidden
}

// entryGates is one read's evaluation of entry gates: the results shared
// across reads under key (memo, and timed for the quantum when gates on
// now are memoised), and those this read computed that may be shared.
type entryGates struct {
	s      *Service
	vars   *expr.Vars
	key    string
	shared bool
	clk    *expr.Clock
	// quantum is -1 when results on now are not memoised.
	quantum           int64
	memo, timed       map[*srow]gateResult
	fresh, freshTimed map[*srow]gateResult
}

// eval is r's gate: memoised, or evaluated and kept for sharing when its
// result may be.
func (g *entryGates) eval(ctx context.Context, r *srow) gateResult {
	res, ok := g.memo[r]
	gctx := ctx
	if g.clk != nil {
		gctx = clockFor(ctx, "state."+r.Scope)
	}
	if !ok && expr.ClockOf(gctx) == nil {
		// A wait's read evaluates a gate on now afresh where
		// the wait reads its scope: the memo cannot say when
		// its result changes.
		res, ok = g.timed[r]
	}
	if !ok {
		var kind envelope.GateMemo
		res, kind = g.s.evalGate(gctx, *r.enabled, g.vars)
		switch {
		case !g.shared:
		case kind == envelope.MemoPure:
			if g.fresh == nil {
				g.fresh = map[*srow]gateResult{}
			}
			g.fresh[r] = res
		case kind == envelope.MemoTimed && g.quantum >= 0:
			if g.freshTimed == nil {
				g.freshTimed = map[*srow]gateResult{}
			}
			g.freshTimed[r] = res
		}
	}
	return res
}

// addEntries adds the gated entries admitted to state, copying a shared
// scope map before its first change (envelope.AddEntries).
func (rc *roomCtx) addEntries(state map[string]any, add []*srow) {
	rc.modified = envelope.AddEntries(state, rc.modified, add, func(r *srow) (string, string, any) { return r.Scope, r.Key, r.val })
}

// hideEntries takes out of state the entries of a scope the reader reads
// that the read rules hide from it one by one (envelope.HideEntries).
func (rc *roomCtx) hideEntries(state map[string]any) {
	if rc.p != nil {
		rc.modified = envelope.HideEntries(state, rc.modified, rc.visibility())
	}
}

// gateKey names the authority entry-level gates evaluate with
// (envelope.GateKey); ok is false when a rule cannot say: nothing is
// shared.
func (rc *roomCtx) gateKey(state map[string]any) (string, bool) {
	rules, ok := rc.ruleKey()
	if !ok {
		return "", false
	}
	return envelope.GateKey(rc.self, state, rules), true
}

// ruleKey names what the read rules let rc's principal see within the
// scopes it reads (Visibility.ShareKey); ok is false when a rule does not
// say, and then no evaluation made with its state may be shared.
func (rc *roomCtx) ruleKey() (string, bool) {
	if rc.p == nil {
		return "\x00system", true
	}
	return rc.visibility().ShareKey()
}

// evalGate evaluates an entry-level enabled expression (envelope.Gate).
func (s *Service) evalGate(ctx context.Context, src string, vars *expr.Vars) (gateResult, envelope.GateMemo) {
	on, cost, memo := envelope.Gate(ctx, s.cel, src, vars)
	return gateResult{on: on, cost: cost}, memo
}

// afford evaluates a gate if the read's gate budget (limit) affords it,
// and charges its cost; past the budget the gate is counted unevaluated
// and does not hold: fail closed.
func (b *gateBudget) afford(limit int, eval func() gateResult) bool {
	if b.spent >= uint64(limit) {
		b.cut++
		return false
	}
	g := eval()
	b.spent += g.cost
	return g.on
}

// visibleAgents is the agents map as the reader sees it
// (envelope.VisibleAgents), agents' gates evaluated as entry-level gates
// are (the reader's state, every agent, self and now; counted against
// the read's gate budget).
func (rc *roomCtx) visibleAgents(ctx context.Context, s *Service) map[string]any {
	var vars *expr.Vars
	return envelope.VisibleAgents(rc.agents, func(src string) bool {
		if vars == nil {
			vars = &expr.Vars{State: rc.state, Self: rc.self, Now: rc.now, Agents: envelope.AgentsVar(rc.agents)}
		}
		return rc.budget().afford(s.lim.EnabledCostPerRead, func() gateResult { g, _ := s.evalGate(ctx, src, vars); return g })
	})
}

// evalBool evaluates a gate; an error counts as false.
func (s *Service) evalBool(ctx context.Context, src string, vars *expr.Vars) bool {
	p, err := s.cel.Compile(src)
	if err != nil {
		return false
	}
	ok, err := s.cel.EvalBool(ctx, p, vars)
	return err == nil && ok
}

// affordAction evaluates an action's enabled (or, with ifClause, its `if`
// without params) for this read (envelope.ActionGuard), within
// Limits.ActionCostPerRead for all of the read's actions together: each
// read evaluates every action for availability, and nothing else
// bounded their sum. Past the budget an action is not evaluated
// (actionsCut) and reads as not enabled or not available: fail closed;
// an invocation evaluates its own action anyway.
func (rc *roomCtx) affordAction(ctx context.Context, s *Service, id, src string, vars *expr.Vars, ifClause bool) bool {
	if rc.actionCost >= uint64(s.lim.ActionCostPerRead) {
		if rc.actionsCut == nil {
			rc.actionsCut = map[string]bool{}
		}
		rc.actionsCut[id] = true
		return false
	}
	ok, cost, held := envelope.ActionGuard(ctx, s.cel, src, vars, ifClause)
	rc.actionCost += cost
	if held {
		if rc.ifHeld == nil {
			rc.ifHeld = map[string]bool{}
		}
		rc.ifHeld[id] = true
	}
	return ok
}

// cooldownOf returns the live cooldown of an action, if any.
func (s *Service) cooldownOf(snap *snapshot, id string, now time.Time) *timerState {
	r := snap.scopes[scopeCooldowns][id]
	if r == nil || r.timer == nil || !r.timer.live(now) {
		return nil
	}
	return r.timer
}

// errorText is err as a value shows it (envelope.ErrorText).
func errorText(err error) string { return envelope.ErrorText(err) }
