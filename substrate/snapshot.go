package substrate

// The room snapshot: a room's mutable entries at one seq, decoded once,
// cached per process, what of them is live at a moment, and the context
// builds readers of one authority share at it (buildShared).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/delta"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/internal/buildcache"
	"github.com/syncsubstrate/sync/substrate/internal/jsoncache"
	"github.com/syncsubstrate/sync/substrate/internal/memo"
	"github.com/syncsubstrate/sync/substrate/internal/readcache"
	"github.com/syncsubstrate/sync/substrate/internal/viewmemo"
	"github.com/syncsubstrate/sync/substrate/timer"
)

// snapshot is a room's mutable state at one seq, decoded once and shared,
// read-only, by every request that sees that seq. Timers are applied when
// it is used, not when it is loaded, so one snapshot serves until the next
// mutation.
type snapshot struct {
	room         string
	seq          int64
	messageCount int64
	// scopes holds every row with sort_key NULL: scope → key → row.
	scopes  map[string]map[string]*srow
	actions map[string]*actionRec
	views   []*viewRec // in key order
	// about is what the room is for, from its meta (fixed at creation).
	about *RoomAbout
	// rules are the read rules of the Service that read it (wiring.rules),
	// which decide what each reader sees of it.
	rules []ReadRule

	msgOnce sync.Once
	msgUse  bool

	// usage is the vocabulary's usage at this seq, and memo what
	// features compute once per snapshot (Read.Memo): both change only
	// with the seq.
	usageMu sync.Mutex
	usage   map[string]*Usage
	memoMu  sync.Mutex
	memo    map[string]*memoEntry

	// liveAt is live's answer, until a timer next changes what is live.
	liveAt memo.Until[*liveState]

	// hidden is hiddenMessages' answers, per message count.
	hidden memo.Map[int64, []hiddenMsg]
	// unseen is unseenAt's answers, per "since".
	unseen memo.Bounded[int64, *unseenChanges]
	// timed is timedRows, found once.
	timedOnce sync.Once
	timed     []scopedRow

	// pure is buildPure's answer, decided once.
	pureOnce sync.Once
	pure     bool
	// viewsMsgs: a view reads messages (decided with pure).
	viewsMsgs bool
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

// snapCache keeps the newest snapshot of recently used rooms, by the
// room's incarnation (cacheKey) and the seq the snapshot is at. The cache
// (internal/readcache) only stores and returns; what decides that a cached
// snapshot serves a read is here and in the read path: the key names the
// incarnation, a read asks for the seq it read in its own statement, and
// readRoomCachedAt takes the snapshot only when it is readReady for the
// room's message count.
type snapCache struct{ c *readcache.Cache[*snapshot] }

// snapCacheRooms is how many rooms' snapshots a process keeps.
const snapCacheRooms = 1024

func newSnapCache() *snapCache {
	return &snapCache{c: readcache.New[*snapshot](snapCacheRooms)}
}

// get is the room's snapshot at seq, or nil when the process holds none.
func (c *snapCache) get(room string, seq int64) *snapshot {
	snap, _ := c.c.Get(room, seq)
	return snap
}

// put keeps s as the room's snapshot unless a newer one is kept already.
func (c *snapCache) put(room string, s *snapshot) { c.c.Put(room, s.seq, s) }

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
	snap, err := s.readSnapshot(ctx, q, roomID, seq, messageCount)
	if err != nil {
		return nil, err
	}
	s.snaps.put(key, snap)
	return snap, nil
}

