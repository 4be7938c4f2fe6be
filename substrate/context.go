// The context read and its envelope: what a context contains, filled
// from the reader's context (roomctx.go, loaded by readpath.go) section by
// section (state, views, agents, actions, messages with their threads and
// receipts), annotated by salience from a Read of it, then cut to the
// read's budget. How the envelope is shaped, put together and fitted, and
// the rules of what each section shows, are substrate/envelope's; what
// salience is handed is substrate/salienceport's Read, filled here with
// the read rule applied; what a reader's room puts in the envelope is
// here.

package substrate

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/salienceport"
)

// The envelope (a context read's result), and the results of wait, eval
// and help, are shaped, encoded and fitted to their budget in
// substrate/envelope, from what the core puts in them; the core's names
// for them are these. Here is what only the core knows: what a reader's
// room puts in each section, which keys it makes salient, which versions
// a read shows.

type (
	Envelope       = envelope.Envelope[ActionView]
	RoomAbout      = envelope.RoomAbout
	Messages       = envelope.Messages
	MessagesElided = envelope.MessagesElided
	ContextMeta    = envelope.ContextMeta
	RequestEcho    = envelope.RequestEcho
	ContextRequest = envelope.ContextRequest
	ContextParams  = envelope.ContextParams
	Budget         = envelope.Budget
	Cut            = envelope.Cut
	EntryVersions  = envelope.EntryVersions
	ThreadSummary  = envelope.ThreadSummary
	OverdueAck     = envelope.OverdueAck
	Receipts       = envelope.Receipts
	Attention      = envelope.Attention
	Contest        = envelope.Contest
	Blocked        = envelope.Blocked
	Omitted        = envelope.Omitted
	SinceLastRead  = envelope.SinceLastRead
	ChangesSince   = envelope.ChangesSince
	ActionView     = envelope.ActionView
	WaitResult     = envelope.WaitResult[ActionView]
	EvalResult     = envelope.EvalResult
	HelpResult     = envelope.HelpResult
)

// The definitions of actions and views are package defs's, beneath the
// core (it needs no room to say what a valid one is); the names stay the
// core's API.
type (
	ActionDef     = defs.ActionDef
	OnInvoke      = defs.OnInvoke
	ParamSpec     = defs.ParamSpec
	WriteTemplate = defs.WriteTemplate
	ViewDef       = defs.ViewDef
	Timer         = defs.Timer
)

// DefaultBudget is the budget a hint's read gets when it names none: the
// MCP adapter's default (mcp.DefaultMaxBytes). A value larger than this
// can only be read by asking for more, which a hint then says.
const DefaultBudget = envelope.DefaultBudget

// ParseContextRequest reads the context parameters from a query string.
func ParseContextRequest(get func(string) string) (ContextRequest, error) {
	return envelope.ParseContextRequest(get)
}

