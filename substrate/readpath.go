// The read path: loading a room for a reader. One consistent read of the
// room (its snapshot, served from this process's cache when the room is
// unchanged, its presence, the reader's unread counts), the context built
// from it once the connection is released, and the gates a log entry
// passes before a reader sees it. What the envelope shows of it is
// context.go's.

package substrate

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/exprbudget"
	"github.com/syncsubstrate/sync/substrate/internal/coalesce"
	"github.com/syncsubstrate/sync/substrate/internal/readmarks"
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

// work admits a request of p that will evaluate expressions in roomID
// and returns the context that charges them to the room's budget p draws
// on (exprbudget: the rule, and why a request admitted finishes); done
// ends the request's use of it, and the caller defers it.
//
// Every public entry that evaluates expressions for a room admits once, at
// its start, and passes the returned context down; readCtx refuses a
// context that was not (admitted), so an entry that forgets is an error in
// every test that calls it, not an unmetered read.
func (s *Service) work(ctx context.Context, p *Principal, roomID string) (_ context.Context, done func(), _ error) {
	ctx, done, err := exprbudget.Admit(ctx, s.workMeter, budgetOf(p, roomID), roomID, s.lim.RoomCostPerSecond, time.Now())
	if err != nil {
		s.roomBusy.Add(1)
	}
	return ctx, done, err
}

// budgetOf is the budget p's requests in roomID draw on: a principal
// authenticated with the view token draws on the view link's, every
// other read-only one on the observers'.
func budgetOf(p *Principal, roomID string) exprbudget.Budget {
	return exprbudget.Of(roomID, p != nil && p.Kind == KindView && p.TokenHash() != nil, p != nil && p.ReadOnly())
}

// admitted reports whether ctx was admitted (work) for the budget p's
// requests in roomID draw on.
func admitted(ctx context.Context, p *Principal, roomID string) bool {
	return exprbudget.Admitted(ctx, budgetOf(p, roomID))
}

// notAdmitted is readCtx's answer to a context no entry admitted: a bug
// (an entry that reads a room without charging it), loud in every test
// that reaches it, and logged in production rather than served unmetered.
func (s *Service) notAdmitted(roomID string) error {
	s.log.Error("a room context was read on a request not admitted to the room's expression budget: its entry must call work first", "room", roomID)
	return errs.New(errs.Internal, "internal error: the read was not admitted to room %q's expression budget", roomID).
		WithHint("retry later; if it persists, report it with the time of the request")
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
			s.marks.Overlay(roomID, presenceRows(out.agents))
			agents = out.agents
		case out.counted && p != nil && p.Kind == KindAgent:
			// The counts need only the reader's own last read.
			a := presence{ID: p.AgentID}
			if err := tx.QueryRow(ctx, `SELECT last_seen_seq FROM agents WHERE room_id = $1 AND id = $2`, roomID, p.AgentID).Scan(&a.LastSeenSeq); err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			agents = []presence{a}
			s.marks.Overlay(roomID, presenceRows(agents))
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
		h, err := s.waitq.Head(ctx, roomID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, errs.New(errs.RoomNotFound, "room %q does not exist", roomID)
		}
		if err != nil {
			return nil, false, err
		}
		return s.readRoomCachedAt(ctx, p, roomID, wantMsgs, false, h.Seq, h.Count, h.Born, nil)
	}
	// One statement is one snapshot: the seq and the rows agree without a
	// transaction around them (BEGIN and COMMIT were half the statements
	// of every agent's read of an unchanged room). Presence is read once
	// for the readers of the room at this moment (readPresence).
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
	s.marks.Overlay(roomID, presenceRows(agents))
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
		s.marks.Overlay(roomID, presenceRows(agents))
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

// markRead records an agent's read: the seq it saw, one more read, the
// newest message it was shown. The marks are advice (unread counts,
// salience), so the write does not wait for the disk: losing the last
// few to a crash costs nothing a later read does not repair. It is
// queued for the background writer (internal/readmarks), off the request path;
// only once the service is closing does the read write it itself.
func (s *Service) markRead(ctx context.Context, roomID string, rc *roomCtx) error {
	if s.marks.Add(roomID, rc.self, readmarks.Mark{Seq: rc.snap.seq, UpTo: rc.readUpTo, Reads: 1}) {
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
			out[r.key] = envelope.ShownMessage(r.value, r.writer, r.via)
			continue
		}
		out[r.key] = r.value
	}
	return out, nil
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
			vars = &expr.Vars{State: rc.state, Self: rc.self, Now: rc.now, Agents: envelope.AgentsVar(rc.agents)}
		}
		g, _ := s.evalGate(ctx, *enabled, vars)
		b.spent += g.cost
		return g.on
	}
}

