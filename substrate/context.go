package substrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
)

// maxUnreadCount caps the unread counters: counting is proportional to the
// unread messages, and past this many the exact number does not matter.
const maxUnreadCount = 1000

// sqlPresence reads a room's agents for presence.
const sqlPresence = `SELECT id, name, role, status, waiting_on, last_heartbeat, last_seen_seq, last_context_seq, context_reads, enabled_expr,
			CASE WHEN user_id IS NOT NULL THEN name END
		FROM agents WHERE room_id = $1 ORDER BY joined_at, id`

// sqlRoomPresence is the room's seq with its agents (sqlPresence's
// columns; one row with no agent when it has none), in one statement.
const sqlRoomPresence = `SELECT r.seq, r.message_count, r.created_at, a.id, coalesce(a.name, ''), coalesce(a.role, ''), coalesce(a.status, ''), a.waiting_on,
			coalesce(a.last_heartbeat, r.created_at), coalesce(a.last_seen_seq, 0), coalesce(a.last_context_seq, 0), coalesce(a.context_reads, 0), a.enabled_expr,
			CASE WHEN a.user_id IS NOT NULL THEN a.name END
		FROM rooms r LEFT JOIN agents a ON a.room_id = r.id WHERE r.id = $1 ORDER BY a.joined_at, a.id`

// sqlRoomOwnRead is the room's seq with the reader's last read (NULL for
// a reader with no agents row), in one statement.
const sqlRoomOwnRead = `SELECT r.seq, r.message_count, r.created_at, a.last_seen_seq
		FROM rooms r LEFT JOIN agents a ON a.room_id = r.id AND a.id = $2 WHERE r.id = $1`

// loadPresence reads the room's agents.
func loadPresence(ctx context.Context, q querier, roomID string) ([]presence, error) {
	rows, err := q.Query(ctx, sqlPresence, roomID)
	if err != nil {
		return nil, err
	}
	return scanPresence(rows)
}

