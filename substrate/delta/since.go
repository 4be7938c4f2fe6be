package delta

import (
	"iter"
	"time"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/timer"
)

// The reserved scopes whose changes change a delta's views and actions
// (the core's scopeActions, scopeViews, scopeCooldowns).
const (
	ScopeActions   = "_actions"
	ScopeViews     = "_views"
	ScopeCooldowns = "_cooldowns"
)

// anyScope in a revision map (newest) stands for every scope: the delta
// cannot tell which changed.
const anyScope = "*"

// Entry is what the rule reads of a row (a state entry, or an action's,
// view's or cooldown's definition): its revision, timer and gate.
type Entry struct {
	Revision int64
	Timer    *timer.State // nil: none
	Enabled  *string      // nil: no enabled gate
}

// Action is a live action as the rule reads it.
type Action struct {
	Def *defs.ActionDef
	Row Entry
}

// View is a view as the rule reads it.
type View struct {
	Def *defs.ViewDef
	Row Entry
}

// Room is the snapshot a delta is taken from, as the rule reads it: the
// core hands it its snapshot through this, and the rule sees nothing
// else of the room.
type Room interface {
	// Rows are the mutable entries, by scope.
	Rows() iter.Seq2[string, Entry]
	Entry(scope, key string) (Entry, bool)
	Actions() iter.Seq2[string, Action]
	Action(id string) (Action, bool)
	// Views are in dependency order (a view after those it reads).
	Views() iter.Seq[View]
	// Timed are the entries with a timer that has an effect, by scope
	// (the only ones Unseen.RanOut can report).
	Timed() iter.Seq2[string, Entry]
}

// Unseen are the changes since a delta's seq that leave no newer
// revision in the snapshot: deletions (the room keeps no tombstones; the
// audit log records them) and timers that ran out. The core reads it
// from the audit log; nil is "not known".
type Unseen struct {
	// Known: the audit log still holds every mutation after the seq
	// (the janitor archives the oldest first); otherwise any scope may
	// have lost an entry.
	Known bool
	// At is when the seq was the room's newest: a clock timer that ran
	// out after it changed what its scope shows.
	At time.Time
	// Deleted are the scopes with an entry deleted since.
	Deleted []string
}

// since is the question a delta answers: what a reader (self) reading
// room at now may not have seen of it after from.
type since struct {
	room   Room
	self   string
	now    time.Time
	from   int64
	unseen *Unseen
	// newest is each scope's newest revision, with the scopes that
	// changed unseen since marked at from+1 (anyScope: every scope).
	newest map[string]int64
}

// newSince is the question, with its revisions read once (one pass over
// the snapshot, not one per view).
func newSince(room Room, self string, now time.Time, from int64, unseen *Unseen) *since {
	q := &since{room: room, self: self, now: now, from: from, unseen: unseen, newest: map[string]int64{}}
	for scope, e := range room.Rows() {
		q.newest[scope] = max(q.newest[scope], e.Revision)
	}
	q.markUnseen(q.newest)
	return q
}

// markUnseen marks in newest the scopes that changed after from unseen
// by their revisions.
func (q *since) markUnseen(newest map[string]int64) {
	u := q.unseen
	if u == nil || !u.Known {
		newest[anyScope] = q.from + 1
		return
	}
	for _, scope := range u.Deleted {
		newest[scope] = max(newest[scope], q.from+1)
	}
	for scope, e := range q.room.Timed() {
		if q.ranOut(e) {
			newest[scope] = max(newest[scope], q.from+1)
		}
	}
}

// ranOut reports whether e's timer may have changed its visibility after
// from (always, when what happened since is not known).
func (q *since) ranOut(e Entry) bool {
	t := e.Timer
	if t == nil || t.Effect == nil {
		return false
	}
	if q.unseen == nil || !q.unseen.Known {
		return true
	}
	clock := t.ExpiresAt != nil && t.ExpiresAt.After(q.unseen.At) && !t.ExpiresAt.After(q.now)
	// Ticks run down with writes to tick_on, not with a revision of the
	// entry itself.
	ticked := t.TicksLeft != nil && *t.TicksLeft <= 0 && t.TickOn != nil && q.tickedSince(*t.TickOn)
	return clock || ticked
}

