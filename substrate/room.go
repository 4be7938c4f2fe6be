package substrate

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/syncsubstrate/sync/substrate/expr"
)

// snapshot is a room's mutable state at one seq, decoded once and shared,
// read-only, by every request that sees that seq. Timers are applied when
// it is used, not when it is loaded, so one snapshot serves until the next
// mutation.
type snapshot struct {
	seq          int64
	messageCount int64
	// scopes holds every row with sort_key NULL: scope → key → row.
	scopes  map[string]map[string]*srow
	actions map[string]*actionRec
	views   []*viewRec // in key order

	msgOnce sync.Once
	msgUse  bool

	liveMu    sync.Mutex
	liveCache *liveState
}

// actionsUseMessages reports whether any action's enabled or if reads
// messages (evaluated for every context).
func (snap *snapshot) actionsUseMessages(s *Service) bool {
	snap.msgOnce.Do(func() {
		for _, a := range snap.actions {
			if s.usesMessages(a.def.Enabled, a.def.If) {
				snap.msgUse = true
				return
			}
		}
	})
	return snap.msgUse
}

// srow is a row with its decoded value.
type srow struct {
	*row
	val any
}

type actionRec struct {
	def *ActionDef
	r   *row
}

type viewRec struct {
	def         *ViewDef
	r           *row
	prog        *expr.Program
	enabledProg *expr.Program // nil without an enabled expression
	err         error         // compile error, reported as the view's value
}

// snapCache keeps the newest snapshot of recently used rooms.
type snapCache struct {
	mu    sync.Mutex
	rooms map[string]*snapshot
	max   int
}

func (c *snapCache) get(room string, seq int64) *snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.rooms[room]; s != nil && s.seq == seq {
		return s
	}
	return nil
}

func (c *snapCache) put(room string, s *snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.rooms[room]; old != nil && old.seq > s.seq {
		return
	}
	if len(c.rooms) >= c.max {
		for k := range c.rooms { // evict one arbitrary room
			delete(c.rooms, k)
			break
		}
	}
	c.rooms[room] = s
}

// cacheKey names one incarnation of a room: a room deleted and created
// again under the same id starts its seq afresh, and must never be served
// the old one's snapshot (by this process or any other).
func cacheKey(roomID string, born time.Time) string {
	return roomID + "@" + strconv.FormatInt(born.UnixNano(), 36)
}