func scanPresence(rows pgx.Rows) ([]presence, error) {
	defer rows.Close()
	var out []presence
	for rows.Next() {
		var a presence
		if err := rows.Scan(&a.ID, &a.Name, &a.Role, &a.Status, &a.WaitingOn, &a.LastHeartbeat, &a.LastSeenSeq, &a.LastContextSeq, &a.ContextReads, &a.Enabled, &a.Account); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// countMessages fills the caller's unread counters from the messages after
// its last_seen_seq (bounded by maxUnreadCount).
func countMessages(ctx context.Context, q querier, roomID string, p *Principal, agents []presence, total, upTo int64) (msgCounts, error) {
	mc := msgCounts{Count: total}
	if p == nil || p.Kind != KindAgent {
		return mc, nil
	}
	var seen int64
	for _, a := range agents {
		if a.ID == p.AgentID {
			seen = a.LastSeenSeq
		}
	}
	mc.seen = seen
	var gates, beyond []string
	var directed []bool
	if err := q.QueryRow(ctx, sqlUnread, roomID, seen, p.AgentID, upTo, maxUnreadCount).Scan(&mc.Unread, &mc.Directed, &gates, &directed, &beyond); err != nil {
		return mc, err
	}
	for i, g := range gates {
		mc.gated = append(mc.gated, gatedUnread{enabled: g, directed: i < len(directed) && directed[i]})
	}
	for _, g := range beyond {
		mc.gated = append(mc.gated, gatedUnread{enabled: g, directed: true, uncounted: true})
	}
	return mc, nil
}

// readCtx loads what p perceives of the room now, from one consistent
// snapshot of the database, then builds the context (actions, views) once
// the connection is released: evaluating expressions never holds one.
// Unread counts are computed when wantMsgs is set or an action's enabled or
// if reads messages.
//
// ctx must be admitted to the room's expression budget (work) by the
// public entry that reads: what the caller evaluates after the read (an
// action's if, a caller's expression, search's gates) is charged to the
// room and refused with it. readCtx admitting on its own behalf metered
// only its own evaluations and let the rest run free; now a read on a
// context no entry admitted is an internal error.
func (s *Service) readCtx(ctx context.Context, p *Principal, roomID string, wantMsgs bool) (*roomCtx, error) {
	if !admitted(ctx, p, roomID) {
		return nil, s.notAdmitted(roomID)
	}
	r, err := s.readRoom(ctx, p, roomID, wantMsgs, true)
	if err != nil {
		return nil, err
	}
	rc := s.buildShared(ctx, r.snap, p, r.agents, r.msgs, time.Now())
	rc.counted = r.counted
	if f := foresightOf(ctx); f != nil {
		f.noteRead(rc)
	}
	return rc, nil
}

// roomRead is what one read transaction took from a room.
type roomRead struct {
	snap    *snapshot
	agents  []presence // nil unless asked for
	msgs    msgCounts
	counted bool // msgs holds the reader's unread counts
}

// readRoom reads, in one read-only transaction, the room's snapshot, its
// presence when wantAgents, and the reader's unread counts when wantMsgs
// or an action's gate reads messages.
func (s *Service) readRoom(ctx context.Context, p *Principal, roomID string, wantMsgs, wantAgents bool) (*roomRead, error) {
	if out, ok, err := s.readRoomCached(ctx, p, roomID, wantMsgs, wantAgents); ok || err != nil {
		return out, err
	}
	out := &roomRead{}
	err := s.db.ReadTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var seq, count int64
		var born time.Time
		if err := tx.QueryRow(ctx, `SELECT seq, message_count, created_at FROM rooms WHERE id = $1`, roomID).Scan(&seq, &count, &born); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return errs.New(errs.RoomNotFound, "room %q does not exist", roomID)
			}
			return err
		}
		var err error
		if out.snap, err = s.loadSnapshot(ctx, tx, roomID, cacheKey(roomID, born), seq, count); err != nil {
			return err
		}
		if err := out.snap.loadUsage(ctx, tx); err != nil {
			return err
		}
		out.msgs = msgCounts{Count: count}
		out.counted = wantMsgs || out.snap.actionsUseMessages(s)
		agents := out.agents
		switch {
		case wantAgents:
			if out.agents, err = loadPresence(ctx, tx, roomID); err != nil {
				return err
			}
			s.marks.overlay(roomID, out.agents)
			agents = out.agents
		case out.counted && p != nil && p.Kind == KindAgent:
			// The counts need only the reader's own last read.
			a := presence{ID: p.AgentID}
			if err := tx.QueryRow(ctx, `SELECT last_seen_seq FROM agents WHERE room_id = $1 AND id = $2`, roomID, p.AgentID).Scan(&a.LastSeenSeq); err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			agents = []presence{a}
			s.marks.overlay(roomID, agents)
		}
		if out.counted {
			if out.msgs, err = countMessages(ctx, tx, roomID, p, agents, count, seq); err != nil {
				return err
			}
		}
		out.msgs.hidden, err = s.hiddenMessages(ctx, tx, out.snap, count)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readRoomCached is readRoom for a room whose snapshot this process holds
// at the room's current seq (an unchanged room, the common case: agents
// read far more often than anyone writes): the seq, the presence and the
// reader's last read in one statement, one round trip. ok is false when
// the snapshot is not cached, and the caller reads the room the long way.
func (s *Service) readRoomCached(ctx context.Context, p *Principal, roomID string, wantMsgs, wantAgents bool) (*roomRead, bool, error) {
	agent := p != nil && p.Kind == KindAgent
	own := !wantAgents && agent && wantMsgs
	if !wantAgents && !own {
		// Nothing of the reader's own in the transaction: the readers of
		// the room at this moment (the waits one commit woke) share it.
		h, err := s.waitq.seqs.do(ctx, roomID, struct{}{})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, errs.New(errs.RoomNotFound, "room %q does not exist", roomID)
		}
		if err != nil {
			return nil, false, err
		}
		return s.readRoomCachedAt(ctx, p, roomID, wantMsgs, false, h.seq, h.count, h.born, nil)
	}
	// One statement is one snapshot: the seq and the rows agree without a
	// transaction around them (BEGIN and COMMIT were half the statements
	// of every agent's read of an unchanged room). Presence is read once
	// for the readers of the room at this moment (presenceread.go).
	var seq, count int64
	var born time.Time
	var agents []presence
	var err error
	if wantAgents {
		var h roomPresence
		h, err = s.readPresence(ctx, roomID)
		seq, count, born, agents = h.seq, h.count, h.born, h.agents
	} else {
		var last *int64
		err = s.db.QueryRow(ctx, sqlRoomOwnRead, roomID, p.AgentID).Scan(&seq, &count, &born, &last)
		a := presence{ID: p.AgentID}
		if last != nil {
			a.LastSeenSeq = *last
		}
		agents = []presence{a}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, errs.New(errs.RoomNotFound, "room %q does not exist", roomID)
	}
	if err != nil {
		return nil, false, err
	}
	return s.readRoomCachedAt(ctx, p, roomID, wantMsgs, wantAgents, seq, count, born, agents)
}

// readRoomCachedAt is the rest of readRoomCached once the room's seq (and
// the reader's presence rows, if any) are read.
func (s *Service) readRoomCachedAt(ctx context.Context, p *Principal, roomID string, wantMsgs, wantAgents bool, seq, count int64, born time.Time, agents []presence) (*roomRead, bool, error) {
	agent := p != nil && p.Kind == KindAgent
	var err error
	snap := s.snaps.get(cacheKey(roomID, born), seq)
	if snap == nil || !snap.readReady(count) {
		// A snapshot advanced by a mutation (or a message count the
		// janitor changed) has no usage or hidden-message list yet: both
		// must be read in the transaction that read the seq, so the
		// long way reads them once and later reads come back here.
		return nil, false, nil
	}
	s.marks.overlay(roomID, agents)
	out := &roomRead{snap: snap, msgs: msgCounts{Count: count, hidden: snap.hiddenAt(count)}, counted: wantMsgs || snap.actionsUseMessages(s)}
	if wantAgents {
		out.agents = agents
	}
	if out.counted && agent && agents == nil {
		// An action's gate reads messages: the reader's last read after
		// all (a mark moves it forward only, so reading it now is safe).
		a := presence{ID: p.AgentID}
		if err := s.db.QueryRow(ctx, `SELECT last_seen_seq FROM agents WHERE room_id = $1 AND id = $2`, roomID, p.AgentID).Scan(&a.LastSeenSeq); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, false, err
		}
		agents = []presence{a}
		s.marks.overlay(roomID, agents)
	}
	if out.counted {
		// After the transaction, bounded by its seq: messages up to it do
		// not change, so the counts agree with the snapshot.
		hidden := out.msgs.hidden
		if out.msgs, err = countMessages(ctx, s.db, roomID, p, agents, count, seq); err != nil {
			return nil, false, err
		}
		out.msgs.hidden = hidden
	}
	return out, true, nil
}