// readSnapshot reads the room's snapshot on q, without the cache.
func (s *Service) readSnapshot(ctx context.Context, q querier, roomID string, seq, messageCount int64) (*snapshot, error) {
	rows, err := q.Query(ctx, sqlSnapshot, roomID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	snap := &snapshot{room: roomID, seq: seq, messageCount: messageCount, scopes: map[string]map[string]*srow{}, actions: map[string]*actionRec{}, rules: s.wired.rules}
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
	var meta []byte
	if err := q.QueryRow(ctx, `SELECT meta FROM rooms WHERE id = $1`, roomID).Scan(&meta); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	if label, desc, ok := defs.About(meta); ok {
		snap.about = &RoomAbout{Label: label, Description: desc}
	}
	return snap, nil
}

// nextChange is the earliest moment after now at which a timer changes
// what the room shows (zero if none is pending).
func (snap *snapshot) nextChange(now time.Time) time.Time {
	var next time.Time
	for _, keys := range snap.scopes {
		for _, r := range keys {
			next = timer.Earliest(next, r.timer.nextChange(now))
		}
	}
	return next
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
// rows removed, logs skipped except that one at a mutable row's key
// removes that row), at seq.
func (snap *snapshot) advance(s *Service, pending []pendingWrite, seq, messageCount int64) *snapshot {
	out := &snapshot{room: snap.room, seq: seq, messageCount: messageCount, scopes: make(map[string]map[string]*srow, len(snap.scopes)), actions: snap.actions, about: snap.about, rules: snap.rules}
	for scope, keys := range snap.scopes {
		out.scopes[scope] = keys
	}
	defsChanged := false
	copied := map[string]bool{}
	for _, w := range pending {
		r := w.r
		if r.SortKey != nil {
			// Logs are not part of the snapshot, but a log row may
			// replace a mutable row at its key (append over a deleted or
			// expired entry): that row is gone.
			if _, ok := out.scopes[r.Scope][r.Key]; !ok {
				continue
			}
		}
		if !copied[r.Scope] {
			keys := make(map[string]*srow, len(out.scopes[r.Scope])+1)
			for k, v := range out.scopes[r.Scope] {
				keys[k] = v
			}
			out.scopes[r.Scope] = keys
			copied[r.Scope] = true
		}
		if w.del || r.SortKey != nil {
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

// liveState is a snapshot's visible entries at some moment, valid until
// the next timer changes visibility. Its maps are shared and read-only.
type liveState struct {
	vals map[string]map[string]any
	raw  map[string]map[string]json.RawMessage
	// deferred are live entries with an `enabled` expression, decided per
	// reader, in scope and key order (the order the per-read budget
	// affords them in).
	deferred []*srow
	// gates memoises, per authority (see gateKey), the results of gates
	// that read neither now nor agents (they depend on nothing else that
	// changes without a new seq), and for one time quantum
	// (Limits.GateQuantum) those that read now (not agents): a room of
	// entries gated on now costs one evaluation of each per reader per
	// quantum, not one per read.
	gates buildcache.Gates[*srow, gateResult]
	// views keeps the values of views that depend on nothing but this
	// state (roomCtx.evalViews; viewKey says what decides them): every
	// reader of an unchanged room shares them, and they are evaluated
	// once. The lobby's public views (RoomView.PublicView) are kept there
	// too, under keys of their own: every render of every member's lobby
	// shares one evaluation.
	views viewmemo.Memo[viewKey, viewResult]
	// enc holds raw's scopes encoded as JSON, once each (ScopeJSON): the
	// envelope of every read that shows a scope unmodified reuses them.
	enc jsoncache.Once
	// built keeps context builds per reader authority (buildShared).
	built buildcache.Builds[*builtCtx]
	// liveEntries counts the state's live entries, gated ones included:
	// what the caches of one state may keep per reader, in all, is
	// bounded by it (buildcache), since readers are free to make and the
	// state's own size is what its writers paid for.
	liveEntries int
}

// viewResult is one view's evaluation: its value (or error value) and
// what it cost. Its enabled gate is not part of it: that is decided per
// reader (roomCtx.viewGate).
type viewResult struct {
	val  any
	cost uint64
}

// live returns the entries visible at now, computing them once per
// snapshot and timer epoch.
func (snap *snapshot) live(now time.Time) *liveState {
	return snap.liveAt.Get(now, snap.liveNow)
}

// liveNow computes the entries visible at now, and when a timer next
// changes them (zero: not until the snapshot is replaced).
func (snap *snapshot) liveNow(now time.Time) (*liveState, time.Time) {
	var until time.Time
	l := &liveState{vals: map[string]map[string]any{}, raw: map[string]map[string]json.RawMessage{}}
	for scope, keys := range snap.scopes {
		if isHidden(scope) {
			continue
		}
		vals := make(map[string]any, len(keys))
		raw := make(map[string]json.RawMessage, len(keys))
		for k, r := range keys {
			if t := r.timer.nextChange(now); !t.IsZero() && (until.IsZero() || t.Before(until)) {
				until = t
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
		l.liveEntries += len(vals)
	}
	l.liveEntries += len(l.deferred)
	sort.Slice(l.deferred, func(i, j int) bool {
		a, b := l.deferred[i], l.deferred[j]
		return a.Scope < b.Scope || (a.Scope == b.Scope && a.Key < b.Key)
	})
	return l, until
}

// gateResult is one entry-level gate's evaluation: whether it admits the
// entry, and what it counts against the read's budget.
type gateResult struct {
	on   bool
	cost uint64
}

func isHidden(scope string) bool {
	// A feature's apart scopes (the loom's trees, documents and leases)
	// have their own surface.
	return apartScope(scope) || slices.Contains(hiddenFromState, scope)
}

// Reusing a built context. build() evaluates a room's state gates, action
// enablement and availability, and views for one reader; in a room whose
// expressions read neither now, agents nor messages (the common room),
// the result depends only on the snapshot at its timer epoch (liveState)
// and on the reader's authority: which scopes it reads and who it is
// (self). Reads with the same authority then share one build; what
// changes without a new seq (presence, unread counts) is still read and
// laid over per read.

// builtCtx is what build computed for one authority at one liveState.
// Its maps are shared between reads: read-only.
type builtCtx struct {
	state       map[string]any
	modified    map[string]bool
	gatesHidden int
	gates       gateBudget
	views       map[string]any
	viewOrder   []string
	viewCost    uint64
	actEnabled  map[string]bool
	actAvail    map[string]bool
	actions     map[string]any
	actionCost  uint64
	authority   map[string]map[string]any
}

// buildPure reports whether build's result at this snapshot depends on
// nothing but the liveState and the reader's authority: no action, view or
// entry gate reads now, agents or (actions) the reader's messages; no
// definition has a timer of its own and no cooldown runs (their expiry is
// not part of the liveState's epoch).
func (snap *snapshot) buildPure(s *Service) bool {
	snap.pureOnce.Do(func() {
		snap.pure = snap.computePure(s)
	})
	return snap.pure
}

func (snap *snapshot) computePure(s *Service) bool {
	if len(snap.scopes[scopeCooldowns]) > 0 {
		return false
	}
	timeless := func(src string, messages bool) bool {
		if src == "" {
			return true
		}
		p, err := s.cel.Compile(src)
		if err != nil {
			return true // a compile error is a constant outcome
		}
		return !p.Uses("now") && !p.Uses("agents") && !(messages && p.UsesMessages)
	}
	for _, a := range snap.actions {
		if a.r.timer != nil || !timeless(a.def.Enabled, true) || !timeless(a.def.If, true) {
			return false
		}
	}
	for _, v := range snap.views {
		if v.r.timer != nil {
			return false
		}
		for _, p := range []*expr.Program{v.prog, v.enabledProg} {
			if p != nil && (p.Uses("now") || p.Uses("agents")) {
				return false
			}
			if p != nil && p.UsesMessages {
				snap.viewsMsgs = true
			}
		}
	}
	for scope, rows := range snap.scopes {
		if isHidden(scope) {
			continue
		}
		for _, r := range rows {
			if r.enabled != nil && !timeless(*r.enabled, false) {
				return false
			}
		}
	}
	return true
}

// buildKey names the reader's authority for build: who it is, the
// scopes it reads (as the read rule decides them, rules included), what
// the read rules let it see within them (ruleKey) and,
// when a view reads messages, the reader's message counts; ok is
// false when the read cannot share a build (presence with enabled
// expressions, which spend the read's gate budget per read; gated unread
// messages, likewise).
func (rc *roomCtx) buildKey(live *liveState) (string, bool) {
	for _, a := range rc.agents {
		if a.Enabled != nil {
			return "", false
		}
	}
	if len(rc.msgs.gated) > 0 {
		return "", false
	}
	msgs := ""
	if rc.snap.viewsMsgs {
		// Views read the reader's own message counts: builds are shared
		// only by readers with the same counts, and not when a hidden
		// message may make this reader's count differ from the raw one
		// (its gate may read now or agents, which the key cannot hold).
		if len(rc.msgs.hidden) > 0 {
			return "", false
		}
		msgs = fmt.Sprintf("\x00#%d/%d/%d", rc.msgs.Count, rc.msgs.Unread, rc.msgs.Directed)
	}
	// What the read rules hide within the scopes read (an agent's
	// operational memory, from all but the agent and room authority) is
	// part of the authority: the room token and a view link read the same
	// scopes and see different entries in them.
	rules, ok := rc.ruleKey()
	if !ok {
		return "", false
	}
	scopes := make([]string, 0, len(live.vals))
	for sc := range live.vals {
		if rc.visible(sc) {
			scopes = append(scopes, sc)
		}
	}
	slices.Sort(scopes)
	return rc.self + "\x00" + strings.Join(scopes, "\x00") + msgs + "\x00\x00" + rules, true
}

// buildShared is build for a context read: a build of the same authority
// at the same liveState is reused when the snapshot allows it.
func (s *Service) buildShared(ctx context.Context, snap *snapshot, p *Principal, agents []presence, msgs msgCounts, now time.Time) *roomCtx {
	if p == nil || !snap.buildPure(s) {
		return s.build(ctx, snap, p, agents, msgs, now, nil)
	}
	live := snap.live(now)
	probe := &roomCtx{now: now, snap: snap, p: p, agents: agents, msgs: msgs}
	if p.Kind == KindAgent {
		probe.self = p.AgentID
	}
	key, ok := probe.buildKey(live)
	if !ok {
		return s.build(ctx, snap, p, agents, msgs, now, nil)
	}
	b, ok := live.built.Get(key)
	if !ok {
		rc := s.build(ctx, snap, p, agents, msgs, now, nil)
		if snap.live(now) != live || rc.budget().cut > 0 || rc.viewsCut > 0 || len(rc.actionsCut) > 0 {
			return rc // a budget ran out: what it hid may differ next time
		}
		b = &builtCtx{state: rc.state, modified: rc.modified, gatesHidden: rc.gatesHidden, gates: *rc.budget(),
			views: maps.Clone(rc.views), viewOrder: rc.viewOrder, viewCost: rc.viewCost,
			actEnabled: rc.actEnabled, actAvail: rc.actAvail, actions: rc.vars.Actions, actionCost: rc.actionCost,
			authority: maps.Clone(rc.authority)}
		// What the build holds beyond the snapshot (the scopes a gate added
		// to or a read rule took from, in maps of its own) is what keeping
		// it costs: the reader's state and its registrars'.
		copies := buildcache.Copied(live.vals, append([]map[string]any{rc.state}, slices.Collect(maps.Values(rc.authority))...)...)
		live.built.Keep(key, b, copies, live.liveEntries)
		return rc
	}
	rc := probe
	gates := b.gates
	rc.state, rc.modified, rc.gatesHidden, rc.gates = b.state, b.modified, b.gatesHidden, &gates
	// The envelope and its annotations may change the views map (a
	// system view added, a delta's deletions): each read its own copy.
	rc.views, rc.viewOrder, rc.viewCost = maps.Clone(b.views), b.viewOrder, b.viewCost
	rc.actEnabled, rc.actAvail, rc.actionCost = b.actEnabled, b.actAvail, b.actionCost
	rc.authority = maps.Clone(b.authority)
	// The hidden messages are the snapshot's; which of them this reader
	// may not see is its own (their gates read self, now, agents): its
	// messages.count is derived per read, as build does.
	s.uncountHidden(delta.ClockFor(ctx, "messages"), rc)
	rc.vars = expr.Vars{
		State:    rc.state,
		Agents:   rc.visibleAgents(delta.ClockFor(ctx, "agents"), s),
		Messages: envelope.MessagesVar(rc.msgs.Count, rc.msgs.Unread, rc.msgs.Directed),
		Self:     rc.self,
		Now:      now,
		Actions:  b.actions,
		Views:    rc.views,
	}
	return rc
}