// tickedSince reports whether the entry a tick timer counts (scope.key)
// was written after from (any entry it may name, when the name is
// ambiguous: a scope or a key with a dot).
func (q *since) tickedSince(on string) bool {
	for i := range len(on) {
		if on[i] != '.' {
			continue
		}
		if e, ok := q.room.Entry(on[:i], on[i+1:]); ok && e.Revision > q.from {
			return true
		}
	}
	return false
}

// changed reports whether a state entry (scope as the room holds it) is
// news: written after from, or it may have become visible since
// unwritten (mayAppear). rev is its revision.
func (q *since) changed(scope, key string) (rev int64, ok bool) {
	e, found := q.room.Entry(scope, key)
	if !found || e.Revision <= q.from && !q.mayAppear(e) {
		return 0, false
	}
	return e.Revision, true
}

// mayAppear reports an entry that may have become visible since without
// being written: one whose enabled gate reads something that changed
// since (or now, agents, or state by a computed name: it may have opened
// at any time), or one with an enable timer (it may have run out since).
// A delta shows such entries while the reader sees them, whatever their
// revision: it may show one the reader had seen, never miss one it had
// not.
func (q *since) mayAppear(e Entry) bool {
	if e.Timer.Enables() {
		return true
	}
	if e.Enabled == nil {
		return false
	}
	return gateMayHaveOpened(*e.Enabled, []string{q.self}, q.from, q.newest)
}

// actionChanges are the actions whose enablement for a reader may have
// changed after a seq: what a view or a gate reading actions reads.
type actionChanges struct {
	// ids are the live actions whose definition changed, whose enabled
	// gate may have changed its answer, or whose timer may have ended or
	// started them.
	ids map[string]bool
	// defs: an action may have been registered or deleted since (which
	// actions exist may differ).
	defs bool
}

// actionsChanged are the actions whose enablement may have changed after
// from.
func (q *since) actionsChanged() *actionChanges {
	c := &actionChanges{ids: map[string]bool{}, defs: q.newest[ScopeActions] > q.from || q.newest[anyScope] > q.from}
	for id, a := range q.room.Actions() {
		// The gate reads its registrar's state, and the reader's own as
		// self (actionVars).
		if a.Row.Revision > q.from || gateMayHaveOpened(a.Def.Enabled, []string{q.self, defs.SelfOf(a.Def.Scope)}, q.from, q.newest) || q.ranOut(a.Row) {
			c.ids[id] = true
		}
	}
	// A gate may read other actions' enablement: until nothing is added.
	for more := true; more; {
		more = false
		for id, a := range q.room.Actions() {
			if !c.ids[id] && c.read(q.room, a.Def.Enabled) {
				c.ids[id], more = true, true
			}
		}
	}
	return c
}

// read reports whether src reads an action that may have changed: one it
// names that changed or may have been deleted, or any when it reads
// actions whole.
func (c *actionChanges) read(room Room, src string) bool {
	f := defs.FactsOf(src)
	if f.AllActions && (c.defs || len(c.ids) > 0) {
		return true
	}
	for _, id := range f.Actions {
		if c.ids[id] {
			return true
		}
		if c.defs && !live(room, id) {
			return true
		}
	}
	return false
}

// hasView reports whether room defines the view id.
func hasView(room Room, id string) bool {
	for v := range room.Views() {
		if v.Def.ID == id {
			return true
		}
	}
	return false
}

// live reports whether room defines the action id.
func live(room Room, id string) bool {
	_, ok := room.Action(id)
	return ok
}

// availabilityMayHaveChanged reports whether an action's availability
// beyond its enablement may have changed after from: its if (which may
// read views and actions) or its cooldown (set by an invocation, ended by
// its timer).
func (q *since) availabilityMayHaveChanged(a Action, acts *actionChanges, views map[string]bool) bool {
	if gateMayHaveOpened(a.Def.If, []string{q.self, defs.SelfOf(a.Def.Scope)}, q.from, q.newest) || readsView(a.Def.If, views) || acts.read(q.room, a.Def.If) {
		return true
	}
	cd, ok := q.room.Entry(ScopeCooldowns, a.Def.ID)
	if ok && (cd.Revision > q.from || q.ranOut(cd)) {
		return true
	}
	// A cooldown's entry deleted since (its timer ran out and the janitor
	// purged it): the scope's mark says so, not which action's.
	return !ok && (q.newest[ScopeCooldowns] > q.from || q.newest[anyScope] > q.from) && a.Def.OnInvoke != nil
}

