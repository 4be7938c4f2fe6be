// The context read: the reader's context (roomctx.go, loaded by
// readpath.go) handed to substrate/envelope, which fills the envelope from
// it (envelope.Reading) with the statements the core hands it for the
// rest; salience annotates it from a Read of it (substrate/salienceport's,
// filled here with the read rule applied); then it is cut to its budget.

package substrate

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/salienceport"
)

// The envelope (a context read's result), and the results of wait, eval
// and help, are substrate/envelope's; the core's names for them are these.
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
// then the sections (envelope.Reading.Fill), whose own statements
// (messages, logs, usage) run one at a time on pooled connections and
// stop at the read's seq, so they agree with its state. Messages it
// returns to an agent are then marked read.
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
	r := s.reading(rc, roomID)
	note, shown := envelope.DeltaRequest(&req, r.MostlyChanged)
	if sl != nil && sl.FirstReadFull() && req.Depth == "lean" && req.Since == nil && !req.Peek && note == "" {
		req.Depth = "full"
		note = "your first read of this room is at depth full, once, so you see the whole vocabulary; later reads are lean unless you ask"
	}
	env, err := r.Fill(ctx, req)
	if err != nil {
		return nil, err
	}
	env.Context.Note = note
	if sl != nil {
		sl.Annotate(ctx, env, req)
	}
	env.Attend(r.OverdueAcks(s.ackOverdue))
	if req.Since != nil {
		unseen, err := s.unseenAt(ctx, rc.snap, *req.Since)
		if err != nil {
			return nil, err
		}
		deltaOf(env, rc, roomID, *req.Since, *req.MessagesAfter, shown, unseen)
		env.Context.Request.MessagesLimit = shown
	}
	if req.MaxBytes > 0 {
		r.Fit(env, req)
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

// reading is rc as its envelope is filled from it (envelope.Reading):
// what the read built, its snapshot's entries, and the statements that
// read the rest, on pooled connections, up to the read's seq.
func (s *Service) reading(rc *roomCtx, roomID string) *envelope.Reading {
	snap := rc.snap
	live := snap.live(rc.now)
	return &envelope.Reading{Room: roomID, Seq: snap.seq, Now: rc.now, Self: rc.self, ReadOnly: rc.p != nil && rc.p.ReadOnly(),
		Say: rc.p.Say, About: snap.about, Params: rc.vars.Params,
		State: rc.state, Stored: live.raw, Modified: rc.modified, Enc: live, Visible: rc.visible,
		Agents: rc.vars.Agents, Roster: rc.agents, Views: rc.views,
		Enabled: rc.actEnabled, Available: rc.actAvail, RoomActions: len(snap.actions),
		Action: func(id string) *ActionDef { return snap.actions[id].def },
		Cooldown: func(id string) map[string]any {
			if cd := s.cooldownOf(snap, id, rc.now); cd != nil {
				return cd.describeCooldown(rc.now)
			}
			return nil
		},
		Builtins: builtinDescriptions, BuiltinParams: builtinParams,
		Count: rc.msgs.Count, Unread: rc.msgs.Unread, DirectedUnread: rc.msgs.Directed, Counted: rc.counted,
		Unevaluated: rc.gatesHidden,
		Row: func(scope, key string) (envelope.Row, bool) {
			if r := snap.scopes[scope][key]; r != nil {
				return rc.rowOf(r), true
			}
			return envelope.Row{}, false
		},
		Rows: func(scope string) iter.Seq[envelope.Row] {
			return func(yield func(envelope.Row) bool) {
				for _, r := range snap.scopes[scope] {
					if !yield(rc.rowOf(r)) {
						return
					}
				}
			}
		},
		Sources: func(yield func(string) bool) {
			for _, a := range snap.actions {
				if !yield(a.def.If) || !yield(a.def.Enabled) {
					return
				}
			}
			for _, v := range snap.views {
				if !yield(v.def.Expr) {
					return
				}
			}
		},
		Log: func(ctx context.Context, scope string, limit int) (map[string]any, error) {
			return s.loadLog(ctx, s.db, rc, roomID, scope, limit, snap.seq)
		},
		Messages: func(ctx context.Context, req ContextRequest) ([]envelope.Message, error) {
			return scanMsgRows(queryMessages(ctx, s.db, rc, roomID, req))
		},
		Directed: func(ctx context.Context, limit int) ([]envelope.Message, error) {
			return scanMsgRows(s.db.Query(ctx, sqlDirectedUnread, roomID, rc.self, rc.msgs.seen, snap.seq, limit))
		},
		Gate:        func(ctx context.Context) func(enabled *string) bool { return s.logGate(ctx, rc) },
		Invocations: func(ctx context.Context) (map[string]int, error) { return invocationCounts(ctx, s.db, roomID) },
		ReadUpTo:    &rc.readUpTo,
	}
}

// rowOf is r as the envelope reads it, live or not at the read's time.
func (rc *roomCtx) rowOf(r *srow) envelope.Row {
	return envelope.Row{Key: r.Key, Value: r.Value, Writer: r.Writer, Revision: r.Revision, Version: r.Version, Live: r.timer.live(rc.now)}
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
func scanMsgRows(rows pgx.Rows, err error) ([]envelope.Message, error) {
	if err != nil {
		return nil, err
	}
	var read []envelope.Message
	for rows.Next() {
		var m envelope.Message
		if err := rows.Scan(&m.Seq, &m.Raw, &m.Writer, &m.Via, &m.Enabled); err != nil {
			rows.Close()
			return nil, err
		}
		read = append(read, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return read, nil
}

// MessageThread is the thread a message of the context's messages.recent
// belongs to (0: none): its thread, or its own seq when it starts one.
func MessageThread(m map[string]any) int64 { return envelope.MessageThread(m) }

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

// versionsRead is the read that shows the versions of scope's entries
// (envelope.VersionsRead).
func versionsRead(scope string) map[string]any { return envelope.VersionsRead(scope) }

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
		Keys:      func(scope string) []string { return slices.Collect(maps.Keys(snap.scopes[scope])) },
		Usage:     func() (map[string]*Usage, error) { return snap.usageAt(roomID) },
		RecentLog: func(ctx context.Context) ([]LogRow, error) { return s.recentLog(ctx, rc, roomID) },
		ViewsChangedUnseen: func(ctx context.Context, from int64) map[string]bool {
			return s.viewsChangedUnseen(ctx, rc, roomID, from)
		},
		Memo: snap.memoOf,
		Say: func(args map[string]any) string {
			return rc.p.Say(errs.Step{Op: errs.OpReadContext, Room: roomID, Args: args})
		},
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
