package substrate

// What the core asks adaptive salience (seed 000 §VII), which lives in
// substrate/salience and is wired into a Service as a Feature (its
// Salience), and the read it gets to answer with. The core keeps what
// salience reads from rows: the vocabulary's usage (written by the write
// path) and the recent log; the _attention salience fills, which the
// budget shrinks, is the envelope's (envelope.Attention).
//
// Read hands salience the reader's room as the envelope shows it, and
// nothing the reader may not see: the actions its list shows, the views
// it is shown, the entries of its state, the usage of those. The read
// rule is applied here, once, by the envelope's own answers (actEnabled,
// the views shown, the state and visibility the read built), so salience
// has no read rule of its own. Two things are the room's as a whole, for
// the work salience shares between readers: Keys (the _shared keys
// patterns match) and RecentLog's audit rows; what salience finds in
// them it tells a reader only through EachShown and ActionEnabled.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/syncsubstrate/sync/substrate/defs"
)

// Salience is what the core asks adaptive salience.
type Salience interface {
	// Decay is the room's decay of a usage score per context read, from
	// the value of _shared._config (nil when absent): the write path
	// records a use with it.
	Decay(config json.RawMessage) float64
	// Begin gathers one context read's salience, nil when the room turns
	// it off. An error fails the read.
	Begin(ctx context.Context, r *Read) (SalienceRead, error)
}

// SalienceRead is salience for one context read.
type SalienceRead interface {
	// FirstReadFull reports a reader whose first read of the room goes at
	// depth full.
	FirstReadFull() bool
	// Annotate adds salience to the assembled envelope: the
	// _vocabulary_health view, _context._attention and the actions' marks.
	Annotate(ctx context.Context, env *Envelope, req ContextRequest)
	// YouElided are the sections among elided that changed since the
	// reader's last read.
	YouElided(since *SinceLastRead, elided []string) []string
	// Health is the _vocabulary_health view's value.
	Health(ctx context.Context) any
}

// defaultDecay is the usage decay when no feature is salience.
const defaultDecay = 0.95

// decayOf is the room's usage decay, for the write path.
func (s *Service) decayOf(snap *snapshot) float64 {
	if s.wired.salience == nil {
		return defaultDecay
	}
	return s.wired.salience.Decay(snap.config())
}

// config is the value of _shared._config, nil when absent.
func (snap *snapshot) config() json.RawMessage {
	if r := snap.scopes[ScopeShared]["_config"]; r != nil {
		return r.Value
	}
	return nil
}

// salienceFor begins the read's salience: nil when no feature is
// salience or it is off for the service or the room.
func (s *Service) salienceFor(ctx context.Context, rc *roomCtx, roomID string) (SalienceRead, error) {
	if s.noSalience || s.wired.salience == nil {
		return nil, nil
	}
	return s.wired.salience.Begin(ctx, &Read{s: s, rc: rc, room: roomID})
}

// Read is one context read as salience sees it: the reader's room at the
// read's seq, what it was shown, and the room's metadata salience needs.
// Everything it returns is shared with the read: read-only.
type Read struct {
	s    *Service
	rc   *roomCtx
	room string
}

// Room is the room's id; Seq the read's seq; Now its time; Self the
// reader's agent id ("" for a caller without an agent).
func (r *Read) Room() string   { return r.room }
func (r *Read) Seq() int64     { return r.rc.snap.seq }
func (r *Read) Now() time.Time { return r.rc.now }
func (r *Read) Self() string   { return r.rc.self }

// Config is the value of _shared._config (nil when absent), whoever may
// read it: the room's configuration, which salience applies and never
// shows.
func (r *Read) Config() json.RawMessage { return r.rc.snap.config() }

// ReaderMarks are an agent's context reads so far.
type ReaderMarks struct {
	ContextReads, LastContextSeq int64
}

// Reads are the room's context reads so far (every agent's) and the
// reader's own marks (nil for a caller without an agent).
func (r *Read) Reads() (room int64, self *ReaderMarks) {
	for _, a := range r.rc.agents {
		room += a.ContextReads
		if a.ID == r.rc.self {
			self = &ReaderMarks{ContextReads: a.ContextReads, LastContextSeq: a.LastContextSeq}
		}
	}
	return room, self
}

// ActionMeta is a custom action's definition and when it was registered.
type ActionMeta struct {
	Def       *ActionDef
	Revision  int64
	UpdatedAt time.Time
}