// viewsChanged are the views whose definition, or a state entry, view or
// action they read, may have changed after from.
func (q *since) viewsChanged(acts *actionChanges) map[string]bool {
	changed := map[string]bool{}
	from, newest := q.from, q.newest
	for v := range q.room.Views() {
		self := defs.SelfOf(v.Def.Scope)
		// The gate reads the view's registrar's state (state.self is its
		// scope) with the reader as self, and may read views.
		if v.Row.Revision > from || newest[ScopeViews] > from && v.Row.Timer != nil || readsAnyTime(v.Def.Expr) || readsChangedScope(v.Def.Expr, self, from, newest) ||
			acts.read(q.room, v.Def.Expr) || acts.read(q.room, v.Def.Enabled) ||
			gateMayHaveOpened(v.Def.Enabled, []string{self}, from, newest) || readsView(v.Def.Enabled, changed) {
			changed[v.Def.ID] = true
		}
		for _, id := range defs.FactsOf(v.Def.Expr).Views {
			// A view read that is gone may have been deleted since.
			if changed[id] || !hasView(q.room, id) && newest[ScopeViews] > from {
				changed[v.Def.ID] = true
			}
		}
	}
	return changed
}

// ViewsUnseen are the views of room that may have changed after from
// with no newer revision of what they read by path (which a reader
// checks itself, key by key): they read now, agents, messages or state
// whole, or a scope they read lost an entry since (a deletion, a timer
// run out), or they read an action whose enablement may have changed (by
// anything its gate reads, a timer, a registration or a deletion: not a
// path the reader checks). The rule of a wait's delta (viewsChanged),
// for a reader (self) reading at now.
func ViewsUnseen(room Room, self string, now time.Time, from int64, unseen *Unseen) map[string]bool {
	q := &since{room: room, self: self, now: now, from: from, unseen: unseen}
	marks := map[string]int64{}
	q.markUnseen(marks)
	var acts *actionChanges
	out := map[string]bool{}
	for v := range room.Views() {
		self := defs.SelfOf(v.Def.Scope)
		if readsAnyTime(v.Def.Expr) || readsChangedScope(v.Def.Expr, self, from, marks) || gateMayHaveOpened(v.Def.Enabled, []string{self}, from, marks) {
			out[v.Def.ID] = true
			continue
		}
		if readsActions(v.Def.Expr) || readsActions(v.Def.Enabled) {
			if acts == nil {
				// Once, and only for a room with such a view: the action
				// gates need every scope's newest revision.
				acts = newSince(room, q.self, now, from, unseen).actionsChanged()
			}
			if acts.read(room, v.Def.Expr) || acts.read(room, v.Def.Enabled) {
				out[v.Def.ID] = true
			}
		}
	}
	return out
}

// readsView reports whether src reads (by name) one of the views in set.
func readsView(src string, set map[string]bool) bool {
	for _, id := range defs.FactsOf(src).Views {
		if set[id] {
			return true
		}
	}
	return false
}

// readsChangedScope reports whether src reads a scope with an entry
// changed after seq (a view reading one key of a scope is reported when
// another changed: a delta may show a view that did not change, never
// miss one that did). self is the scope src reads as state.self: a
// view's registrar's, not the reader's.
func readsChangedScope(src, self string, after int64, newest map[string]int64) bool {
	for _, scope := range defs.FactsOf(src).Scopes {
		if scope == defs.ScopeSelf {
			if scope = self; scope == "" {
				continue
			}
		}
		if newest[scope] > after || newest[anyScope] > after {
			return true
		}
	}
	return false
}

// gateMayHaveOpened reports whether an enabled expression ("" for none)
// may have changed its answer since seq after: it reads now, agents or
// state by a computed name, or a scope (state.self as each of selves)
// that changed since.
func gateMayHaveOpened(src string, selves []string, after int64, newest map[string]int64) bool {
	if src == "" {
		return false
	}
	if readsAnyTime(src) {
		return true
	}
	for _, self := range selves {
		if readsChangedScope(src, self, after, newest) {
			return true
		}
	}
	return false
}

// readsAnyTime reports whether src reads something that changes without
// a write to a scope it names: gateReadsAnyTime, or state whole (passed
// along, or iterated by a macro such as state.exists).
func readsAnyTime(src string) bool { return defs.FactsOf(src).AnyTime }

// readsActions reports whether src reads actions at all.
func readsActions(src string) bool {
	f := defs.FactsOf(src)
	return f.AllActions || len(f.Actions) > 0
}
