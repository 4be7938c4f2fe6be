package envelope

// A context read's envelope filled from the reader's room, section by
// section: state, views, agents, actions, messages with their threads
// and receipts; then the acknowledgements it is owed and the cut to its
// budget. What the reader may see the core decided before (its read
// built the reader's state, views, agents and actions with the read rule
// applied, and its statements return only what the reader may read);
// how that is shown is decided here, from the Reading alone.

import (
	"context"
	"encoding/json"
	"iter"
	"sort"
	"strconv"
	"time"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// The records the envelope shows of the room's system scopes and views:
// its threads, the acknowledgements its messages asked for, the actions
// that write the same keys (the core's ScopeThreads, ScopeAcks and
// viewContested).
const (
	scopeThreads  = "_threads"
	scopeAcks     = "_acks"
	viewContested = "_contested"
)

// Message is a message as a messages statement reads it.
type Message struct {
	Seq          int64
	Raw          json.RawMessage
	Writer       string
	Via, Enabled *string
}

// Row is an entry of the room's snapshot at the read's seq, as the
// envelope reads it.
type Row struct {
	Key               string
	Value             json.RawMessage
	Writer            string
	Revision, Version int64
	// Live: the entry is live at the read's time (its timer leaves it
	// shown).
	Live bool
}

// A Reading is one reader's context read as its envelope is filled: what
// the core's read built, lookups in the room's snapshot at the read's
// seq, and the statements that read what the read does not hold (they
// stop at Seq). Every map is shared with the read: read-only.
type Reading struct {
	Room string
	Seq  int64
	Now  time.Time
	Self string // "" for a caller without an agent
	// ReadOnly: the reader may invoke nothing (the view token, observers).
	ReadOnly bool
	// Say words a step in the reader's vocabulary (Principal.Say).
	Say    func(errs.Step) string
	About  *RoomAbout
	Params map[string]any // CEL's params
	// State is the reader's state (scope → entries); Stored the
	// snapshot's live scopes as stored JSON, Modified the scopes of State
	// that are not the snapshot's, Enc the snapshot's encoding of a scope
	// (StateShown).
	State    map[string]any
	Stored   map[string]map[string]json.RawMessage
	Modified map[string]bool
	Enc      ScopeEncoder
	// Visible reports a scope the reader reads (the read rule).
	Visible func(scope string) bool
	Agents  map[string]any // CEL's agents: those the reader sees
	Roster  []Presence     // every agent's presence, for receipts and read marks
	Views   map[string]any // the views the reader sees, id → value
	// Enabled are the live actions, enabled for the reader or not;
	// Available those it may invoke now; Action a room action's
	// definition; Cooldown an action's live cooldown as shown (nil:
	// none); RoomActions how many actions the room defines.
	Enabled, Available map[string]bool
	Action             func(id string) *defs.ActionDef
	Cooldown           func(id string) map[string]any
	RoomActions        int
	// Builtins are the builtin actions (id → description) and their
	// params.
	Builtins      map[string]string
	BuiltinParams map[string]map[string]defs.ParamSpec
	// Count, Unread and DirectedUnread are the reader's message counters;
	// Counted says they hold its unread counts.
	Count, Unread, DirectedUnread int64
	Counted                       bool
	// Unevaluated counts the entries the read hid because its budget
	// could not afford their gates.
	Unevaluated int
	// Row is the snapshot's row scope/key, live or not (ok false: none);
	// Rows yields each of scope's rows; Sources are the room's rules'
	// expressions (its actions' guards, its views).
	Row     func(scope, key string) (_ Row, ok bool)
	Rows    func(scope string) iter.Seq[Row]
	Sources iter.Seq[string]
	// Log reads the newest limit live entries of a log scope the reader
	// sees; Messages the request's messages (gated ones included);
	// Directed the reader's unread directed messages, oldest first, at
	// most limit; Gate decides, for this read, whether the reader sees a
	// message by its gate (nil: ungated); Invocations counts an action's
	// recent successful invocations.
	Log         func(ctx context.Context, scope string, limit int) (map[string]any, error)
	Messages    func(ctx context.Context, req ContextRequest) ([]Message, error)
	Directed    func(ctx context.Context, limit int) ([]Message, error)
	Gate        func(ctx context.Context) func(enabled *string) bool
	Invocations func(ctx context.Context) (map[string]int, error)
	// ReadUpTo is the newest message seq returned to the reader: filling
	// the messages raises it, a cut lowers it to what is still shown.
	ReadUpTo *int64
}

// Fill assembles the envelope of r for req: the one place it is filled
// (adaptive salience annotates it afterwards).
func (r *Reading) Fill(ctx context.Context, req ContextRequest) (*Envelope[ActionView], error) {
	env := New[ActionView](req, r.Self, r.Params, r.About)
	if req.Shows("state") {
		if err := r.fillState(ctx, req, env); err != nil {
			return nil, err
		}
	}
	if req.Shows("views") {
		env.Views = ViewsShown(r.Views, req)
	}
	if req.Shows("agents") {
		env.Agents = r.Agents
		if env.Agents == nil {
			env.Agents = map[string]any{}
		}
	}
	custom := r.RoomActions
	if req.Shows("actions") {
		var err error
		if custom, err = r.fillActions(ctx, req, env); err != nil {
			return nil, err
		}
	}
	var help []string
	if req.Shows("messages") {
		msgs, truncated, err := r.messages(ctx, req)
		if err != nil {
			return nil, err
		}
		env.Messages = msgs
		if truncated {
			help = append(help, "context_shaping")
			env.Context.MessagesTruncated = msgs.Elided
		}
	}
	_, contested := r.Views[viewContested]
	help = append(help, HelpKeys(custom, r.DirectedUnread, contested)...)
	env.Finish(req, r.Seq, r.Unevaluated, help, r.Expand)
	return env, nil
}

// Expand words the context read with args for the reader.
func (r *Reading) Expand(args map[string]any) string {
	return r.Say(errs.Step{Op: errs.OpReadContext, Room: r.Room, Args: args})
}

// fillState fills the state section: the scopes of the reader's state
// the request names (StateShown), the log scopes it includes, and on a
// read of single scopes their versions.
func (r *Reading) fillState(ctx context.Context, req ContextRequest, env *Envelope[ActionView]) error {
	st := env.StateShown(req, r.Self, r.State, r.Stored, r.Modified, r.Enc)
	for _, inc := range req.Include {
		if !r.Visible(inc) {
			continue
		}
		logs, err := r.Log(ctx, inc, req.MessagesLimit)
		if err != nil {
			return err
		}
		st[inc] = logs
	}
	env.State = st
	env.ShowVersions(VersionsShown(req, r.Self, env.State, r.versions))
	return nil
}

// versions are the versions of scope's entries, live or not, by key.
func (r *Reading) versions(scope string) map[string]int64 {
	var vs map[string]int64
	for e := range r.Rows(scope) {
		if vs == nil {
			vs = map[string]int64{}
		}
		vs[e.Key] = e.Version
	}
	return vs
}

// live yields scope's entries live at the read's time: key, value.
func (r *Reading) live(scope string) iter.Seq2[string, json.RawMessage] {
	return func(yield func(string, json.RawMessage) bool) {
		for e := range r.Rows(scope) {
			if e.Live && !yield(e.Key, e.Value) {
				return
			}
		}
	}
}

// fillActions fills the actions section (and, at the lean depth, the
// line of builtins) and counts the room's own actions the reader is
// shown.
func (r *Reading) fillActions(ctx context.Context, req ContextRequest, env *Envelope[ActionView]) (custom int, _ error) {
	acts, err := r.actions(ctx, req.Depth)
	if err != nil {
		return 0, err
	}
	for id := range acts {
		if _, builtin := r.Builtins[id]; !builtin {
			custom++
		}
	}
	env.Actions = acts
	if req.Depth == "lean" {
		env.Builtins = BuiltinsLine
		if r.ReadOnly {
			env.Builtins = ReadOnlyBuiltinsLine
		}
	}
	return custom, nil
}

// actions lists the enabled actions with their availability, in id
// order, and beyond the lean depth the builtins; at depth usage each
// with its recent invocations.
func (r *Reading) actions(ctx context.Context, depth string) (map[string]ActionView, error) {
	out := map[string]ActionView{}
	var counts map[string]int
	if depth == "usage" {
		var err error
		if counts, err = r.Invocations(ctx); err != nil {
			return nil, err
		}
	}
	ids := make([]string, 0, len(r.Enabled))
	for id, on := range r.Enabled {
		if on {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		// Read-only callers (the view token, observers) can invoke nothing.
		a := ActionOf(id, r.Action(id), r.Available[id] && !r.ReadOnly, r.Cooldown(id), depth)
		if counts != nil {
			n := counts[id]
			a.InvocationCount = &n
		}
		out[id] = a
	}
	if depth == "lean" {
		return out, nil // builtins are one line: Envelope.Builtins
	}
	AddBuiltins(out, r.Builtins, r.BuiltinParams, !r.ReadOnly)
	return out, nil
}

// messages returns the message counters and the messages the request
// shows, raising ReadUpTo to the newest returned to an agent.
func (r *Reading) messages(ctx context.Context, req ContextRequest) (*Messages, bool, error) {
	read, err := r.Messages(ctx, req)
	if err != nil {
		return nil, false, err
	}
	// The rows read (gated ones included) decide paging: a page is full
	// when the query filled it, and the next starts after its last row,
	// whether or not the reader sees that one.
	var maxSeq, minSeq int64
	for _, m := range read {
		maxSeq = max(maxSeq, m.Seq)
		if minSeq == 0 {
			minSeq = m.Seq
		}
	}
	upTo := int64(-1) // no cap
	if r.Self != "" && req.Thread == 0 && r.Counted && r.DirectedUnread > 0 && (req.MessagesAfter == nil || req.Since != nil) {
		directed, err := r.Directed(ctx, req.MessagesLimit+1)
		if err != nil {
			return nil, false, err
		}
		read, upTo = DirectedAhead(read, directed, func(m Message) int64 { return m.Seq }, req.MessagesLimit)
	}
	shown := r.Gate(ctx)
	recent := []map[string]any{}
	for _, m := range read {
		if shown(m.Enabled) {
			recent = append(recent, r.shownMessage(m))
		}
	}
	out := &Messages{Count: r.Count, Unread: r.Unread, DirectedUnread: r.DirectedUnread, Recent: recent}
	page := Page{Read: len(read), Returned: len(recent), MinSeq: minSeq, MaxSeq: maxSeq, Total: r.Count}
	var truncated bool
	if req.Thread != 0 {
		out.Thread = &req.Thread
		out.Elided = page.ThreadElided(req, r.Expand)
	} else {
		out.Threads = r.threads(recent)
		out.Elided, truncated = page.Elided(req, r.Expand)
	}
	if r.Self != "" {
		*r.ReadUpTo = max(*r.ReadUpTo, maxSeq)
		if upTo >= 0 {
			*r.ReadUpTo = min(*r.ReadUpTo, upTo)
		}
	}
	return out, truncated, nil
}

// shownMessage is a message as the reader is shown it, with its seq
// and, when it asked for acknowledgement, its receipts.
func (r *Reading) shownMessage(msg Message) map[string]any {
	m := ShownMessage(msg.Raw, msg.Writer, msg.Via)
	m["seq"] = msg.Seq
	if m["ack"] == true {
		if rcpt := r.receipts(msg.Seq); rcpt != nil {
			m["receipts"] = rcpt
		}
	}
	return m
}

// receipts are a message's receipts, from its live _acks entry and the
// agents' read marks (nil: the message asked for none).
func (r *Reading) receipts(seq int64) *Receipts {
	e, ok := r.Row(scopeAcks, strconv.FormatInt(seq, 10))
	if !ok || !e.Live {
		return nil
	}
	seen := make(map[string]int64, len(r.Roster))
	for _, a := range r.Roster {
		seen[a.ID] = a.LastSeenSeq
	}
	return ReceiptsOf(e.Value, seq, seen)
}

// threads lists the room's most recently active threads, unread ones
// first (Threads), from its live _threads entries.
func (r *Reading) threads(recent []map[string]any) []ThreadSummary {
	var all []ThreadSummary
	for key, raw := range r.live(scopeThreads) {
		if t, ok := ThreadSummaryOf(key, raw); ok {
			all = append(all, t)
		}
	}
	return Threads(all, recent, r.Self, r.seenBefore(), func(thread int64) string {
		return r.Expand(map[string]any{"only": "messages", "thread": thread})
	})
}

// seenBefore is the newest message the reader had been shown before this
// read (its unread messages come after it).
func (r *Reading) seenBefore() int64 {
	for _, a := range r.Roster {
		if a.ID == r.Self {
			return a.LastSeenSeq
		}
	}
	return 0
}

// OverdueAcks are the acknowledgements asked of the reader that are
// overdue after after (OverdueAcks), from the live _acks entries.
func (r *Reading) OverdueAcks(after time.Duration) []OverdueAck {
	return OverdueAcks(r.live(scopeAcks), r.Self, r.Now, after, func(seq int64) string {
		return r.Say(errs.Step{Op: errs.OpInvoke, Room: r.Room, Args: map[string]any{"action": "_ack", "params": map[string]any{"seq": seq}}})
	})
}

// MostlyChanged reports whether most of the state entries the reader is
// shown changed after from (MostlyChanged).
func (r *Reading) MostlyChanged(from int64) bool {
	return MostlyChanged(r.State, func(scope, key string) bool {
		e, ok := r.Row(scope, key)
		return ok && e.Revision > from
	})
}

// Fit shrinks env to at most req.MaxBytes bytes of JSON (Fit), its
// messages marked read only up to those it still shows.
func (r *Reading) Fit(env *Envelope[ActionView], req ContextRequest) {
	Fit(env, Fitting[ActionView]{Req: req, Self: r.Self, Room: r.Room, Say: r.Say,
		Rank: r.rankKeys, Actions: Actions, ReadUpTo: r.ReadUpTo})
}

// rankKeys orders a scope's keys by salience for the reader (RankKeys):
// the entries it wrote, those the room's rules read or several actions
// write (watchedKeys), open work, the most recently changed.
func (r *Reading) rankKeys(scope string, keys map[string]json.RawMessage) []string {
	name := scope
	if scope == defs.ScopeSelf {
		name = r.Self
	}
	mine := func(k string) bool { e, ok := r.Row(name, k); return ok && r.Self != "" && e.Writer == r.Self }
	rev := func(k string) int64 { e, _ := r.Row(name, k); return e.Revision }
	return RankKeys(keys, mine, r.watchedKeys(scope), rev)
}

// watchedKeys are the keys of scope that the room's action guards and
// views read, or that several actions write (WatchedKeys).
func (r *Reading) watchedKeys(scope string) map[string]bool {
	contested, _ := r.Views[viewContested].(map[string]any)
	return WatchedKeys(scope, r.Sources, contested)
}
