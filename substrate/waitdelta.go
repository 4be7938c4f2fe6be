package substrate

import (
	"context"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// A delta is a context of changes: what a reader who has read the room up
// to FromSeq has not seen yet. A wait's wake-up answers with one by
// default, so that waiting in a loop costs what changed, not the room
// again each time (a room of 500 tasks is ~10,000 tokens whole, and a
// change to one task ~200).

// deltaOf narrows env to what changed after from: state entries written
// since (and those that may have become visible unwritten), the messages
// after it (the read asked for those), the views whose value or gate may
// have changed and the actions (re)defined or possibly enabled since. Agents are
// left out (their presence is in _attention and a full read); _attention
// stays whole.
func deltaOf(env *Envelope, rc *roomCtx, roomID string, from, msgsAfter int64, limit int, unseen *unseenChanges) {
	d := &ChangesSince{FromSeq: from, Changed: map[string]int64{}}
	newest := scopeRevisions(rc)
	unseen.apply(rc, from, newest)
	deltaState(env, rc, d, from, newest)
	deltaDefs(env, rc, from, newest, unseen)
	env.Builtins = ""
	env.Agents = nil
	env.Params = nil
	if m := env.Messages; m != nil {
		deltaMessages(m, rc, d, roomID, msgsAfter, limit)
	}
	env.Context.MessagesTruncated = nil
	env.About = nil // a delta is what changed; the room's purpose did not
	env.Context.Help = nil
	d.Full = rc.p.Say(errs.Step{Op: errs.OpReadContext, Room: roomID})
	env.Context.Delta = d
	var secs []string
	for _, s := range env.Context.Sections {
		if s != "agents" {
			secs = append(secs, s)
		}
	}
	env.Context.Sections = secs
	env.Context.Expand = nil
	env.Context.Elided = nil
}

// deltaState keeps of env's state the entries changed after from, or
// that may have become visible since unwritten (mayAppear), listing each
// in d.Changed.
func deltaState(env *Envelope, rc *roomCtx, d *ChangesSince, from int64, newest map[string]int64) {
	for scope, v := range env.State {
		name := scope
		if scope == ScopeSelf {
			name = rc.self
		}
		rows := rc.snap.scopes[name]
		entries, ok := envelope.ScopeEntries(v)
		if !ok {
			delete(env.State, scope)
			continue
		}
		for k := range entries {
			r := rows[k]
			if r == nil || r.Revision <= from && !mayAppear(r.row, rc.self, from, newest) {
				delete(entries, k)
				continue
			}
			d.Changed[scope+"."+k] = r.Revision
		}
		if len(entries) == 0 {
			delete(env.State, scope)
			continue
		}
		env.State[scope] = entries
	}
}

// deltaDefs keeps of env's views and actions those whose value, gate or
// availability may have changed after from.
func deltaDefs(env *Envelope, rc *roomCtx, from int64, newest map[string]int64, unseen *unseenChanges) {
	acts := actionsChangedSince(rc, from, newest, unseen)
	changed := viewsChangedSince(rc, from, newest, acts)
	for id := range env.Views {
		if !changed[id] {
			delete(env.Views, id)
		}
	}
	for id := range env.Actions {
		if a := rc.snap.actions[id]; a == nil || !acts.ids[id] && !readsView(a.def.Enabled, changed) && !availabilityMayHaveChanged(rc, a, from, newest, unseen, acts, changed) {
			delete(env.Actions, id)
		}
	}
	if len(env.Actions) == 0 {
		env.Actions = nil
	}
	if len(env.Views) == 0 {
		env.Views = nil
	}
}

// deltaMessages narrows m to the news: the reader's own messages are not
// news; of the others, those addressed to it (oldest first: they are a
// queue, and each wake-up moves on through it) and then the newest, limit
// in all. The delta counts the older ones and says how to read them.
func deltaMessages(m *Messages, rc *roomCtx, d *ChangesSince, roomID string, msgsAfter int64, limit int) {
	m.Elided = nil
	var others []map[string]any
	for _, msg := range m.Recent {
		if rc.self == "" || msg["from"] != rc.self {
			others = append(others, msg)
		}
	}
	if len(others) > limit {
		keep := envelope.KeptMessages(others, rc.self, limit)
		var kept []map[string]any
		for i, msg := range others {
			if keep[i] {
				kept = append(kept, msg)
			}
		}
		d.OlderMessages = len(others) - len(kept)
		d.More = rc.p.Say(errs.Step{Op: errs.OpReadContext, Room: roomID, Args: map[string]any{"only": "messages", "messages_after": msgsAfter}})
		// What the delta read counts as read (the older messages it
		// left out are counted here, with the read that returns them),
		// except from the oldest message addressed to the reader that
		// it left out: that one stays unread, and the next wake-up
		// shows it. Marking nothing read instead left directed_unread
		// as it was, so a wait on it woke again at once, forever.
		for i, msg := range others {
			if !keep[i] && envelope.AddressedTo(msg, rc.self) {
				seq, _ := msg["seq"].(int64)
				rc.readUpTo = min(rc.readUpTo, seq-1)
				break
			}
		}
		others = kept
	}
	// Messages to the reader come first in a wake-up: they are what
	// it waited for, whatever else arrived.
	ordered := make([]map[string]any, 0, len(others))
	for _, to := range []bool{true, false} {
		for _, msg := range others {
			if envelope.AddressedTo(msg, rc.self) == to {
				ordered = append(ordered, msg)
			}
		}
	}
	m.Recent = ordered
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

// actionsChangedSince are the actions whose enablement may have changed
// after from (newest and unseen as deltaOf has them).
func actionsChangedSince(rc *roomCtx, from int64, newest map[string]int64, unseen *unseenChanges) *actionChanges {
	c := &actionChanges{ids: map[string]bool{}, defs: newest[scopeActions] > from || newest[anyScope] > from}
	for id, a := range rc.snap.actions {
		// The gate reads its registrar's state, and the reader's own as
		// self (actionVars).
		if a.r.Revision > from || gateMayHaveOpened(a.def.Enabled, []string{rc.self, defs.SelfOf(a.def.Scope)}, from, newest) || unseen.ranOut(rc, a.r, from) {
			c.ids[id] = true
		}
	}
	// A gate may read other actions' enablement: until nothing is added.
	for more := true; more; {
		more = false
		for id, a := range rc.snap.actions {
			if !c.ids[id] && c.read(rc, a.def.Enabled) {
				c.ids[id], more = true, true
			}
		}
	}
	return c
}

// read reports whether src reads an action that may have changed: one it
// names that changed or may have been deleted, or any when it reads
// actions whole.
func (c *actionChanges) read(rc *roomCtx, src string) bool {
	f := defs.FactsOf(src)
	if f.AllActions && (c.defs || len(c.ids) > 0) {
		return true
	}
	for _, id := range f.Actions {
		if c.ids[id] || c.defs && rc.snap.actions[id] == nil {
			return true
		}
	}
	return false
}

// availabilityMayHaveChanged reports whether an action's availability
// beyond its enablement may have changed after from: its if (which may
// read views and actions) or its cooldown (set by an invocation, ended by
// its timer).
func availabilityMayHaveChanged(rc *roomCtx, a *actionRec, from int64, newest map[string]int64, unseen *unseenChanges, acts *actionChanges, views map[string]bool) bool {
	if gateMayHaveOpened(a.def.If, []string{rc.self, defs.SelfOf(a.def.Scope)}, from, newest) || readsView(a.def.If, views) || acts.read(rc, a.def.If) {
		return true
	}
	if cd := rc.snap.scopes[scopeCooldowns][a.def.ID]; cd != nil && (cd.Revision > from || unseen.ranOut(rc, cd.row, from)) {
		return true
	}
	// A cooldown's entry deleted since (its timer ran out and the janitor
	// purged it): the scope's mark says so, not which action's.
	return rc.snap.scopes[scopeCooldowns][a.def.ID] == nil && (newest[scopeCooldowns] > from || newest[anyScope] > from) && a.def.OnInvoke != nil
}

// viewsChangedSince are the views whose definition, or a state entry,
// view or action they read, may have changed after seq.
func viewsChangedSince(rc *roomCtx, seq int64, newest map[string]int64, acts *actionChanges) map[string]bool {
	changed := map[string]bool{}
	for _, v := range rc.snap.views { // in dependency order
		self := viewSelf(v.def)
		// The gate reads the view's registrar's state (state.self is its
		// scope) with the reader as self, and may read views.
		if v.r.Revision > seq || newest[scopeViews] > seq && v.r.timer != nil || readsAnyTime(v.def.Expr) || readsChangedScope(v.def.Expr, self, seq, newest) ||
			acts.read(rc, v.def.Expr) || acts.read(rc, v.def.Enabled) ||
			gateMayHaveOpened(v.def.Enabled, []string{self}, seq, newest) || readsView(v.def.Enabled, changed) {
			changed[v.def.ID] = true
		}
		for _, id := range defs.FactsOf(v.def.Expr).Views {
			// A view read that is gone may have been deleted since.
			if changed[id] || !rc.snap.hasView(id) && newest[scopeViews] > seq {
				changed[v.def.ID] = true
			}
		}
	}
	return changed
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
		if scope == ScopeSelf {
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

// scopeRevisions is each scope's newest revision (one pass over the
// snapshot, not one per view).
func scopeRevisions(rc *roomCtx) map[string]int64 {
	out := make(map[string]int64, len(rc.snap.scopes))
	for scope, rows := range rc.snap.scopes {
		for _, r := range rows {
			out[scope] = max(out[scope], r.Revision)
		}
	}
	return out
}

// viewSelf is the scope a view reads as state.self: its registrar's
// agent scope (evalView), none for a communal one.
func viewSelf(def *ViewDef) string { return defs.SelfOf(def.Scope) }

// mayAppear reports an entry that may have become visible since seq
// after without being written: one whose enabled gate reads something
// that changed since (or now, agents, or state by a computed name: it
// may have opened at any time), or one with an enable timer (it may have
// run out since). A delta shows such entries while the reader sees them,
// whatever their revision: it may show one the reader had seen, never
// miss one it had not.
func mayAppear(r *row, self string, after int64, newest map[string]int64) bool {
	if r.timer != nil && r.timer.Effect != nil && *r.timer.Effect == "enable" {
		return true
	}
	if r.enabled == nil {
		return false
	}
	return gateMayHaveOpened(*r.enabled, []string{self}, after, newest)
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

// anyScope in a scopeRevisions map stands for every scope: the delta
// cannot tell which changed.
const anyScope = "*"

// unseenChanges are the changes since a delta's seq that leave no newer
// revision in the snapshot: deletions (the room keeps no tombstones; the
// audit log records them) and timers that ran out.
type unseenChanges struct {
	// known: the audit log still holds every mutation after the seq
	// (the janitor archives the oldest first); otherwise any scope may
	// have lost an entry.
	known bool
	// at is when the seq was the room's newest: a clock timer that ran
	// out after it changed what its scope shows.
	at time.Time
	// deleted are the scopes with an entry deleted since.
	deleted []string
}

// maxUnseenScan bounds the audit entries a read decodes to find the
// deletions since a seq (one statement, at most this many entries).
const maxUnseenScan = 1000

// sqlUnseen reads what unseenChanges holds from the audit log, up to the
// read's seq.
const sqlUnseen = `SELECT
	(SELECT updated_at FROM state WHERE room_id = $1 AND scope = '_audit' AND sort_key IS NOT NULL AND sort_key <= $2
		ORDER BY sort_key DESC LIMIT 1),
	coalesce((SELECT array_agg(DISTINCT d->>'scope') FROM state a,
		jsonb_array_elements(CASE jsonb_typeof(a.value->'delta') WHEN 'array' THEN a.value->'delta' ELSE '[]' END) d
		WHERE a.room_id = $1 AND a.scope = '_audit' AND a.sort_key > $2 AND a.sort_key <= $3 AND NOT d ? 'after'), '{}')`

// apply marks in newest the scopes that changed after from unseen by
// their revisions.
func (u *unseenChanges) apply(rc *roomCtx, from int64, newest map[string]int64) {
	if u == nil || !u.known {
		newest[anyScope] = from + 1
		return
	}
	for _, scope := range u.deleted {
		newest[scope] = max(newest[scope], from+1)
	}
	for _, t := range rc.snap.timedRows() {
		if u.ranOut(rc, t.r, from) {
			newest[t.scope] = max(newest[t.scope], from+1)
		}
	}
}

// ranOut reports whether r's timer may have changed its visibility after
// from (always, when what happened since is not known).
func (u *unseenChanges) ranOut(rc *roomCtx, r *row, from int64) bool {
	t := r.timer
	if t == nil || t.Effect == nil {
		return false
	}
	if u == nil || !u.known {
		return true
	}
	clock := t.ExpiresAt != nil && t.ExpiresAt.After(u.at) && !t.ExpiresAt.After(rc.now)
	// Ticks run down with writes to tick_on, not with a revision of the
	// entry itself.
	ticked := t.TicksLeft != nil && *t.TicksLeft <= 0 && t.TickOn != nil && tickedSince(rc, *t.TickOn, from)
	return clock || ticked
}

// tickedSince reports whether the entry a tick timer counts (scope.key)
// was written after from (any entry of its scope, when the name is
// ambiguous).
func tickedSince(rc *roomCtx, on string, from int64) bool {
	for scope, rows := range rc.snap.scopes {
		key, ok := strings.CutPrefix(on, scope+".")
		if !ok {
			continue
		}
		if r := rows[key]; r != nil && r.Revision > from {
			return true
		}
	}
	return false
}

// hasView reports whether the snapshot defines the view id.
func (snap *snapshot) hasView(id string) bool {
	for _, v := range snap.views {
		if v.def.ID == id {
			return true
		}
	}
	return false
}

// unseenSince reads from the audit log what changed after from that the
// snapshot's revisions do not show (unseenChanges).
func (s *Service) unseenSince(ctx context.Context, roomID string, from, upTo int64) (*unseenChanges, error) {
	var at *time.Time
	u := &unseenChanges{}
	if upTo-from > maxUnseenScan {
		return u, nil // not known: a reader that far behind is told every scope may have changed
	}
	if err := s.db.QueryRow(ctx, sqlUnseen, roomID, from, upTo).Scan(&at, &u.deleted); err != nil {
		return nil, err
	}
	if at != nil {
		u.known, u.at = true, *at
	}
	return u, nil
}

// ViewsChangedUnseen are the views (of ViewDefs) that may have changed
// after from with no newer revision of what they read by path (which a
// reader checks itself, key by key): they read now, agents, messages or
// state whole, or a scope they read lost an entry since (a deletion, a
// timer run out), or they read an action whose enablement may have
// changed (by anything its gate reads, a timer, a registration or a
// deletion: not a path the reader checks). The rule of a wait's delta
// (viewsChangedSince).
func (r *Read) ViewsChangedUnseen(ctx context.Context, from int64) map[string]bool {
	unseen, err := r.s.unseenAt(ctx, r.rc.snap, from)
	if err != nil {
		r.s.log.Warn("reading the deletions since a reader's last read", "room", r.room, "err", err)
		unseen = nil // unknown: every scope may have changed
	}
	marks := map[string]int64{}
	unseen.apply(r.rc, from, marks)
	var acts *actionChanges
	out := map[string]bool{}
	for _, v := range r.rc.snap.views {
		self := viewSelf(v.def)
		if readsAnyTime(v.def.Expr) || readsChangedScope(v.def.Expr, self, from, marks) || gateMayHaveOpened(v.def.Enabled, []string{self}, from, marks) {
			out[v.def.ID] = true
			continue
		}
		if readsActions(v.def.Expr) || readsActions(v.def.Enabled) {
			if acts == nil {
				// Once, and only for a room with such a view: the action
				// gates need every scope's newest revision.
				newest := scopeRevisions(r.rc)
				unseen.apply(r.rc, from, newest)
				acts = actionsChangedSince(r.rc, from, newest, unseen)
			}
			if acts.read(r.rc, v.def.Expr) || acts.read(r.rc, v.def.Enabled) {
				out[v.def.ID] = true
			}
		}
	}
	return out
}

// readsActions reports whether src reads actions at all.
func readsActions(src string) bool {
	f := defs.FactsOf(src)
	return f.AllActions || len(f.Actions) > 0
}

// maxUnseenMemo bounds the unseenChanges a snapshot keeps (one per
// distinct "since" its readers asked about).
const maxUnseenMemo = 64

// unseenAt is unseenSince(from, snap.seq), read once per snapshot and
// from: what the audit log holds up to the snapshot's seq does not change
// (a mutation makes a new snapshot), and every agent reading an unchanged
// room asks the same question, since its own last read (the snapshot's
// seq). An error is not kept.
func (s *Service) unseenAt(ctx context.Context, snap *snapshot, from int64) (*unseenChanges, error) {
	if u, ok := snap.unseen.Get(from); ok {
		return u, nil
	}
	u, err := s.unseenSince(ctx, snap.room, from, snap.seq)
	if err != nil {
		return nil, err
	}
	snap.unseen.Keep(from, u, maxUnseenMemo)
	return u, nil
}

// timedRows are the snapshot's mutable rows with a timer that has an
// effect (the only ones unseenChanges.ranOut can report), found once per
// snapshot: every agent's read asks, and most rooms have none among
// hundreds of rows.
func (snap *snapshot) timedRows() []scopedRow {
	snap.timedOnce.Do(func() {
		for scope, rows := range snap.scopes {
			for _, r := range rows {
				if r.timer != nil && r.timer.Effect != nil {
					snap.timed = append(snap.timed, scopedRow{scope, r.row})
				}
			}
		}
	})
	return snap.timed
}

// scopedRow is a row and the scope the snapshot holds it in.
type scopedRow struct {
	scope string
	r     *row
}