// Agents reading one room at once share one read of its seq and presence.
// Every agent's context read needs both, fresh (presence changes without
// a seq: heartbeats, statuses, joins), and with eight agents reading a
// room the same statement ran eight times over for the same answer. The
// coalescer answers a read only with a statement that began after the
// read arrived, so what it shows is at least as new as what it would have
// read alone (TestAttackSharedPresenceReadIsNeverOlderThanTheRequest);
// each reader gets its own copy of the rows (the read marks are laid over
// them per read).

// roomPresence is a room's seq, message count and birth with its agents,
// read in one statement.
type roomPresence struct {
	seq, count int64
	born       time.Time
	agents     []presence
}

// readPresence is the room's seq and presence, read by a statement that
// began after this call.
func (s *Service) readPresence(ctx context.Context, roomID string) (roomPresence, error) {
	s.presenceOnce.Do(func() { s.presence = newPresenceReads(s.db) })
	return s.presence.Do(ctx, roomID, struct{}{})
}

func newPresenceReads(db *store.DB) *coalesce.Batcher[string, struct{}, roomPresence] {
	return &coalesce.Batcher[string, struct{}, roomPresence]{Run: func(ctx context.Context, roomID string, reqs []struct{}) ([]roomPresence, error) {
		var h roomPresence
		rows, err := db.Query(ctx, sqlRoomPresence, roomID)
		if err != nil {
			return nil, err
		}
		found := false
		for rows.Next() {
			var a presence
			var id *string
			if err = rows.Scan(&h.seq, &h.count, &h.born, &id, &a.Name, &a.Role, &a.Status, &a.WaitingOn, &a.LastHeartbeat, &a.LastSeenSeq, &a.LastContextSeq, &a.ContextReads, &a.Enabled, &a.Account); err != nil {
				break
			}
			found = true
			if id != nil {
				a.ID = *id
				h.agents = append(h.agents, a)
			}
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		if err == nil && !found {
			err = pgx.ErrNoRows
		}
		if err != nil {
			return nil, err
		}
		out := make([]roomPresence, len(reqs))
		for i := range out {
			out[i] = h
			out[i].agents = slices.Clone(h.agents)
		}
		return out, nil
	}}
}

// presenceRows are agents' presence rows as read marks see them: the
// marks this process has not written yet are laid over them
// (readmarks.Marks.Overlay) before a rule reads them.
type presenceRows []presence

func (r presenceRows) Len() int { return len(r) }

func (r presenceRows) At(i int) (agent string, lastContextSeq, lastSeenSeq, contextReads *int64) {
	a := &r[i]
	return a.ID, &a.LastContextSeq, &a.LastSeenSeq, &a.ContextReads
}

// sqlMarkReads writes a batch of read marks (readmarks.New) and returns
// each row's context_reads with them: the seqs are maxima, the reads add.
// The rooms are named as a parameter too: Citus routes on a parameter,
// not on a join with unnest, which it sent to every shard.
const sqlMarkReads = `UPDATE agents AS a SET last_context_seq = greatest(a.last_context_seq, v.seq),
		context_reads = a.context_reads + v.reads, last_seen_seq = greatest(a.last_seen_seq, v.up_to)
	FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[]) AS v(room_id, id, seq, reads, up_to)
	WHERE a.room_id = ANY($1::text[]) AND a.room_id = v.room_id AND a.id = v.id
	RETURNING a.room_id, a.id, a.context_reads`

// admittedRead starts a read of one room by p that needs p's context of
// it: p may address the room, the read is admitted to the room's
// expression budget (done ends that; call it when the read is over), and
// the context is built. ctx is the admitted one, to evaluate under.
func (s *Service) admittedRead(ctx context.Context, p *Principal, roomID string) (_ context.Context, rc *roomCtx, done func(), err error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, nil, nil, err
	}
	ctx, done, err = s.work(ctx, p, roomID)
	if err != nil {
		return nil, nil, nil, err
	}
	if rc, err = s.readCtx(ctx, p, roomID, false); err != nil {
		done()
		return nil, nil, nil, err
	}
	return ctx, rc, done, nil
}