// ContextRequest shapes a context read (reference §3.1).
type ContextRequest struct {
	// Depth is lean (default), full (action params, writes, if, scope,
	// intent) or usage (full plus invocation counts).
	Depth string
	// Only keeps the named sections (state, views, agents, actions,
	// messages) or single scopes (state.<scope>).
	Only []string
	// NoActions and NoMessages drop those sections.
	NoActions, NoMessages bool
	// MessagesAfter returns messages with seq > it (oldest first) instead
	// of the newest ones.
	MessagesAfter *int64
	// MessagesLimit caps recent messages: default 100, max 500.
	MessagesLimit int
	// Include adds log scopes (_messages, _audit) to state, newest
	// MessagesLimit entries each.
	Include []string
	// NoContext (context=none) makes a wait return only whether its
	// condition held, with the room seq: no envelope, nothing marked read.
	NoContext bool
	// Full (context=full) makes a wait return the whole context, on a
	// wake-up and on a timeout; Delta (context=delta) what changed since
	// the reader's last read, on a timeout too. Without either a wait
	// wakes with the delta and times out with the condition alone.
	Full, Delta bool
	// Since is where a delta starts (default: the reader's last context
	// read, or for a reader without an agent the room seq when the wait
	// began). Setting it makes a context read a delta too.
	Since *int64
	// MaxBytes is the envelope's size budget in bytes of JSON (0: none);
	// see fitBudget. At most 4 MiB.
	MaxBytes int
	// KeysAfter and Prefix narrow state to the keys after KeysAfter (in
	// key order) that start with Prefix: how a scope too large for one
	// budget is read page by page. With either, or with only naming a
	// single scope, the budget keeps keys in key order, so that the next
	// page (keys_after the last key returned) starts exactly after it.
	KeysAfter, Prefix string
	// AdviseMax is the largest max_bytes a cut's read may advise (0: the
	// 4 MiB any request may ask): a surface whose results have a limit
	// sets what it can hold, and a value larger than that is advised as
	// the expression that evaluates to it, which that surface pages.
	AdviseMax int
	// Reserve is room the budget leaves for what the caller wraps the
	// envelope in (a tool result's other fields): MaxBytes is a ceiling
	// on the whole result.
	Reserve int
	// Peek reads without counting as the reader's read: nothing is marked
	// read and the first read's depth full is kept for the next one (an
	// embodiment's arrival, which shows a part of the room).
	Peek bool
	// Thread narrows messages to one thread (the seq of its first
	// message), oldest first, paged with MessagesAfter; a wait with a
	// thread (and no condition) waits for a message in it.
	Thread int64
}

// adviseMax is the largest budget a cut's read may name.
func (r ContextRequest) adviseMax() int {
	if r.AdviseMax > 0 {
		return min(r.AdviseMax, maxContextBytes)
	}
	return maxContextBytes
}

// paged reports a read that walks state in key order.
func (r ContextRequest) paged() bool {
	if r.KeysAfter != "" || r.Prefix != "" {
		return true
	}
	for _, o := range r.Only {
		if strings.HasPrefix(o, "state.") {
			return true
		}
	}
	return false
}

// keyWanted reports whether a state key is in the read's key range.
func (r ContextRequest) keyWanted(k string) bool {
	return (r.KeysAfter == "" || k > r.KeysAfter) && strings.HasPrefix(k, r.Prefix)
}

// ContextParams are a read's parameters as a surface received them,
// before they are checked: a query string's words parsed into numbers
// (ParseContextRequest), or a tool's typed arguments as they are. A field
// left zero (nil) takes the read's default.
type ContextParams struct {
	Depth string // lean (default), full or usage
	// Only and Include are comma-separated lists: sections (a scope is
	// state.<scope>) and the log scopes _messages and _audit.
	Only, Include string
	// Context is full (default), delta or none.
	Context           string
	MaxBytes          *int
	KeysAfter, Prefix string
	Since             *int64
	NoActions         bool
	NoMessages        bool
	MessagesAfter     *int64
	Thread            *int64
	MessagesLimit     *int // default 100
}

// ParseContextRequest reads the context parameters from a query string.
func ParseContextRequest(get func(string) string) (ContextRequest, error) {
	p := ContextParams{Depth: get("depth"), Only: get("only"), Include: get("include"), Context: get("context"),
		KeysAfter: get("keys_after"), Prefix: get("prefix"),
		NoActions: get("actions") == "false", NoMessages: get("messages") == "false"}
	// A word that is not a number is refused with the same words as a
	// number out of range.
	if v := get("max_bytes"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return ContextRequest{}, maxBytesRefused(v)
		}
		p.MaxBytes = &n
	}
	var err error
	if p.Since, err = queryInt(get, "since", sinceRefused); err != nil {
		return ContextRequest{}, err
	}
	if p.MessagesAfter, err = queryInt(get, "messages_after", messagesAfterRefused); err != nil {
		return ContextRequest{}, err
	}
	if p.Thread, err = queryInt(get, "thread", threadRefused); err != nil {
		return ContextRequest{}, err
	}
	if v := get("messages_limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return ContextRequest{}, messagesLimitRefused(v)
		}
		p.MessagesLimit = &n
	}
	return p.Request()
}

