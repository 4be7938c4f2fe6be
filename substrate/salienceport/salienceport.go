// Package salienceport is what the core asks adaptive salience (seed 000
// §VII, substrate/salience) and the read it hands salience to answer
// with: one context read as the reader was shown it.
//
// The core fills a Room from the read it built, with the read rule
// already applied: the actions its list shows, the views it is shown,
// the state its expressions compute with, and Readable, the rule that
// says which of those entries it may see one by one. This package adds
// no rule of its own and reads no row: it answers salience's questions
// from what it was handed, so a reader's salience can only tell it about
// what that reader's read showed. Two things are the room's as a whole,
// for the work salience shares between readers: Keys (the keys patterns
// match) and RecentLog's audit rows; what salience finds in them it
// tells a reader only through EachShown and ActionEnabled.
package salienceport

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"slices"
	"sort"
	"time"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/envelope"
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
	Annotate(ctx context.Context, env *envelope.Envelope[envelope.ActionView], req envelope.ContextRequest)
	// YouElided are the sections among elided that changed since the
	// reader's last read.
	YouElided(since *envelope.SinceLastRead, elided []string) []string
	// Health is the _vocabulary_health view's value.
	Health(ctx context.Context) any
}

// ActionMeta is a custom action's definition and when it was registered.
type ActionMeta struct {
	Def       *defs.ActionDef
	Revision  int64
	UpdatedAt time.Time
}

// ViewMeta is a view's definition and revision.
type ViewMeta struct {
	Def      *defs.ViewDef
	Revision int64
}