// Context is the envelope of GET /rooms/:id/context (ARCHITECTURE §7):
// everything the caller perceives, shaped for a language model.
func (s *Service) Context(ctx context.Context, p *Principal, roomID string, q ContextRequest) (*Envelope, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	// Admitted here, not only in readCtx: the envelope's own evaluations
	// (the gates of the messages it shows and of the unread ones it takes
	// out of the counts) are charged to the room too.
	ctx, done, err := s.work(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	defer done()
	rc, err := s.readCtx(ctx, p, roomID, !q.NoMessages)
	if err != nil {
		return nil, err
	}
	return s.envelopeOf(ctx, rc, roomID, q)
}

// envelopeOf assembles the envelope of a context read: the unread counts
// first when the read did not take them and the envelope shows messages,
// then the sections, whose own statements (messages, logs, usage) run one
// at a time on pooled connections and stop at the read's seq, so they
// agree with its state. Messages it returns to an agent are then marked
// read.
func (s *Service) envelopeOf(ctx context.Context, rc *roomCtx, roomID string, req ContextRequest) (*Envelope, error) {
	if !rc.counted && !req.NoMessages {
		if err := s.countUnread(ctx, rc, roomID); err != nil {
			return nil, err
		}
	}
	sl, err := s.salienceFor(ctx, rc, roomID)
	if err != nil {
		return nil, err
	}
	note, shown := envelope.DeltaRequest(&req, func(since int64) bool { return mostlyChanged(rc, since) })
	if sl != nil && sl.FirstReadFull() && req.Depth == "lean" && req.Since == nil && !req.Peek && note == "" {
		req.Depth = "full"
		note = "your first read of this room is at depth full, once, so you see the whole vocabulary; later reads are lean unless you ask"
	}
	env, err := s.envelope(ctx, s.db, rc, roomID, req)
	if err != nil {
		return nil, err
	}
	env.Context.Note = note
	if sl != nil {
		sl.Annotate(ctx, env, req)
	}
	env.Attend(rc.overdueAcks(roomID, s.ackOverdue))
	if req.Since != nil {
		unseen, err := s.unseenAt(ctx, rc.snap, *req.Since)
		if err != nil {
			return nil, err
		}
		deltaOf(env, rc, roomID, *req.Since, *req.MessagesAfter, shown, unseen)
		env.Context.Request.MessagesLimit = shown
	}
	if req.MaxBytes > 0 {
		fitBudget(env, rc, roomID, req)
		if sl != nil {
			envelope.YouElided(env, sl.YouElided)
		}
	}
	if rc.self != "" && !req.Peek {
		err = s.markRead(ctx, roomID, rc)
	}
	return env, err
}

// countUnread takes the reader's unread counts for an envelope that shows
// messages when the read did not take them.
func (s *Service) countUnread(ctx context.Context, rc *roomCtx, roomID string) error {
	mc, err := countMessages(ctx, s.db, roomID, rc.p, rc.agents, rc.msgs.Count, rc.snap.seq)
	if err != nil {
		return err
	}
	// The hidden messages were taken out of the count when the context
	// was built: which they are, and when a timer next changes them, stay
	// the read's.
	mc.unseen, mc.next = rc.msgs.unseen, rc.msgs.next
	rc.msgs, rc.counted = mc, true
	s.hideGated(ctx, rc)
	return nil
}

// envelope assembles the context: this is the one place the envelope is
// filled, section by section (adaptive salience, seed 000, annotates it
// afterwards in envelopeOf).
func (s *Service) envelope(ctx context.Context, q querier, rc *roomCtx, roomID string, req ContextRequest) (*Envelope, error) {
	env := envelope.New[ActionView](req, rc.self, rc.vars.Params, rc.snap.about)
	if req.Shows("state") {
		if err := s.stateSection(ctx, q, rc, roomID, req, env); err != nil {
			return nil, err
		}
	}
	if req.Shows("views") {
		env.Views = envelope.ViewsShown(rc.views, req)
	}
	if req.Shows("agents") {
		env.Agents = rc.vars.Agents
		if env.Agents == nil {
			env.Agents = map[string]any{}
		}
	}
	custom := len(rc.snap.actions)
	if req.Shows("actions") {
		var err error
		if custom, err = s.actionsInto(ctx, q, rc, roomID, req, env); err != nil {
			return nil, err
		}
	}
	var help []string
	if req.Shows("messages") {
		msgs, truncated, err := s.messagesSection(ctx, q, rc, roomID, req)
		if err != nil {
			return nil, err
		}
		env.Messages = msgs
		if truncated {
			help = append(help, "context_shaping")
			env.Context.MessagesTruncated = msgs.Elided
		}
	}
	_, contested := rc.views[viewContested]
	help = append(help, envelope.HelpKeys(custom, rc.msgs.Directed, contested)...)
	env.Finish(req, rc.snap.seq, rc.gatesHidden, help, func(args map[string]any) string { return expand(rc, roomID, args) })
	return env, nil
}

// stateSection fills the envelope's state: the scopes the reader's
// context shows that the request names (its key range applied, a scope
// the snapshot holds as it is shown passed as its stored JSON), the log
// scopes it includes, and on a read of single scopes their versions.
func (s *Service) stateSection(ctx context.Context, q querier, rc *roomCtx, roomID string, req ContextRequest, env *Envelope) error {
	live := rc.snap.live(rc.now)
	st := env.StateShown(req, rc.self, rc.state, live.raw, rc.modified, live)
	for _, inc := range req.Include {
		if !rc.visible(inc) {
			continue
		}
		logs, err := s.loadLog(ctx, q, rc, roomID, inc, req.MessagesLimit, rc.snap.seq)
		if err != nil {
			return err
		}
		st[inc] = logs
	}
	env.State = st
	setVersions(env, rc, req)
	return nil
}

// actionsInto fills the envelope's actions (and, at the lean depth, the
// line of builtins) and counts the room's own actions the reader is shown.
func (s *Service) actionsInto(ctx context.Context, q querier, rc *roomCtx, roomID string, req ContextRequest, env *Envelope) (custom int, _ error) {
	acts, err := s.actionsSection(ctx, q, rc, roomID, req.Depth)
	if err != nil {
		return 0, err
	}
	for id := range acts {
		if _, builtin := builtinDescriptions[id]; !builtin {
			custom++
		}
	}
	env.Actions = acts
	if req.Depth == "lean" {
		env.Builtins = envelope.BuiltinsLine
		if rc.p != nil && rc.p.ReadOnly() {
			env.Builtins = envelope.ReadOnlyBuiltinsLine
		}
	}
	return custom, nil
}

// mostlyChanged reports whether most of the state entries rc shows its
// reader changed after from (envelope.MostlyChanged).
func mostlyChanged(rc *roomCtx, from int64) bool {
	return envelope.MostlyChanged(rc.state, func(scope, key string) bool {
		r := rc.snap.scopes[scope][key]
		return r != nil && r.Revision > from
	})
}

// messagesSection returns the message counters and recent messages, and
// marks what it returned as read for an agent caller.
func (s *Service) messagesSection(ctx context.Context, q querier, rc *roomCtx, roomID string, req ContextRequest) (*Messages, bool, error) {
	read, err := scanMsgRows(queryMessages(ctx, q, rc, roomID, req))
	if err != nil {
		return nil, false, err
	}
	// The rows read (gated ones included) decide paging: a page is full
	// when the query filled it, and the next starts after its last row,
	// whether or not the reader sees that one.
	var maxSeq, minSeq int64
	for _, r := range read {
		maxSeq = max(maxSeq, r.seq)
		if minSeq == 0 {
			minSeq = r.seq
		}
	}
	upTo := int64(-1) // no cap
	if rc.self != "" && req.Thread == 0 && rc.counted && rc.msgs.Directed > 0 && (req.MessagesAfter == nil || req.Since != nil) {
		if read, upTo, err = directedAhead(ctx, q, rc, roomID, req, read); err != nil {
			return nil, false, err
		}
	}
	shown := s.logGate(ctx, rc)
	recent := []map[string]any{}
	for _, r := range read {
		if shown(r.enabled) {
			recent = append(recent, rc.shownMessage(r))
		}
	}
	out := &Messages{Count: rc.msgs.Count, Unread: rc.msgs.Unread, DirectedUnread: rc.msgs.Directed, Recent: recent}
	page := envelope.Page{Read: len(read), Returned: len(recent), MinSeq: minSeq, MaxSeq: maxSeq, Total: rc.msgs.Count}
	say := func(args map[string]any) string { return expand(rc, roomID, args) }
	var truncated bool
	if req.Thread != 0 {
		out.Thread = &req.Thread
		out.Elided = page.ThreadElided(req, say)
	} else {
		out.Threads = rc.threadsSection(roomID, recent, rc.seenBefore())
		out.Elided, truncated = page.Elided(req, say)
	}
	if rc.self != "" {
		rc.readUpTo = max(rc.readUpTo, maxSeq)
		if upTo >= 0 {
			rc.readUpTo = min(rc.readUpTo, upTo)
		}
	}
	return out, truncated, nil
}

// msgRow is a message as a messages statement reads it.
type msgRow struct {
	seq          int64
	raw          json.RawMessage
	writer       string
	via, enabled *string
}

// queryMessages runs the statement that reads the request's messages: a
// thread's page, the newest after a seq (a delta), a page after a seq,
// or the newest.
func queryMessages(ctx context.Context, q querier, rc *roomCtx, roomID string, req ContextRequest) (pgx.Rows, error) {
	switch {
	case req.Thread != 0:
		after := int64(0)
		if req.MessagesAfter != nil {
			after = *req.MessagesAfter
		}
		return q.Query(ctx, sqlThreadMessages, roomID, req.Thread, after, req.MessagesLimit, rc.snap.seq)
	case req.MessagesAfter != nil && req.Since != nil:
		// A delta shows the newest since (deltaOf); the older ones are
		// counted as read, with the read that returns them.
		return q.Query(ctx, sqlMessagesNewestAfter, roomID, *req.MessagesAfter, req.MessagesLimit, rc.snap.seq)
	case req.MessagesAfter != nil:
		return q.Query(ctx, sqlMessagesAfter, roomID, *req.MessagesAfter, req.MessagesLimit, rc.snap.seq)
	}
	return q.Query(ctx, sqlMessagesRecent, roomID, req.MessagesLimit, rc.snap.seq)
}

// scanMsgRows reads a messages statement's rows, and closes them before
// it returns (the next statement may run on the same connection).
func scanMsgRows(rows pgx.Rows, err error) ([]msgRow, error) {
	if err != nil {
		return nil, err
	}
	var read []msgRow
	for rows.Next() {
		var r msgRow
		if err := rows.Scan(&r.seq, &r.raw, &r.writer, &r.via, &r.enabled); err != nil {
			rows.Close()
			return nil, err
		}
		read = append(read, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return read, nil
}

// directedAhead puts the reader's unread directed messages ahead of the
// page read (envelope.DirectedAhead): upTo is where the read stops short
// of those left out (-1: no cap).
func directedAhead(ctx context.Context, q querier, rc *roomCtx, roomID string, req ContextRequest, read []msgRow) (_ []msgRow, upTo int64, _ error) {
	directed, err := scanMsgRows(q.Query(ctx, sqlDirectedUnread, roomID, rc.self, rc.msgs.seen, rc.snap.seq, req.MessagesLimit+1))
	if err != nil {
		return nil, 0, err
	}
	read, upTo = envelope.DirectedAhead(read, directed, func(r msgRow) int64 { return r.seq }, req.MessagesLimit)
	return read, upTo, nil
}

// shownMessage is a message as the reader is shown it, with its seq
// and, when it asked for acknowledgement, its receipts.
func (rc *roomCtx) shownMessage(r msgRow) map[string]any {
	m := envelope.ShownMessage(r.raw, r.writer, r.via)
	m["seq"] = r.seq
	if m["ack"] == true {
		if rcpt := rc.receiptsOf(r.seq); rcpt != nil {
			m["receipts"] = rcpt
		}
	}
	return m
}

// receiptsOf reads a message's receipts from the read's snapshot and
// presence (nil: the message asked for none).
func (rc *roomCtx) receiptsOf(seq int64) *Receipts {
	r, ok := rc.snap.scopes[ScopeAcks][strconv.FormatInt(seq, 10)]
	if !ok || !r.timer.live(rc.now) {
		return nil
	}
	seen := make(map[string]int64, len(rc.agents))
	for _, a := range rc.agents {
		seen[a.ID] = a.LastSeenSeq
	}
	return envelope.ReceiptsOf(r.Value, seq, seen)
}

// overdueAcks are the acknowledgements asked of the reader that are
// overdue (envelope.OverdueAcks), from the read's live _acks entries.
func (rc *roomCtx) overdueAcks(roomID string, after time.Duration) []OverdueAck {
	return envelope.OverdueAcks(rc.liveEntries(ScopeAcks), rc.self, rc.now, after, func(seq int64) string {
		return rc.p.Say(errs.Step{Op: errs.OpInvoke, Room: roomID, Args: map[string]any{"action": "_ack", "params": map[string]any{"seq": seq}}})
	})
}

// threadsSection lists the room's most recently active threads, unread
// ones first, from the read's snapshot (envelope.Threads).
func (rc *roomCtx) threadsSection(roomID string, recent []map[string]any, seenBefore int64) []ThreadSummary {
	var all []ThreadSummary
	for key, raw := range rc.liveEntries(ScopeThreads) {
		if t, ok := envelope.ThreadSummaryOf(key, raw); ok {
			all = append(all, t)
		}
	}
	return envelope.Threads(all, recent, rc.self, seenBefore, func(thread int64) string {
		return rc.p.Say(errs.Step{Op: errs.OpReadContext, Room: roomID, Args: map[string]any{"only": "messages", "thread": thread}})
	})
}

// liveEntries are the stored values of scope's entries live at the
// read's time, by key.
func (rc *roomCtx) liveEntries(scope string) iter.Seq2[string, json.RawMessage] {
	return func(yield func(string, json.RawMessage) bool) {
		for key, r := range rc.snap.scopes[scope] {
			if r.timer.live(rc.now) && !yield(key, r.Value) {
				return
			}
		}
	}
}

// seenBefore is the newest message the reader had been shown before this
// read (its unread messages come after it).
func (rc *roomCtx) seenBefore() int64 {
	for _, a := range rc.agents {
		if a.ID == rc.self {
			return a.LastSeenSeq
		}
	}
	return 0
}

// MessageThread is the thread a message of the context's messages.recent
// belongs to (0: none): its thread, or its own seq when it starts one.
func MessageThread(m map[string]any) int64 { return envelope.MessageThread(m) }

// actionsSection lists enabled actions with availability, plus builtins.
func (s *Service) actionsSection(ctx context.Context, q querier, rc *roomCtx, roomID, depth string) (map[string]ActionView, error) {
	out := map[string]ActionView{}
	readOnly := rc.p != nil && rc.p.ReadOnly()
	var counts map[string]int
	if depth == "usage" {
		var err error
		if counts, err = invocationCounts(ctx, q, roomID); err != nil {
			return nil, err
		}
	}
	ids := make([]string, 0, len(rc.actEnabled))
	for id, on := range rc.actEnabled {
		if on {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		var cooldown map[string]any
		if cd := s.cooldownOf(rc.snap, id, rc.now); cd != nil {
			cooldown = cd.describeCooldown(rc.now)
		}
		// Read-only callers (the view token, observers) can invoke nothing.
		a := envelope.ActionOf(id, rc.snap.actions[id].def, rc.actAvail[id] && !readOnly, cooldown, depth)
		if counts != nil {
			n := counts[id]
			a.InvocationCount = &n
		}
		out[id] = a
	}
	if depth == "lean" {
		return out, nil // builtins are one line: Envelope.Builtins
	}
	envelope.AddBuiltins(out, builtinDescriptions, builtinParams, !readOnly)
	return out, nil
}

// invocationCounts counts successful invocations per action over the last
// 500 audit entries (bounded, whatever the room's history).
func invocationCounts(ctx context.Context, q querier, roomID string) (map[string]int, error) {
	rows, err := q.Query(ctx, sqlInvocationCounts, roomID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id *string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		if id != nil {
			out[*id]++
		}
	}
	return out, rows.Err()
}

// fitBudget shrinks env to at most req.MaxBytes bytes of JSON
// (envelope.Fit), its messages marked read only up to those it still
// shows.
func fitBudget(env *Envelope, rc *roomCtx, roomID string, req ContextRequest) {
	envelope.Fit(env, envelope.Fitting[ActionView]{Req: req, Self: rc.self, Room: roomID, Say: rc.p.Say,
		Rank:    func(scope string, keys map[string]json.RawMessage) []string { return rankKeys(rc, scope, keys) },
		Actions: envelope.Actions, ReadUpTo: &rc.readUpTo})
}

// expand words the context read with args for the reader.
func expand(rc *roomCtx, roomID string, args map[string]any) string {
	return rc.p.Say(errs.Step{Op: errs.OpReadContext, Room: roomID, Args: args})
}

// rankKeys orders a scope's keys by salience for the reader
// (envelope.RankKeys): the entries it wrote, those the room's rules read
// or several actions write (watchedKeys), open work, the most recently
// changed.
func rankKeys(rc *roomCtx, scope string, keys map[string]json.RawMessage) []string {
	name := scope
	if scope == ScopeSelf {
		name = rc.self
	}
	rows := rc.snap.scopes[name]
	mine := func(k string) bool { r := rows[k]; return r != nil && rc.self != "" && r.Writer == rc.self }
	rev := func(k string) int64 {
		if r := rows[k]; r != nil {
			return r.Revision
		}
		return 0
	}
	return envelope.RankKeys(keys, mine, watchedKeys(rc, scope), rev)
}

// watchedKeys are the keys of scope that the room's action guards and
// views read, or that several actions write (envelope.WatchedKeys).
func watchedKeys(rc *roomCtx, scope string) map[string]bool {
	contested, _ := rc.views[viewContested].(map[string]any)
	return envelope.WatchedKeys(scope, func(yield func(string) bool) {
		for _, a := range rc.snap.actions {
			if !yield(a.def.If) || !yield(a.def.Enabled) {
				return
			}
		}
		for _, v := range rc.snap.views {
			if !yield(v.def.Expr) {
				return
			}
		}
	}, contested)
}

// versionsRead is the read that shows the versions of scope's entries,
// as a step's arguments: what the if_version help and a version
// conflict's hint name.
func versionsRead(scope string) map[string]any {
	return map[string]any{"only": "state." + scope}
}

// setVersions records the versions of the scopes req names one by one
// (only: "state.<scope>") that env's state shows (envelope.EntryVersions).
func setVersions(env *Envelope, rc *roomCtx, req ContextRequest) {
	env.ShowVersions(envelope.VersionsShown(req, rc.self, env.State, func(name string) map[string]int64 {
		rows := rc.snap.scopes[name]
		if len(rows) == 0 {
			return nil
		}
		vs := make(map[string]int64, len(rows))
		for k, r := range rows {
			vs[k] = r.Version
		}
		return vs
	}))
}

// ScopeJSON returns raw[name] encoded, encoding it on first use: the
// envelope's encoding of a scope it shows as the snapshot holds it
// (envelope.ScopeEncoder).
func (l *liveState) ScopeJSON(name string) ([]byte, error) {
	return l.enc.Get(name, func() any { return l.raw[name] })
}

// Adaptive salience (seed 000 §VII) annotates the envelope from a Read
// of the context read (envelopeOf): filled here, with the read rule
// already applied, from the read's own answers.

// What the core asks salience, and the read it hands it, are
// substrate/salienceport's (no room, no SQL: it answers from what the
// core filled it with); the names stay the core's API.
type (
	Salience     = salienceport.Salience
	SalienceRead = salienceport.SalienceRead
	Read         = salienceport.Read
	ReaderMarks  = salienceport.ReaderMarks
	ActionMeta   = salienceport.ActionMeta
	ViewMeta     = salienceport.ViewMeta
	Usage        = salienceport.Usage
	LogRow       = salienceport.LogRow
)

// UsageKey names an item of the vocabulary in Read.Usage.
func UsageKey(kind, id string) string { return salienceport.UsageKey(kind, id) }

// salienceFor begins the read's salience: nil when no feature is
// salience or it is off for the service or the room.
func (s *Service) salienceFor(ctx context.Context, rc *roomCtx, roomID string) (SalienceRead, error) {
	if s.noSalience || s.wired.salience == nil {
		return nil, nil
	}
	return s.wired.salience.Begin(ctx, s.salienceRead(rc, roomID))
}

// salienceRead is rc as salience is handed it: the read rule applied
// here, once, by the read's own answers (actEnabled, the views shown,
// the state and visibility the read built), so salience has no read rule
// of its own.
func (s *Service) salienceRead(rc *roomCtx, roomID string) *Read {
	snap := rc.snap
	acts := make(map[string]ActionMeta, len(rc.actEnabled))
	for id, on := range rc.actEnabled {
		if a := snap.actions[id]; on && a != nil {
			acts[id] = ActionMeta{Def: a.def, Revision: a.r.Revision, UpdatedAt: a.r.UpdatedAt}
		}
	}
	views := make([]ViewMeta, 0, len(snap.views))
	for _, v := range snap.views {
		if _, shown := rc.views[v.def.ID]; shown {
			views = append(views, ViewMeta{Def: v.def, Revision: v.r.Revision})
		}
	}
	return salienceport.New(salienceport.Room{
		ID: roomID, Seq: snap.seq, Now: rc.now, Self: rc.self, Config: snap.config(), Agents: rc.agents,
		Actions: acts, Views: rc.views, ViewDefs: views, State: rc.state, Unseen: rc.msgs.unseen,
		Readable: rc.readable,
		Row: func(scope, key string) (int64, bool) {
			if r := snap.scopes[scope][key]; r != nil {
				return r.Revision, true
			}
			return 0, false
		},
		Keys: func(scope string) []string {
			out := make([]string, 0, len(snap.scopes[scope]))
			for k := range snap.scopes[scope] {
				out = append(out, k)
			}
			return out
		},
		Usage:     func() (map[string]*Usage, error) { return snap.usageAt(roomID) },
		RecentLog: func(ctx context.Context) ([]LogRow, error) { return s.recentLog(ctx, rc, roomID) },
		ViewsChangedUnseen: func(ctx context.Context, from int64) map[string]bool {
			return s.viewsChangedUnseen(ctx, rc, roomID, from)
		},
		Memo: snap.memoOf,
		Say:  func(args map[string]any) string { return expand(rc, roomID, args) },
		Warn: func(msg string, args ...any) { s.log.Warn(msg, append([]any{"room", roomID}, args...)...) },
	})
}

// memoOf is a value computed once per room snapshot (it changes only
// with the seq) under key, shared by every read of that snapshot
// (Read.Memo).
func (snap *snapshot) memoOf(key string, f func() any) any {
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

// usageAt is the room's vocabulary usage at the snapshot's seq, read
// once per snapshot by the transaction that read the seq
// (snapshot.loadUsage): readRoom loads it on its long path and takes a
// cached snapshot only with it (readReady), and every Read is made from
// a readRoom's snapshot (Context, Wait, ListViews). A snapshot without it
// did not come from there (one a mutation advanced, say): loading it now
// could hold uses committed after the read's seq (an invocation named by
// since_your_last_read whose effects the read does not show), so that is
// an error, not a late load. Once loaded the map is never written again.
func (snap *snapshot) usageAt(roomID string) (map[string]*Usage, error) {
	snap.usageMu.Lock()
	defer snap.usageMu.Unlock()
	if snap.usage == nil {
		return nil, fmt.Errorf("substrate: the vocabulary usage of room %q at seq %d was not read with the snapshot (a read must come from readRoom)", roomID, snap.seq)
	}
	return snap.usage, nil
}

// windowSize is how many recent entries of each log RecentLog reads.
const windowSize = 500

// recentLog is the newest windowSize entries of each of the room's logs
// up to rc's seq, its messages those rc's reader sees (Read.RecentLog).
func (s *Service) recentLog(ctx context.Context, rc *roomCtx, roomID string) ([]LogRow, error) {
	unseen := rc.msgs.unseen
	if unseen == nil {
		unseen = []int64{}
	}
	rows, err := s.db.Query(ctx, sqlLogWindow, roomID, windowSize, rc.snap.seq, unseen)
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