// queryInt reads an optional whole number from a query string.
func queryInt(get func(string) string, name string, refused func(string) error) (*int64, error) {
	v := get(name)
	if v == "" {
		return nil, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return nil, refused(v)
	}
	return &n, nil
}

func maxBytesRefused(v string) error {
	return errs.New(errs.InvalidField, "max_bytes %s is not between %d and %d", v, minContextBytes, maxContextBytes).With("field", "max_bytes").
		WithHint("ask for what you need: the default fits a model's context; raise it to read more at once")
}

func sinceRefused(v string) error {
	return errs.New(errs.InvalidField, "since %s is not a non-negative integer", v).With("field", "since").WithHint("pass the seq of your last read (every result carries it)")
}

func messagesAfterRefused(v string) error {
	return errs.New(errs.InvalidField, "messages_after %s is not a non-negative integer", v).With("field", "messages_after").WithHint("pass the seq of the last message you saw")
}

func threadRefused(v string) error {
	return errs.New(errs.InvalidField, "thread %s is not a message seq", v).With("field", "thread").WithHint("pass the seq of the thread's first message (messages.threads lists them)")
}

func messagesLimitRefused(v string) error {
	return errs.New(errs.InvalidField, "messages_limit %s is not between 1 and 500", v).With("field", "messages_limit").WithHint("use 1–500 (default 100)")
}

// Request checks the parameters and makes the read they ask for: the
// one place a read's parameters are judged, whichever surface sent them.
func (p ContextParams) Request() (ContextRequest, error) {
	var q ContextRequest
	q.Depth = p.Depth
	switch q.Depth {
	case "", "lean", "full", "usage":
	default:
		return q, errs.New(errs.InvalidField, "depth %q is not lean, full or usage", q.Depth).With("field", "depth").WithHint("use depth lean (the default), full or usage")
	}
	if q.Depth == "" {
		q.Depth = "lean"
	}
	q.Only = splitList(p.Only)
	for _, o := range q.Only {
		sec, _, _ := strings.Cut(o, ".")
		if !slices.Contains(sections, sec) {
			return q, errs.New(errs.InvalidField, "only %q names no section", o).With("field", "only").WithHint("sections are %s; a scope is state.<scope>", strings.Join(sections, ", "))
		}
	}
	q.Include = splitList(p.Include)
	for _, inc := range q.Include {
		if inc != ScopeMessages && inc != ScopeAudit {
			return q, errs.New(errs.InvalidField, "include %q: only _messages and _audit can be included", inc).With("field", "include").WithHint(`include "_messages", "_audit" or "_messages,_audit"`)
		}
	}
	if p.MaxBytes != nil {
		if n := *p.MaxBytes; n < minContextBytes || n > maxContextBytes {
			return q, maxBytesRefused(strconv.Itoa(n))
		}
		q.MaxBytes = *p.MaxBytes
	}
	q.KeysAfter, q.Prefix = p.KeysAfter, p.Prefix
	switch p.Context {
	case "":
	case "full":
		q.Full = true
	case "none":
		q.NoContext = true
	case "delta":
		q.Delta = true
	default:
		return q, errs.New(errs.InvalidField, "context %q is not delta, full or none", p.Context).With("field", "context").WithHint(`context "delta" (the default) returns what changed, "full" the whole context, "none" only whether the condition held`)
	}
	if p.Since != nil {
		if *p.Since < 0 {
			return q, sinceRefused(strconv.FormatInt(*p.Since, 10))
		}
		q.Since = p.Since
	}
	q.NoActions, q.NoMessages = p.NoActions, p.NoMessages
	if p.MessagesAfter != nil {
		if *p.MessagesAfter < 0 {
			return q, messagesAfterRefused(strconv.FormatInt(*p.MessagesAfter, 10))
		}
		q.MessagesAfter = p.MessagesAfter
	}
	if p.Thread != nil {
		if *p.Thread <= 0 {
			return q, threadRefused(strconv.FormatInt(*p.Thread, 10))
		}
		q.Thread = *p.Thread
	}
	q.MessagesLimit = 100
	if p.MessagesLimit != nil {
		if n := *p.MessagesLimit; n < 1 || n > 500 {
			return q, messagesLimitRefused(strconv.Itoa(n))
		}
		q.MessagesLimit = *p.MessagesLimit
	}
	return q, nil
}

// splitList reads a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