// loadSnapshot returns the room's snapshot at seq, which the caller read in
// the same transaction as q (so the rows it loads belong to that seq).
func (s *Service) loadSnapshot(ctx context.Context, q querier, roomID, key string, seq, messageCount int64) (*snapshot, error) {
	if snap := s.snaps.get(key, seq); snap != nil {
		return snap, nil
	}
	rows, err := q.Query(ctx, `SELECT `+rowCols+` FROM state WHERE room_id = $1 AND sort_key IS NULL ORDER BY scope, key`, roomID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	snap := &snapshot{seq: seq, messageCount: messageCount, scopes: map[string]map[string]*srow{}, actions: map[string]*actionRec{}}
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, err
		}
		snap.add(s, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	s.snaps.put(key, snap)
	return snap, nil
}

// add stores one row and indexes it.
func (snap *snapshot) add(s *Service, r *row) {
	sc := snap.scopes[r.Scope]
	if sc == nil {
		sc = map[string]*srow{}
		snap.scopes[r.Scope] = sc
	}
	sc[r.Key] = &srow{row: r, val: expr.MustDecode(r.Value)}
	snap.index(s, r)
}

// index parses action and view definitions.
func (snap *snapshot) index(s *Service, r *row) {
	switch r.Scope {
	case scopeActions:
		var def ActionDef
		if json.Unmarshal(r.Value, &def) == nil {
			snap.actions[r.Key] = &actionRec{def: &def, r: r}
		}
	case scopeViews:
		var def ViewDef
		if json.Unmarshal(r.Value, &def) == nil {
			vr := &viewRec{def: &def, r: r}
			vr.prog, vr.err = s.cel.Compile(def.Expr)
			if vr.err == nil && def.Enabled != "" {
				vr.enabledProg, vr.err = s.cel.Compile(def.Enabled)
			}
			snap.views = append(snap.views, vr)
		}
	}
}

// advance returns a copy of snap with the pending writes applied (deleted
// rows removed, logs skipped), at seq.
func (snap *snapshot) advance(s *Service, pending []pendingWrite, seq, messageCount int64) *snapshot {
	out := &snapshot{seq: seq, messageCount: messageCount, scopes: make(map[string]map[string]*srow, len(snap.scopes)), actions: snap.actions}
	for scope, keys := range snap.scopes {
		out.scopes[scope] = keys
	}
	defsChanged := false
	copied := map[string]bool{}
	for _, w := range pending {
		r := w.r
		if r.SortKey != nil {
			continue // logs are not part of the snapshot
		}
		if !copied[r.Scope] {
			keys := make(map[string]*srow, len(out.scopes[r.Scope])+1)
			for k, v := range out.scopes[r.Scope] {
				keys[k] = v
			}
			out.scopes[r.Scope] = keys
			copied[r.Scope] = true
		}
		if w.del {
			delete(out.scopes[r.Scope], r.Key)
		} else {
			out.scopes[r.Scope][r.Key] = &srow{row: r, val: expr.MustDecode(r.Value)}
		}
		defsChanged = defsChanged || r.Scope == scopeActions || r.Scope == scopeViews
	}
	if !defsChanged {
		out.views = snap.views
		return out
	}
	out.actions = map[string]*actionRec{}
	for _, keys := range []string{scopeActions, scopeViews} {
		for _, r := range sortedRows(out.scopes[keys]) {
			out.index(s, r.row)
		}
	}
	return out
}

func sortedRows(m map[string]*srow) []*srow {
	out := make([]*srow, 0, len(m))
	for _, r := range m {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// hasTicks reports whether any row has a logical (tick) timer.
func (snap *snapshot) hasTicks() bool {
	for _, keys := range snap.scopes {
		for _, r := range keys {
			if r.timer != nil && r.timer.TicksLeft != nil {
				return true
			}
		}
	}
	return false
}

// Reserved scopes holding definitions and cooldowns.
const (
	scopeActions   = "_actions"
	scopeViews     = "_views"
	scopeCooldowns = "_cooldowns"
	scopeHelp      = "_help"
)

// hiddenFromState are scopes not shown under state in contexts and CEL:
// definitions have their own sections.
var hiddenFromState = []string{scopeActions, scopeViews, scopeCooldowns, "_agents", scopeHelp}

// presence is the agents' public presence, loaded fresh for each context.
type presence struct {
	ID            string
	Name, Role    string
	Status        string
	WaitingOn     *string
	LastHeartbeat time.Time
	LastSeenSeq   int64
}

// msgCounts are the caller's message counters.
type msgCounts struct {
	Count, Unread, Directed int64
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
	// readUpTo is the newest message seq the context returned to its
	// agent; readCtx marks it read once the read transaction is over.
	readUpTo int64

	state      map[string]any  // visible scope → key → value
	modified   map[string]bool // scopes of state not shared with the snapshot's cache
	views      map[string]any  // id → value (or {"_error": …})
	viewOrder  []string
	actEnabled map[string]bool
	actAvail   map[string]bool
	vars       expr.Vars
	// viewCost is what evaluating the views cost this read (cel-go cost);
	// viewsCut counts the views left unevaluated past the budget.
	viewCost uint64
	viewsCut int
	// authority caches, per registrar scope, the state that registrar
	// reads (views and actions evaluate with their registrar's authority).
	authority map[string]map[string]any
}

// stateAs is the state the registrar of a definition in scope reads: the
// communal scopes and its own (seen as `self` when asSelf), never the
// reader's. Views and actions evaluate with it, so what they project or
// write never carries what their registrar could not read.
func (rc *roomCtx) stateAs(ctx context.Context, s *Service, scope string, asSelf bool) map[string]any {
	key := scope
	if !asSelf {
		key += "\x00"
	}
	if st, ok := rc.authority[key]; ok {
		return st
	}
	reg := &Principal{Kind: KindAgent, AgentID: scope}
	sub := &roomCtx{now: rc.now, snap: rc.snap, p: reg, agents: rc.agents}
	if asSelf && scope != ScopeShared && !strings.HasPrefix(scope, "_") {
		sub.self = scope
	}
	st := s.stateFor(ctx, sub, func(sc string) bool { return canRead(reg, sc) && sc != ScopeAudit })
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
func (rc *roomCtx) actionVars(ctx context.Context, s *Service, def *ActionDef, params map[string]any) *expr.Vars {
	return &expr.Vars{State: rc.stateAs(ctx, s, def.Scope, rc.self != "" && rc.self == def.Scope), Views: rc.vars.Views,
		Agents: rc.vars.Agents, Actions: rc.vars.Actions, Messages: rc.vars.Messages, Self: rc.self, Params: params, Now: rc.now}
}

// visible reports whether the context's principal reads scope.
func (rc *roomCtx) visible(scope string) bool {
	return rc.p == nil || canRead(rc.p, scope)
}

// build assembles the context: state (timers and entry `enabled` applied),
// agents, messages, action enablement, views in dependency order, then
// action availability (whose `if` may read views).
func (s *Service) build(ctx context.Context, snap *snapshot, p *Principal, agents []presence, msgs msgCounts, now time.Time, params map[string]any) *roomCtx {
	rc := &roomCtx{now: now, snap: snap, p: p, agents: agents, msgs: msgs}
	if p != nil && p.Kind == KindAgent {
		rc.self = p.AgentID
	}
	rc.state = s.stateFor(ctx, rc, func(scope string) bool { return rc.visible(scope) })
	rc.vars = expr.Vars{
		State:    rc.state,
		Agents:   agentsVar(agents),
		Messages: map[string]any{"count": msgs.Count, "unread": msgs.Unread, "directed_unread": msgs.Directed},
		Self:     rc.self,
		Params:   params,
		Now:      now,
	}
	// Action enablement first (it may not read views), then views.
	rc.actEnabled = map[string]bool{}
	actVar := map[string]any{}
	for id, a := range snap.actions {
		if !a.r.timer.live(now) {
			continue
		}
		ok := true
		if a.def.Enabled != "" {
			ok = s.evalBool(ctx, a.def.Enabled, rc.actionVars(ctx, s, a.def, params))
		}
		rc.actEnabled[id] = ok
		actVar[id] = map[string]any{"enabled": ok}
	}
	rc.vars.Actions = actVar
	rc.evalViews(ctx, s)
	rc.vars.Views = rc.views
	rc.actAvail = map[string]bool{}
	for id, enabled := range rc.actEnabled {
		avail := enabled && s.cooldownOf(snap, id, now) == nil
		if avail && snap.actions[id].def.If != "" {
			avail = s.availableIf(ctx, snap.actions[id].def.If, rc.actionVars(ctx, s, snap.actions[id].def, params))
		}
		rc.actAvail[id] = avail
		actVar[id] = map[string]any{"enabled": enabled, "available": avail}
	}
	return rc
}

// stateFor builds the state map for scopes keep admits. An agent's own
// scope also appears as "self".
func (s *Service) stateFor(ctx context.Context, rc *roomCtx, keep func(string) bool) map[string]any {
	live := rc.snap.live(rc.now)
	state := make(map[string]any, len(live.vals)+2)
	for scope, m := range live.vals {
		if keep(scope) {
			state[scope] = m
		}
	}
	var deferred []*srow
	for _, r := range live.deferred {
		if keep(r.Scope) {
			deferred = append(deferred, r)
		}
	}
	if len(deferred) > 0 {
		// Entry-level `enabled` sees the state without such entries. The
		// cached scope maps are shared, so the scopes that gain entries
		// are copied first.
		vars := &expr.Vars{State: state, Self: rc.self, Now: rc.now, Agents: agentsVar(rc.agents)}
		var add []*srow
		for _, r := range deferred {
			if s.evalBool(ctx, *r.enabled, vars) {
				add = append(add, r)
			}
		}
		for _, r := range add {
			if rc.modified == nil {
				rc.modified = map[string]bool{}
			}
			if !rc.modified[r.Scope] {
				cp := map[string]any{}
				if old, ok := state[r.Scope].(map[string]any); ok {
					for k, v := range old {
						cp[k] = v
					}
				}
				state[r.Scope] = cp
				rc.modified[r.Scope] = true
			}
			state[r.Scope].(map[string]any)[r.Key] = r.val
		}
	}
	if _, ok := state[ScopeShared]; !ok && keep(ScopeShared) {
		state[ScopeShared] = map[string]any{} // always there, so state._shared.x reads "no such key: x"
	}
	if rc.self != "" {
		if own, ok := state[rc.self]; ok {
			state[ScopeSelf] = own
		} else {
			state[ScopeSelf] = map[string]any{}
		}
	}
	return state
}

// liveState is a snapshot's visible entries at some moment, valid until
// the next timer changes visibility. Its maps are shared and read-only.
type liveState struct {
	until time.Time // zero: until the snapshot is replaced
	vals  map[string]map[string]any
	raw   map[string]map[string]json.RawMessage
	// deferred are live entries with an `enabled` expression, decided per
	// reader.
	deferred []*srow
	// views memoises the values of views that depend on nothing but this
	// state (see roomCtx.evalViews): every reader of an unchanged room
	// shares them, and they are evaluated once.
	viewsMu sync.Mutex
	views   map[string]viewResult
}

// viewResult is one view's evaluation: its value (or error value), whether
// its enabled expression hid it, and what it cost.
type viewResult struct {
	val    any
	hidden bool
	cost   uint64
}

// live returns the entries visible at now, computing them once per
// snapshot and timer epoch.
func (snap *snapshot) live(now time.Time) *liveState {
	snap.liveMu.Lock()
	defer snap.liveMu.Unlock()
	if l := snap.liveCache; l != nil && (l.until.IsZero() || now.Before(l.until)) {
		return l
	}
	l := &liveState{vals: map[string]map[string]any{}, raw: map[string]map[string]json.RawMessage{}}
	for scope, keys := range snap.scopes {
		if isHidden(scope) {
			continue
		}
		vals := make(map[string]any, len(keys))
		raw := make(map[string]json.RawMessage, len(keys))
		for k, r := range keys {
			if t := r.timer.nextChange(now); !t.IsZero() && (l.until.IsZero() || t.Before(l.until)) {
				l.until = t
			}
			if !r.timer.live(now) {
				continue
			}
			if r.enabled != nil {
				l.deferred = append(l.deferred, r)
				continue
			}
			vals[k] = r.val
			raw[k] = r.Value
		}
		l.vals[scope] = vals
		l.raw[scope] = raw
	}
	snap.liveCache = l
	return l
}

func isHidden(scope string) bool {
	for _, h := range hiddenFromState {
		if scope == h {
			return true
		}
	}
	return false
}

func agentsVar(agents []presence) map[string]any {
	out := make(map[string]any, len(agents))
	for _, a := range agents {
		m := map[string]any{"name": a.Name, "role": a.Role, "status": a.Status,
			"last_heartbeat": a.LastHeartbeat.UTC().Format(time.RFC3339Nano), "waiting_on": nil}
		if a.WaitingOn != nil {
			m["waiting_on"] = *a.WaitingOn
		}
		out[a.ID] = m
	}
	return out
}

// evalViews evaluates every live, enabled view with its registrar's read
// authority (communal scopes plus the registrar's own scope), dependencies
// first. A cycle or an error becomes {"_error": …} on that view only.
//
// A view whose expressions read none of now, agents and actions (and,
// when it reads other views, in a room where every view is so) has the
// same value for every reader of this state: it is evaluated once per
// snapshot and timer epoch and shared. The views' total cost per read is
// bounded by Limits.ViewCostPerRead, counted in order whether a value was
// shared or computed, so which views are cut does not depend on caching.
func (rc *roomCtx) evalViews(ctx context.Context, s *Service) {
	rc.views = map[string]any{}
	byID := map[string]*viewRec{}
	for _, v := range rc.snap.views {
		if v.r.timer.live(rc.now) {
			byID[v.def.ID] = v
			rc.viewOrder = append(rc.viewOrder, v.def.ID)
		}
	}
	live := rc.snap.live(rc.now)
	memo := map[string]viewResult{}
	live.viewsMu.Lock()
	for id, r := range live.views {
		memo[id] = r
	}
	live.viewsMu.Unlock()
	pure := func(p *expr.Program) bool {
		return p == nil || !(p.Uses("now") || p.Uses("agents") || p.Uses("actions"))
	}
	// shareable: reads only state, and other views only by name and only
	// shareable ones. Decided once per view (a cycle counts as not).
	decided := map[string]bool{}
	var shareableID func(id string, seen map[string]bool) bool
	shareableID = func(id string, seen map[string]bool) bool {
		if ok, known := decided[id]; known {
			return ok
		}
		v := byID[id]
		if v == nil || seen[id] {
			return false
		}
		seen[id] = true
		ok := v.err == nil && pure(v.prog) && pure(v.enabledProg) && !v.prog.DynamicViews &&
			(v.enabledProg == nil || !v.enabledProg.Uses("views"))
		for _, d := range v.prog.ViewDeps {
			ok = ok && shareableID(d, seen)
		}
		decided[id] = ok
		return ok
	}
	shareable := func(v *viewRec) bool { return shareableID(v.def.ID, map[string]bool{}) }
	var fresh map[string]viewResult
	var spent uint64
	budget := uint64(s.lim.ViewCostPerRead)
	const (
		todo = iota
		busy
		done
	)
	mark := map[string]int{}
	hidden := map[string]bool{}
	var eval func(id string, path []string)
	eval = func(id string, path []string) {
		v := byID[id]
		switch mark[id] {
		case done:
			return
		case busy:
			cycle := append(append([]string{}, path[indexOf(path, id):]...), id)
			for _, c := range cycle[:len(cycle)-1] {
				rc.views[c] = map[string]any{"_error": "view dependency cycle: " + strings.Join(cycle, " → ")}
				mark[c] = done
			}
			return
		}
		mark[id] = busy
		if v.err != nil {
			rc.views[id] = map[string]any{"_error": errorText(v.err)}
			mark[id] = done
			return
		}
		for _, d := range v.prog.ViewDeps {
			if _, ok := byID[d]; ok {
				eval(d, append(path, id))
			}
		}
		if mark[id] == done { // settled as part of a cycle
			return
		}
		mark[id] = done
		if spent >= budget {
			rc.viewsCut++
			rc.views[id] = map[string]any{"_error": fmt.Sprintf("not evaluated: this room's views cost more than %d per read (cel-go cost), the server's limit", budget),
				"hint": "delete or simplify views (GET the views list shows each one); expensive views can often read a precomputed key instead"}
			return
		}
		res, ok := memo[id]
		if !ok || !shareable(v) {
			res = rc.evalView(ctx, s, v)
			if shareable(v) {
				if fresh == nil {
					fresh = map[string]viewResult{}
				}
				fresh[id] = res
			}
		}
		spent += res.cost
		if res.hidden {
			hidden[id] = true
			return
		}
		rc.views[id] = res.val
	}
	for _, id := range rc.viewOrder {
		eval(id, nil)
	}
	rc.viewCost = spent
	if len(fresh) > 0 {
		live.viewsMu.Lock()
		if live.views == nil {
			live.views = map[string]viewResult{}
		}
		for id, r := range fresh {
			live.views[id] = r
		}
		live.viewsMu.Unlock()
	}
	for id := range hidden {
		delete(rc.views, id)
	}
	if contested := rc.snap.contested(); len(contested) > 0 {
		rc.views[viewContested] = contested
	}
}

// evalView evaluates one view (its dependencies already in rc.views).
func (rc *roomCtx) evalView(ctx context.Context, s *Service, v *viewRec) viewResult {
	s.viewEvals.Add(1)
	self := ""
	if v.def.Scope != ScopeShared && !strings.HasPrefix(v.def.Scope, "_") {
		self = v.def.Scope
	}
	vars := &expr.Vars{State: rc.stateAs(ctx, s, v.def.Scope, true), Views: rc.views, Agents: rc.vars.Agents, Actions: rc.vars.Actions,
		Messages: map[string]any{"count": rc.msgs.Count, "unread": int64(0), "directed_unread": int64(0)}, Self: self, Now: rc.now}
	var res viewResult
	if v.enabledProg != nil {
		on, cost, err := s.cel.EvalCost(ctx, v.enabledProg, vars)
		res.cost += cost
		if b, _ := on.(bool); err != nil || !b {
			res.hidden = true
			return res
		}
	}
	val, cost, err := s.cel.EvalCost(ctx, v.prog, vars)
	res.cost += cost
	if err != nil {
		val = map[string]any{"_error": errorText(err)}
	}
	res.val = val
	return res
}

const viewContested = "_contested"

// contested maps "<scope>.<key>" to the actions that write it, for keys
// written by more than one action. Templated keys are left out: which key
// they hit depends on the invocation.
func (snap *snapshot) contested() map[string]any {
	writers := map[string][]string{}
	for id, a := range snap.actions {
		for _, t := range staticTargets(a.def) {
			if !contains(writers[t], id) {
				writers[t] = append(writers[t], id)
			}
		}
	}
	out := map[string]any{}
	for t, ids := range writers {
		if len(ids) > 1 {
			sort.Strings(ids)
			list := make([]any, len(ids))
			for i, id := range ids {
				list[i] = id
			}
			out[t] = list
		}
	}
	return out
}

func staticTargets(def *ActionDef) []string {
	var out []string
	for _, w := range def.Writes {
		scope := w.Scope
		if scope == "" {
			scope = ScopeShared
		}
		if w.Append || strings.Contains(scope+w.Key, "${") {
			continue
		}
		out = append(out, scope+"."+w.Key)
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func indexOf(xs []string, x string) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	return 0
}

func errorText(err error) string {
	if e, ok := err.(interface{ Body() map[string]any }); ok {
		if m, ok := e.Body()["message"].(string); ok {
			return m
		}
	}
	return err.Error()
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

// availableIf evaluates an action's `if` without params: when it fails
// because it needs params, availability depends on the invocation, so the
// action counts as available.
func (s *Service) availableIf(ctx context.Context, src string, vars *expr.Vars) bool {
	p, err := s.cel.Compile(src)
	if err != nil {
		return false
	}
	ok, err := s.cel.EvalBool(ctx, p, vars)
	if err != nil {
		return p.UsesParams
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