// Action is a custom action the reader's action list shows (ShownActions);
// false for any other, hidden or not live.
func (r *Read) Action(id string) (ActionMeta, bool) {
	a := r.rc.snap.actions[id]
	if a == nil || !r.rc.actEnabled[id] {
		return ActionMeta{}, false
	}
	return ActionMeta{Def: a.def, Revision: a.r.Revision, UpdatedAt: a.r.UpdatedAt}, true
}

// ShownActions are the custom actions (not builtins) the reader's action
// list shows: live, and enabled for it; sorted. What salience tells a
// reader about the vocabulary is computed from these only: counting an
// action hidden from the reader (its enabled, its timer) would tell the
// reader it exists.
func (r *Read) ShownActions() []string {
	var out []string
	for id, on := range r.rc.actEnabled {
		if on {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// ActionEnabled reports an action the reader's enabled shows it.
func (r *Read) ActionEnabled(id string) bool { return r.rc.actEnabled[id] }

// ViewMeta is a view's definition and revision.
type ViewMeta struct {
	Def      *ViewDef
	Revision int64
}

// ViewDefs are the views the reader was shown (those in Views), in
// dependency order.
func (r *Read) ViewDefs() []ViewMeta {
	out := make([]ViewMeta, 0, len(r.rc.snap.views))
	for _, v := range r.rc.snap.views {
		if _, shown := r.rc.views[v.def.ID]; shown {
			out = append(out, ViewMeta{Def: v.def, Revision: v.r.Revision})
		}
	}
	return out
}

// Views are the values of the views the reader was shown (system views
// included): id → value, {"_error": …} for a failing one.
func (r *Read) Views() map[string]any { return r.rc.views }

// Revision is the revision of a mutable entry in the state the reader's
// expressions compute with (Computes); false for any other.
func (r *Read) Revision(scope, key string) (int64, bool) {
	if !r.Computes(scope, key) {
		return 0, false
	}
	if row := r.rc.snap.scopes[scope][key]; row != nil {
		return row.Revision, true
	}
	return 0, false
}

// ViewSelfRevision is the revision of key in the scope a view the reader
// is shown reads as state.self (its registrar's, ViewSelf): the view
// computes with that scope on the registrar's authority, so its entries'
// changes are the view's, which the reader sees; false for a view not
// shown, a communal one, or an absent entry.
func (r *Read) ViewSelfRevision(def *ViewDef, key string) (int64, bool) {
	self := viewSelf(def)
	if _, shown := r.rc.views[def.ID]; !shown || self == "" {
		return 0, false
	}
	if row := r.rc.snap.scopes[self][key]; row != nil {
		return row.Revision, true
	}
	return 0, false
}

// Computes reports an entry in the state the reader's expressions (and
// the communal views it is shown) compute with: one its gate hides from
// the reader is not, and neither is one of a scope it may not read.
func (r *Read) Computes(scope, key string) bool {
	m, _ := r.rc.state[scope].(map[string]any)
	_, ok := m[key]
	return ok
}

// ScopeChangedAfter reports a mutable entry of scope the reader was shown
// written after seq (one gated from it, or kept from it by a read rule,
// is not its news: counting it would tell it the entry was written).
func (r *Read) ScopeChangedAfter(scope string, seq int64) bool {
	changed := false
	r.EachShown(func(sc string) bool { return sc == scope }, func(_, _ string, revision int64) {
		changed = changed || revision > seq
	})
	return changed
}

// Keys are a scope's mutable keys, whoever may read them, unordered: the
// room's, for a computation salience shares between readers (the
// patterns it matches messages with), whose findings it tells a reader
// only about entries EachShown gives that reader.
func (r *Read) Keys(scope string) []string {
	out := make([]string, 0, len(r.rc.snap.scopes[scope]))
	for k := range r.rc.snap.scopes[scope] {
		out = append(out, k)
	}
	return out
}

// EachShown calls f for every mutable entry the reader was shown (its
// scope visible, the entry in its state and readable to it one by one)
// whose scope keep accepts.
func (r *Read) EachShown(keep func(scope string) bool, f func(scope, key string, revision int64)) {
	for scope, rows := range r.rc.snap.scopes {
		if !keep(scope) || !r.rc.visible(scope) {
			continue
		}
		seen, _ := r.rc.state[scope].(map[string]any)
		for key, row := range rows {
			// The state expressions compute with may hold entries the
			// read rule does not show the principal (readableState).
			if _, ok := seen[key]; ok && (r.rc.p == nil || r.rc.vis.Entry(scope, key)) {
				f(scope, key, row.Revision)
			}
		}
	}
}

// Value is the value of an entry EachShown gave the reader (nil for
// another).
func (r *Read) Value(scope, key string) any {
	m, _ := r.rc.state[scope].(map[string]any)
	return m[key]
}

// ViewOwner is the agent whose view def is, to fix when it breaks: the
// agent of its scope, or the agent that registered a communal one; ""
// for a view registered with room authority (the room's own).
func ViewOwner(def *ViewDef) string { return defs.RegistrarOf(def.Scope, def.RegisteredBy) }

// Expand words the context read with args for the reader.
func (r *Read) Expand(args map[string]any) string { return expand(r.rc, r.room, args) }

// Memo is a value computed once per room snapshot (it changes only with
// the seq) under key, shared by every read of that snapshot.
func (r *Read) Memo(key string, f func() any) any {
	snap := r.rc.snap
	snap.memoMu.Lock()
	if snap.memo == nil {
		snap.memo = map[string]*memoEntry{}
	}
	e := snap.memo[key]
	if e == nil {
		e = &memoEntry{}
		snap.memo[key] = e
	}
	snap.memoMu.Unlock()
	e.once.Do(func() { e.v = f() })
	return e.v
}

type memoEntry struct {
	once sync.Once
	v    any
}

// Usage is an action's or view's row of the vocabulary's usage.
type Usage struct {
	Uses        int64
	LastUsedSeq int64
	Score       float64
	ReadsAtUse  int64
}

// UsageKey names an item of the vocabulary in Read.Usage.
func UsageKey(kind, id string) string { return kind + ":" + id }

// loadUsage reads the vocabulary's usage into the snapshot, once, with q:
// the read transaction that read the snapshot's seq, so the usage is the
// one at that seq (a mutation updates it in its own commit). Read after
// that transaction, it held uses committed since.
func (snap *snapshot) loadUsage(ctx context.Context, q querier) error {
	snap.usageMu.Lock()
	defer snap.usageMu.Unlock()
	if snap.usage != nil {
		return nil
	}
	u, err := loadUsage(ctx, q, snap.room)
	if err != nil {
		return err
	}
	snap.usage = u
	return nil
}

// Usage is the vocabulary usage at the read's seq of the actions the
// reader's list shows and the views it is shown (UsageKey: the usage of
// an action hidden from it would say the action is there and used), from
// the room's, read once per snapshot by the transaction that read
// the seq (snapshot.loadUsage): readRoom loads it on its long path and
// takes a cached snapshot only with it (readReady), and every Read is
// made from a readRoom's snapshot (Context, Wait, ListViews). A snapshot
// without it did not come from there (one a mutation advanced, say):
// loading it now could hold uses committed after the read's seq (an
// invocation named by since_your_last_read whose effects the read does
// not show), so that is an error, not a late load.
func (r *Read) Usage(ctx context.Context) (map[string]*Usage, error) {
	snap := r.rc.snap
	snap.usageMu.Lock()
	defer snap.usageMu.Unlock()
	if snap.usage == nil {
		return nil, fmt.Errorf("substrate: the vocabulary usage of room %q at seq %d was not read with the snapshot (a read must come from readRoom)", r.room, snap.seq)
	}
	out := make(map[string]*Usage, len(r.rc.actEnabled)+len(r.rc.views))
	for id, on := range r.rc.actEnabled {
		if u := snap.usage[UsageKey("action", id)]; on && u != nil {
			out[UsageKey("action", id)] = u
		}
	}
	for id := range r.rc.views {
		if u := snap.usage[UsageKey("view", id)]; u != nil {
			out[UsageKey("view", id)] = u
		}
	}
	return out, nil
}

// LogRow is an entry of the room's recent log.
type LogRow struct {
	Scope string // _messages or _audit
	Seq   int64
	// Value holds the fields of the entry's value that pattern detection
	// reads, null when absent: a message's kind, body and subject, an
	// audit entry's kind, ok, builtin and action.
	Value  []byte
	Writer string
}

// windowSize is how many recent entries of each log RecentLog reads.
const windowSize = 500

// RecentLog is the newest 500 entries of each of the room's logs
// (_messages, _audit) up to the read's seq, unordered. The messages are
// those the reader sees, as its messages section and messages.count
// count them: a message whose timer ended (or has not started) at the
// read's time, or whose enabled gate hides it from the reader, is not
// among them. Reads with the same LogKey get the same rows. A read that
// fails midway returns what it read with the error.
func (r *Read) RecentLog(ctx context.Context) ([]LogRow, error) {
	unseen := r.rc.msgs.unseen
	if unseen == nil {
		unseen = []int64{}
	}
	rows, err := r.s.db.Query(ctx, sqlLogWindow, r.room, windowSize, r.rc.snap.seq, unseen)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []LogRow
	for rows.Next() {
		var e LogRow
		if err := rows.Scan(&e.Scope, &e.Seq, &e.Value, &e.Writer); err != nil {
			return out, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// LogKey names, within the read's snapshot, the messages RecentLog gives
// this read: "" when the reader sees every message up to the read's seq
// (the usual room, which has no gated or timed messages); else a digest
// of those it does not see (a timer's end, or another reader's gates,
// give another key).
func (r *Read) LogKey() string {
	unseen := r.rc.msgs.unseen
	if len(unseen) == 0 {
		return ""
	}
	h := sha256.New()
	var b [binary.MaxVarintLen64]byte
	for _, seq := range unseen {
		h.Write(b[:binary.PutVarint(b[:], seq)])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Warn logs a feature's problem with the read (advice that could not be
// given is not a reason to fail it).
func (r *Read) Warn(msg string, args ...any) {
	r.s.log.Warn(msg, append([]any{"room", r.room}, args...)...)
}

// loadUsage reads the room's vocabulary usage.
func loadUsage(ctx context.Context, q querier, roomID string) (map[string]*Usage, error) {
	rows, err := q.Query(ctx, sqlUsage, roomID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]*Usage{}
	for rows.Next() {
		var kind, id string
		var u Usage
		var last *int64
		if err := rows.Scan(&kind, &id, &u.Uses, &last, &u.Score, &u.ReadsAtUse); err != nil {
			return nil, err
		}
		if last != nil {
			u.LastUsedSeq = *last
		}
		out[UsageKey(kind, id)] = &u
	}
	return out, rows.Err()
}

// vocabTouch records, in a mutation, that an action or view was used
// (invoked, or read by an invoked action's expressions) or registered.
type vocabTouch struct {
	kind, id string
	use      bool
}

// touchVocabulary queues the mutation's vocabulary uses at seq: uses and
// last use move for what was used; every touched item's score is decayed
// to now and reinforced by one. reads are the room's context reads as a
// read's salience counts them (mutation.roomReads): the reads at the use.
func (m *mutation) touchVocabulary(seq int64, decay float64, reads int64) {
	if len(m.vocab) == 0 {
		return
	}
	kinds := make([]string, len(m.vocab))
	ids := make([]string, len(m.vocab))
	uses := make([]bool, len(m.vocab))
	for i, t := range m.vocab {
		kinds[i], ids[i], uses[i] = t.kind, t.id, t.use
	}
	m.batch.Queue(sqlTouchVocabulary, m.room, kinds, ids, uses, seq, m.now, decay, reads)
}

// ViewRefs are the ids of the views src names (views.<id>, views["id"]),
// in order, repeats included. Shared between callers: read-only.
func ViewRefs(src string) []string { return defs.FactsOf(src).Views }

// StatePaths are the state entries src names by path (state.<scope>.<key>,
// .?key or ["key"]): scope and key, in order. Shared between callers:
// read-only.
func StatePaths(src string) [][2]string { return defs.FactsOf(src).Paths }

// ViewSelf is the scope a view reads as state.self ("" for a communal
// one).
func ViewSelf(def *ViewDef) string { return viewSelf(def) }

// viewsReadBy are the ids of the views the action's expressions read.
func viewsReadBy(def *ActionDef) []string {
	srcs := []string{def.If, def.Enabled, def.Result}
	for _, w := range def.Writes {
		if w.Expr {
			raw, _ := json.Marshal(w.Value)
			srcs = append(srcs, string(raw))
			raw, _ = json.Marshal(w.Merge)
			srcs = append(srcs, string(raw))
		}
	}
	seen := map[string]bool{}
	var out []string
	for _, src := range srcs {
		for _, id := range ViewRefs(src) {
			if !seen[id] && id != viewContested && id != ViewHealth {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	return out
}