var sections = []string{"state", "views", "agents", "actions", "messages"}

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
		mc, err := countMessages(ctx, s.db, roomID, rc.p, rc.agents, rc.msgs.Count, rc.snap.seq)
		if err != nil {
			return nil, err
		}
		// The hidden messages were taken out of the count when the
		// context was built: which they are, and when a timer next
		// changes them, stay the read's.
		mc.unseen, mc.next = rc.msgs.unseen, rc.msgs.next
		rc.msgs, rc.counted = mc, true
		s.hideGated(ctx, rc)
	}
	sl, err := s.salienceFor(ctx, rc, roomID)
	if err != nil {
		return nil, err
	}
	note := ""
	if req.Since != nil && mostlyChanged(rc, *req.Since) {
		note = fmt.Sprintf("most of what you see changed since seq %d: this is the whole context, not a delta", *req.Since)
		req.Since = nil
	}
	shown := req.MessagesLimit
	if req.Since != nil {
		if req.MessagesAfter == nil {
			req.MessagesAfter = req.Since
		}
		// A delta shows the newest of the messages since (deltaOf), so it
		// reads them all, up to the most a read returns.
		req.MessagesLimit = 500
	}
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
	if od := rc.overdueAcks(roomID, s.ackOverdue); len(od) > 0 {
		if env.Context.Attention == nil {
			env.Context.Attention = &Attention{}
		}
		env.Context.Attention.OverdueAcks = od
	}
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
		if at := env.Context.Attention; at != nil && env.Context.Budget != nil && at.SinceYourLastRead != nil {
			var cut []string
			for _, c := range env.Context.Budget.Cuts {
				if strings.Count(c.Section, ".") <= 1 { // sections and scopes, not single keys
					cut = append(cut, c.Section)
				}
			}
			for _, sec := range sl.YouElided(at.SinceYourLastRead, cut) {
				if !slices.Contains(at.YouElided, sec) {
					at.YouElided = append(at.YouElided, sec)
				}
			}
		}
	}
	if rc.self != "" && !req.Peek {
		err = s.markRead(ctx, roomID, rc)
	}
	return env, err
}

// markRead records an agent's read: the seq it saw, one more read, the
// newest message it was shown. The marks are advice (unread counts,
// salience), so the write does not wait for the disk: losing the last
// few to a crash costs nothing a later read does not repair. It is
// queued for the background writer (readmarks.go), off the request path;
// only once the service is closing does the read write it itself.
func (s *Service) markRead(ctx context.Context, roomID string, rc *roomCtx) error {
	if s.addReadMark(roomID, rc.self, readMark{seq: rc.snap.seq, upTo: rc.readUpTo, reads: 1}) {
		return nil
	}
	var b pgx.Batch
	b.Queue("BEGIN")
	b.Queue("SET LOCAL synchronous_commit TO off")
	b.Queue(sqlMarkRead, roomID, rc.self, rc.snap.seq, rc.readUpTo)
	b.Queue("COMMIT")
	return s.db.WithConn(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		return conn.SendBatch(ctx, &b).Close()
	})
}

// envelope assembles the context: this is the one place the envelope is
// put together (adaptive salience, seed 000, annotates it afterwards in
// envelopeOf).
func (s *Service) envelope(ctx context.Context, q querier, rc *roomCtx, roomID string, req ContextRequest) (*Envelope, error) {
	want := func(sec string) bool {
		if len(req.Only) == 0 {
			return true
		}
		for _, o := range req.Only {
			if o == sec || strings.HasPrefix(o, sec+".") {
				return true
			}
		}
		return false
	}
	env := &Envelope{Self: rc.self, Params: rc.vars.Params}
	if len(req.Only) == 0 && !req.paged() && req.MessagesAfter == nil && req.Thread == 0 {
		// A whole read says what the room is for; its pages need not.
		env.About = rc.snap.about
	}
	if env.Params == nil {
		env.Params = map[string]any{}
	}
	meta := &env.Context
	meta.Depth = req.Depth
	var present, elided, expand, help []string

	if want("state") {
		st := map[string]any{}
		live := rc.snap.live(rc.now)
		raw := live.raw
		for scope, v := range rc.state {
			if rc.self != "" && scope == rc.self {
				continue // shown as self
			}
			if len(req.Only) > 0 && !slices.Contains(req.Only, "state") && !slices.Contains(req.Only, "state."+scope) {
				continue
			}
			// The stored JSON, when the scope is the shared one: encoding it
			// is far cheaper than re-encoding decoded values.
			name := scope
			if scope == ScopeSelf {
				name = rc.self
			}
			if r, ok := raw[name]; ok && !rc.modified[name] {
				st[scope] = r
				if req.KeysAfter == "" && req.Prefix == "" {
					if env.shared == nil {
						env.shared = map[string]sharedScope{}
					}
					env.shared[scope] = sharedScope{live: live, name: name, m: r}
				}
			} else {
				st[scope] = v
			}
			if req.KeysAfter != "" || req.Prefix != "" {
				st[scope] = keyRange(st[scope], req)
			}
		}
		for _, inc := range req.Include {
			if !rc.visible(inc) {
				continue
			}
			logs, err := s.loadLog(ctx, q, rc, roomID, inc, req.MessagesLimit, rc.snap.seq)
			if err != nil {
				return nil, err
			}
			st[inc] = logs
		}
		env.State = st
		env.setVersions(rc, req)
		present = append(present, "state")
	} else {
		elided = append(elided, "state")
	}
	if want("views") {
		env.Views = rc.views
		// only views.<id> narrows the section to those views.
		var ids []string
		for _, o := range req.Only {
			if id, ok := strings.CutPrefix(o, "views."); ok {
				ids = append(ids, id)
			}
		}
		if len(ids) > 0 && !slices.Contains(req.Only, "views") {
			env.Views = map[string]any{}
			for _, id := range ids {
				if v, ok := rc.views[id]; ok {
					env.Views[id] = v
				}
			}
		}
		present = append(present, "views")
	} else {
		elided = append(elided, "views")
	}
	if want("agents") {
		env.Agents = rc.vars.Agents
		if env.Agents == nil {
			env.Agents = map[string]any{}
		}
		present = append(present, "agents")
	} else {
		elided = append(elided, "agents")
	}
	custom := 0
	if want("actions") && !req.NoActions {
		acts, err := s.actionsSection(ctx, q, rc, roomID, req.Depth)
		if err != nil {
			return nil, err
		}
		for id := range acts {
			if _, builtin := builtinDescriptions[id]; !builtin {
				custom++
			}
		}
		env.Actions = acts
		if req.Depth == "lean" {
			env.Builtins = builtinsLine
			if rc.p != nil && rc.p.ReadOnly() {
				env.Builtins = "help {key?} (read-only: no other action)"
			}
		}
		present = append(present, "actions")
	} else {
		elided = append(elided, "actions")
		custom = len(rc.snap.actions)
	}
	if want("messages") && !req.NoMessages {
		msgs, truncated, err := s.messagesSection(ctx, q, rc, roomID, req)
		if err != nil {
			return nil, err
		}
		env.Messages = msgs
		present = append(present, "messages")
		if truncated {
			help = append(help, "context_shaping")
			meta.MessagesTruncated = msgs.Elided
		}
	} else {
		elided = append(elided, "messages")
	}
	if custom == 0 {
		help = append(help, "vocabulary_bootstrap")
	}
	if rc.msgs.Directed > 0 {
		help = append(help, "directed_messages")
	}
	if _, ok := rc.views[viewContested]; ok {
		help = append(help, "contested_actions")
	}
	meta.Sections = present
	if len(elided) > 0 {
		meta.Elided = elided
		// What was left out, read on its own.
		expand = append(expand, rc.p.say(errs.Step{Op: errs.OpReadContext, Room: roomID,
			Args: map[string]any{"only": strings.Join(elided, ",")}}))
	}
	meta.Expand, meta.Help = expand, help
	meta.Request = req.echo()
	meta.Seq = rc.snap.seq
	meta.EntriesUnevaluated = rc.gatesHidden
	return env, nil
}