// ReaderMarks are an agent's context reads so far.
type ReaderMarks struct {
	ContextReads, LastContextSeq int64
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

// Room is what the core hands over of one context read. Every field is
// shared with the read: read-only.
type Room struct {
	ID   string
	Seq  int64
	Now  time.Time
	Self string // "" for a caller without an agent
	// Config is the value of _shared._config (nil when absent), whoever
	// may read it: the room's configuration, which salience applies and
	// never shows.
	Config json.RawMessage
	// Agents are the room's agents, for their context reads.
	Agents []envelope.Presence
	// Actions are the custom actions the reader's action list shows:
	// live, and enabled for it.
	Actions map[string]ActionMeta
	// Views are the values of the views the reader was shown (system
	// views included); ViewDefs those of them that are defined, in
	// dependency order.
	Views    map[string]any
	ViewDefs []ViewMeta
	// State is the state the reader's expressions compute with, by
	// scope: one gated from the reader is not in it, nor a scope it may
	// not read; Readable says which of its entries the read rule shows
	// the reader one by one.
	State    map[string]any
	Readable func(scope, key string) bool
	// Row is the revision of a mutable entry of the room, whoever may
	// read it; Keys the room's mutable keys of a scope, unordered.
	Row  func(scope, key string) (int64, bool)
	Keys func(scope string) []string
	// Unseen are the seqs of the messages up to Seq the reader does not
	// see (ascending; nil: it sees them all).
	Unseen []int64
	// Usage is the room's vocabulary usage at Seq (an error when the
	// read's snapshot was not read with it); RecentLog the room's recent
	// log as the reader sees its messages; Memo a value computed once per
	// snapshot; Say words the context read with args for the reader;
	// Warn logs a problem with the read.
	Usage     func() (map[string]*Usage, error)
	RecentLog func(ctx context.Context) ([]LogRow, error)
	// ViewsChangedUnseen are the views that may have changed after a seq
	// with no newer revision of what they read by path (the delta's
	// rule, which the core applies).
	ViewsChangedUnseen func(ctx context.Context, from int64) map[string]bool
	Memo               func(key string, f func() any) any
	Say                func(args map[string]any) string
	Warn               func(msg string, args ...any)
}

// Read is one context read as salience sees it: the reader's room at the
// read's seq, what it was shown, and the room's metadata salience needs.
// Everything it returns is shared with the read: read-only.
type Read struct{ r Room }

// New is the read salience is handed of room.
func New(room Room) *Read { return &Read{r: room} }

// Room is the room's id; Seq the read's seq; Now its time; Self the
// reader's agent id ("" for a caller without an agent).
func (r *Read) Room() string   { return r.r.ID }
func (r *Read) Seq() int64     { return r.r.Seq }
func (r *Read) Now() time.Time { return r.r.Now }
func (r *Read) Self() string   { return r.r.Self }

// Config is the value of _shared._config (Room.Config).
func (r *Read) Config() json.RawMessage { return r.r.Config }

// Reads are the room's context reads so far (every agent's) and the
// reader's own marks (nil for a caller without an agent).
func (r *Read) Reads() (room int64, self *ReaderMarks) {
	for _, a := range r.r.Agents {
		room += a.ContextReads
		if a.ID == r.r.Self {
			self = &ReaderMarks{ContextReads: a.ContextReads, LastContextSeq: a.LastContextSeq}
		}
	}
	return room, self
}

// Action is a custom action the reader's action list shows (ShownActions);
// false for any other, hidden or not live.
func (r *Read) Action(id string) (ActionMeta, bool) {
	a, ok := r.r.Actions[id]
	return a, ok
}

// ShownActions are the custom actions (not builtins) the reader's action
// list shows: live, and enabled for it; sorted. What salience tells a
// reader about the vocabulary is computed from these only: counting an
// action hidden from the reader (its enabled, its timer) would tell the
// reader it exists.
func (r *Read) ShownActions() []string {
	var out []string
	for id := range r.r.Actions {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// ActionEnabled reports an action the reader's enabled shows it.
func (r *Read) ActionEnabled(id string) bool {
	_, ok := r.r.Actions[id]
	return ok
}

// ViewDefs are the views the reader was shown (those in Views), in
// dependency order.
func (r *Read) ViewDefs() []ViewMeta { return r.r.ViewDefs }

// Views are the values of the views the reader was shown (system views
// included): id → value, {"_error": …} for a failing one.
func (r *Read) Views() map[string]any { return r.r.Views }

// Revision is the revision of a mutable entry in the state the reader's
// expressions compute with (Computes); false for any other.
func (r *Read) Revision(scope, key string) (int64, bool) {
	if !r.Computes(scope, key) {
		return 0, false
	}
	return r.r.Row(scope, key)
}

// ViewSelfRevision is the revision of key in the scope a view the reader
// is shown reads as state.self (its registrar's, ViewSelf): the view
// computes with that scope on the registrar's authority, so its entries'
// changes are the view's, which the reader sees; false for a view not
// shown, a communal one, or an absent entry.
func (r *Read) ViewSelfRevision(def *defs.ViewDef, key string) (int64, bool) {
	self := defs.SelfOf(def.Scope)
	if _, shown := r.r.Views[def.ID]; !shown || self == "" {
		return 0, false
	}
	return r.r.Row(self, key)
}

// Computes reports an entry in the state the reader's expressions (and
// the communal views it is shown) compute with: one its gate hides from
// the reader is not, and neither is one of a scope it may not read.
func (r *Read) Computes(scope, key string) bool {
	m, _ := r.r.State[scope].(map[string]any)
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
func (r *Read) Keys(scope string) []string { return r.r.Keys(scope) }

// EachShown calls f for every mutable entry the reader was shown (in the
// state it computes with, and readable to it one by one) whose scope
// keep accepts.
func (r *Read) EachShown(keep func(scope string) bool, f func(scope, key string, revision int64)) {
	for scope, m := range r.r.State {
		entries, _ := m.(map[string]any)
		if len(entries) == 0 || !keep(scope) {
			continue
		}
		for key := range entries {
			// The state expressions compute with may hold entries the
			// read rule does not show the reader.
			if rev, ok := r.r.Row(scope, key); ok && r.r.Readable(scope, key) {
				f(scope, key, rev)
			}
		}
	}
}

// Value is the value of an entry EachShown gave the reader (nil for
// another).
func (r *Read) Value(scope, key string) any {
	m, _ := r.r.State[scope].(map[string]any)
	return m[key]
}

// Expand words the context read with args for the reader.
func (r *Read) Expand(args map[string]any) string { return r.r.Say(args) }

// Memo is a value computed once per room snapshot (it changes only with
// the seq) under key, shared by every read of that snapshot.
func (r *Read) Memo(key string, f func() any) any { return r.r.Memo(key, f) }

// Usage is the vocabulary usage at the read's seq of the actions the
// reader's list shows and the views it is shown (UsageKey): the usage of
// an action hidden from it would say the action is there and used.
func (r *Read) Usage(context.Context) (map[string]*Usage, error) {
	all, err := r.r.Usage()
	if err != nil {
		return nil, err
	}
	out := make(map[string]*Usage, len(r.r.Actions)+len(r.r.Views))
	for id := range r.r.Actions {
		if u := all[UsageKey("action", id)]; u != nil {
			out[UsageKey("action", id)] = u
		}
	}
	for id := range r.r.Views {
		if u := all[UsageKey("view", id)]; u != nil {
			out[UsageKey("view", id)] = u
		}
	}
	return out, nil
}

// RecentLog is the newest entries of each of the room's logs (_messages,
// _audit) up to the read's seq, unordered. The messages are those the
// reader sees, as its messages section and messages.count count them: a
// message whose timer ended (or has not started) at the read's time, or
// whose enabled gate hides it from the reader, is not among them. Reads
// with the same LogKey get the same rows. A read that fails midway
// returns what it read with the error.
func (r *Read) RecentLog(ctx context.Context) ([]LogRow, error) { return r.r.RecentLog(ctx) }

// LogKey names, within the read's snapshot, the messages RecentLog gives
// this read: "" when the reader sees every message up to the read's seq
// (the usual room, which has no gated or timed messages); else a digest
// of those it does not see (a timer's end, or another reader's gates,
// give another key).
func (r *Read) LogKey() string { return LogKey(r.r.Unseen) }

// LogKey is the digest of the unseen messages' seqs ("" for none).
func LogKey(unseen []int64) string {
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

// ViewsChangedUnseen are the views (of ViewDefs) that may have changed
// after from with no newer revision of what they read by path (which a
// reader checks itself, key by key): the rule of a wait's delta.
func (r *Read) ViewsChangedUnseen(ctx context.Context, from int64) map[string]bool {
	return r.r.ViewsChangedUnseen(ctx, from)
}

// Warn logs a feature's problem with the read (advice that could not be
// given is not a reason to fail it).
func (r *Read) Warn(msg string, args ...any) { r.r.Warn(msg, args...) }

// ViewsUsedBy are the ids of the views def's expressions read (its if,
// enabled, result and expression writes), in order, each once, but for
// the system views: the views whose use invoking def records in the
// vocabulary's usage.
func ViewsUsedBy(def *defs.ActionDef, system ...string) []string {
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
		for _, id := range defs.FactsOf(src).Views {
			if !seen[id] && !slices.Contains(system, id) {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	return out
}