func (r ContextRequest) echo() RequestEcho {
	var e RequestEcho
	no := false
	if r.Depth != "lean" {
		e.Depth = r.Depth
	}
	e.Only = strings.Join(r.Only, ",")
	if r.NoActions {
		e.Actions = &no
	}
	if r.NoMessages {
		e.Messages = &no
	}
	e.MessagesAfter = r.MessagesAfter
	if r.MessagesLimit != 100 {
		e.MessagesLimit = r.MessagesLimit
	}
	e.MaxBytes = r.MaxBytes
	e.Include = strings.Join(r.Include, ",")
	e.KeysAfter, e.Prefix = r.KeysAfter, r.Prefix
	return e
}

// keyRange is a scope's entries narrowed to the request's key range (a
// copy: the snapshot's maps are shared between reads).
func keyRange(v any, req ContextRequest) any {
	switch m := v.(type) {
	case map[string]json.RawMessage:
		out := map[string]json.RawMessage{}
		for k, raw := range m {
			if req.keyWanted(k) {
				out[k] = raw
			}
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, val := range m {
			if req.keyWanted(k) {
				out[k] = val
			}
		}
		return out
	}
	return v
}

// loadLog returns the newest n live entries of a log scope the reader
// sees (entry gates applied, as shown), oldest first, as key → value.
func (s *Service) loadLog(ctx context.Context, q querier, rc *roomCtx, roomID, scope string, n int, upTo int64) (map[string]any, error) {
	rows, err := q.Query(ctx, sqlLogPage, roomID, scope, n, upTo)
	if err != nil {
		return nil, err
	}
	type logRow struct {
		key, writer  string
		via, enabled *string
		value        json.RawMessage
	}
	var read []logRow
	for rows.Next() {
		var r logRow
		if err := rows.Scan(&r.key, &r.value, &r.writer, &r.via, &r.enabled); err != nil {
			rows.Close()
			return nil, err
		}
		read = append(read, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// Gates are evaluated once the rows are read (never holding a
	// connection while expressions run).
	shown := s.logGate(ctx, rc)
	out := map[string]any{}
	for _, r := range read {
		if !shown(r.enabled) {
			continue
		}
		if scope == ScopeMessages {
			// As in the messages section: the sender is the recorded
			// writer, never a "from" in the value.
			m := map[string]any{}
			if json.Unmarshal(r.value, &m) != nil {
				m = map[string]any{"body": r.value}
			}
			m["from"] = r.writer
			delete(m, "via")
			if r.via != nil && strings.HasPrefix(*r.via, "action:") {
				m["via"] = *r.via
			}
			sayInvocationOnce(m)
			out[r.key] = m
			continue
		}
		out[r.key] = r.value
	}
	return out, nil
}

// sayInvocationOnce leaves out of an action_invocation message, as a read
// shows it, what its body and via already say: the action (via names it,
// from the system's record) and the params (the body is the call, unless
// it was cut short). The stored message keeps them, for expressions.
func sayInvocationOnce(m map[string]any) {
	action, _ := m["action"].(string)
	if m["kind"] != "action_invocation" || action == "" || m["via"] != "action:"+action {
		return
	}
	delete(m, "action")
	if body, _ := m["body"].(string); strings.HasPrefix(body, action+"(") && !strings.HasSuffix(body, "…)") {
		delete(m, "params")
	}
}

// logGate decides, for one read, whether the reader sees a log entry
// (a message) with an `enabled` expression (nil: ungated), as GET /state's
// log pages do (applyEntryGates): evaluated with the reader's state, self,
// now and agents, against the read's gate budget, failing closed past it.
// A gated message is absent wherever the reader could read it.
func (s *Service) logGate(ctx context.Context, rc *roomCtx) func(enabled *string) bool {
	var vars *expr.Vars
	return func(enabled *string) bool {
		if enabled == nil || rc.p == nil {
			return true
		}
		b, limit := rc.budget(), uint64(s.lim.EnabledCostPerRead)
		if b.spent >= limit {
			b.cut++
			return false
		}
		if vars == nil {
			vars = &expr.Vars{State: rc.state, Self: rc.self, Now: rc.now, Agents: agentsVar(rc.agents)}
		}
		g, _ := s.evalGate(ctx, *enabled, vars)
		b.spent += g.cost
		return g.on
	}
}

// messagesSection returns the message counters and recent messages, and
// marks what it returned as read for an agent caller.
func (s *Service) messagesSection(ctx context.Context, q querier, rc *roomCtx, roomID string, req ContextRequest) (*Messages, bool, error) {
	var rows pgx.Rows
	var err error
	if req.Thread != 0 {
		after := int64(0)
		if req.MessagesAfter != nil {
			after = *req.MessagesAfter
		}
		rows, err = q.Query(ctx, sqlThreadMessages, roomID, req.Thread, after, req.MessagesLimit, rc.snap.seq)
	} else if req.MessagesAfter != nil && req.Since != nil {
		// A delta shows the newest since (deltaOf); the older ones are
		// counted as read, with the read that returns them.
		rows, err = q.Query(ctx, sqlMessagesNewestAfter, roomID, *req.MessagesAfter, req.MessagesLimit, rc.snap.seq)
	} else if req.MessagesAfter != nil {
		rows, err = q.Query(ctx, sqlMessagesAfter, roomID, *req.MessagesAfter, req.MessagesLimit, rc.snap.seq)
	} else {
		rows, err = q.Query(ctx, sqlMessagesRecent, roomID, req.MessagesLimit, rc.snap.seq)
	}
	if err != nil {
		return nil, false, err
	}
	type msgRow struct {
		seq          int64
		raw          json.RawMessage
		writer       string
		via, enabled *string
	}
	var read []msgRow
	for rows.Next() {
		var r msgRow
		if err := rows.Scan(&r.seq, &r.raw, &r.writer, &r.via, &r.enabled); err != nil {
			rows.Close()
			return nil, false, err
		}
		read = append(read, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
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
	// Messages to the reader come first, whatever the backlog: a read of
	// the newest (or a delta) that marks older messages read must not
	// pass over one addressed to it unshown. Those it has not read are
	// added ahead of the page (they are older than it), oldest first; if
	// there are more than a page holds, the read stops short of the first
	// left out, which the next read shows. A page read in order
	// (messages_after) reaches them in turn.
	upTo := int64(-1) // no cap
	if rc.self != "" && req.Thread == 0 && rc.counted && rc.msgs.Directed > 0 && (req.MessagesAfter == nil || req.Since != nil) {
		in := make(map[int64]bool, len(read))
		for _, r := range read {
			in[r.seq] = true
		}
		drows, err := q.Query(ctx, sqlDirectedUnread, roomID, rc.self, rc.msgs.seen, rc.snap.seq, req.MessagesLimit+1)
		if err != nil {
			return nil, false, err
		}
		var directed []msgRow
		for drows.Next() {
			var r msgRow
			if err := drows.Scan(&r.seq, &r.raw, &r.writer, &r.via, &r.enabled); err != nil {
				drows.Close()
				return nil, false, err
			}
			directed = append(directed, r)
		}
		drows.Close()
		if err := drows.Err(); err != nil {
			return nil, false, err
		}
		if len(directed) > req.MessagesLimit {
			if next := directed[req.MessagesLimit].seq; !in[next] {
				upTo = next - 1
			}
			directed = directed[:req.MessagesLimit]
		}
		var ahead []msgRow
		for _, r := range directed {
			if !in[r.seq] {
				ahead = append(ahead, r)
			}
		}
		read = append(ahead, read...)
	}
	shown := s.logGate(ctx, rc)
	recent := []map[string]any{}
	for _, r := range read {
		if !shown(r.enabled) {
			continue
		}
		m := map[string]any{}
		if json.Unmarshal(r.raw, &m) != nil {
			m = map[string]any{"body": r.raw}
		}
		// The sender is who the system recorded as the writer, never a
		// "from" inside the value (an action can put anything there);
		// a message an action wrote says which action in via.
		m["from"] = r.writer
		delete(m, "via")
		if r.via != nil && strings.HasPrefix(*r.via, "action:") {
			m["via"] = *r.via
		}
		sayInvocationOnce(m)
		m["seq"] = r.seq
		if m["ack"] == true {
			if rcpt := rc.receiptsOf(r.seq); rcpt != nil {
				m["receipts"] = rcpt
			}
		}
		recent = append(recent, m)
	}
	out := &Messages{Count: rc.msgs.Count, Unread: rc.msgs.Unread, DirectedUnread: rc.msgs.Directed, Recent: recent}
	if req.Thread != 0 {
		out.Thread = &req.Thread
		if len(read) == req.MessagesLimit {
			out.Elided = &MessagesElided{Total: rc.msgs.Count, Returned: len(recent), OldestSeq: minSeq,
				Expand: rc.p.say(errs.Step{Op: errs.OpReadContext, Room: roomID,
					Args: map[string]any{"only": "messages", "thread": req.Thread, "messages_after": maxSeq}})}
		}
		if rc.self != "" {
			rc.readUpTo = max(rc.readUpTo, maxSeq)
		}
		return out, false, nil
	}
	out.Threads = rc.threadsSection(roomID, recent, rc.seenBefore())
	truncated := req.MessagesAfter == nil && int64(len(read)) < rc.msgs.Count
	if truncated {
		// The rest, read on: after a glimpse of the newest few (an
		// arrival's three), the newest hundred; after those, the whole
		// history from its start, page by page.
		args := map[string]any{"only": "messages", "messages_after": 0, "messages_limit": 500}
		if req.MessagesLimit < 100 {
			args = map[string]any{"only": "messages"}
		}
		out.Elided = &MessagesElided{Total: rc.msgs.Count, Returned: len(recent), OldestSeq: minSeq,
			Expand: rc.p.say(errs.Step{Op: errs.OpReadContext, Room: roomID, Args: args})}
	}
	if req.MessagesAfter != nil && len(read) == req.MessagesLimit && req.Since == nil {
		// A full page: the next one starts right after its last message.
		out.Elided = &MessagesElided{Total: rc.msgs.Count, Returned: len(recent), OldestSeq: minSeq,
			Expand: rc.p.say(errs.Step{Op: errs.OpReadContext, Room: roomID,
				Args: map[string]any{"only": "messages", "messages_after": maxSeq}})}
	}
	if rc.self != "" {
		rc.readUpTo = max(rc.readUpTo, maxSeq)
		if upTo >= 0 {
			rc.readUpTo = min(rc.readUpTo, upTo)
		}
	}
	return out, truncated, nil
}

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
		def := rc.snap.actions[id].def
		// Read-only callers (the view token, observers) can invoke nothing.
		a := ActionView{Signature: signature(id, def.Params), Available: rc.actAvail[id] && !readOnly, Description: def.Description}
		if cd := s.cooldownOf(rc.snap, id, rc.now); cd != nil {
			a.Cooldown = cd.describeCooldown(rc.now)
		}
		if depth != "lean" {
			enabled := true
			a.Params, a.Writes, a.If, a.Enabled = def.Params, def.Writes, def.If, &enabled
			a.Scope, a.RegisteredBy, a.Intent, a.Result = def.Scope, def.RegisteredBy, def.Intent, def.Result
		}
		if counts != nil {
			n := counts[id]
			a.InvocationCount = &n
		}
		out[id] = a
	}
	canAct := !readOnly
	if depth == "lean" {
		return out, nil // builtins are one line: Envelope.Builtins
	}
	for id, desc := range builtinDescriptions {
		if _, overridden := out[id]; overridden {
			continue
		}
		b := ActionView{Available: canAct || id == "help", Builtin: true, Description: desc}
		if depth != "lean" {
			b.Params = builtinParams[id]
		}
		out[id] = b
	}
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

// builtinsLine is the builtins at the lean depth, in one line.
const builtinsLine = "_send_message {body, to?, kind?}; _register_action {id, writes, params?, if?…}; _register_view {id, expr, scope?}; _delete_action {id}; _delete_view {id}; help {key?}"

// signature renders an action's call in brief, params sorted, required
// ones marked *: move(cell*: integer 0…8, note: string).
func signature(id string, params map[string]ParamSpec) string {
	names := make([]string, 0, len(params))
	for n := range params {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		p := params[n]
		t := p.Type
		if t == "" {
			t = "any"
		}
		mark := ""
		if p.Required {
			mark = "*"
		}
		part := n + mark + ": " + t
		if len(p.Enum) > 0 {
			vals := make([]string, 0, len(p.Enum))
			for _, v := range p.Enum {
				raw, _ := json.Marshal(v)
				vals = append(vals, string(raw))
			}
			if len(vals) > 6 {
				vals = append(vals[:2], "…", vals[len(vals)-1])
			}
			part += " " + strings.Join(vals, "|")
		}
		parts[i] = part
	}
	return id + "(" + strings.Join(parts, ", ") + ")"
}

// deltaWholeAt is the share of the entries a reader sees that, changed
// since a delta's start, make it answer with the whole context instead:
// the delta would repeat nearly the whole room, and its list of changed
// keys made it larger than the room (the 500-key room with every key
// changed since the reader's last read: 52,136 bytes as a delta, 43,404
// whole). Rooms with fewer entries than deltaWholeMin always get deltas.
const (
	deltaWholeAt  = 0.8
	deltaWholeMin = 20
)

// mostlyChanged reports whether at least deltaWholeAt of the state
// entries rc shows its reader changed after from.
func mostlyChanged(rc *roomCtx, from int64) bool {
	total, changed := 0, 0
	count := func(scope, key string) {
		total++
		if r := rc.snap.scopes[scope][key]; r != nil && r.Revision > from {
			changed++
		}
	}
	for scope, v := range rc.state {
		switch m := v.(type) {
		case map[string]any:
			for k := range m {
				count(scope, k)
			}
		case map[string]json.RawMessage:
			for k := range m {
				count(scope, k)
			}
		}
	}
	return total >= deltaWholeMin && float64(changed) >= deltaWholeAt*float64(total)
}
