package substrate

import (
	"context"
	"crypto/subtle"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/internal/groupcommit"
	"github.com/syncsubstrate/sync/substrate/internal/readmarks"
)

// mutation is one room mutation in flight: the locked room, the sequence
// numbers it took, and the statements it will send.
type mutation struct {
	ctx   context.Context
	tx    querier
	room  string
	p     *Principal // nil for an anonymous open-join
	actor string
	now   time.Time
	base  int64 // the room's seq before this mutation
	// msgCount is the room's _messages count before this mutation.
	msgCount int64
	// cacheKey names this incarnation of the room in the snapshot cache.
	cacheKey string
	next     int64 // next sequence number to hand out
	batch    pgx.Batch
	audit    map[string]any
	// messages is the change in the room's _messages count.
	messages int64
	// pending are the state rows to write at commit; ticks the
	// "<scope>.<key>" targets written, which tick logical timers.
	pending []pendingWrite
	ticks   []string
	// vocab are the actions and views this mutation used or registered,
	// and decay the room's salience decay, for vocabulary_usage.
	vocab []vocabTouch
	decay float64
	// before holds, per entry the mutation writes, the row as it was
	// when the mutation first read it (nil: absent), for the audit delta.
	before map[entryKey]prior
	// snap is the room's snapshot at base, once the mutation loaded it.
	snap *snapshot
	// agents is the room's presence, read under the lock (see presence).
	agents       []presence
	agentsLoaded bool
	// marks are the read marks not yet written, laid over presence.
	marks *readmarks.Marks
	// group is the group transaction this mutation is one savepoint of
	// (nil: a transaction of its own).
	group *groupTx
}

// presence is the room's agents as of the room lock: read in the locking
// round trip when the mutation was started with withPresence, else now.
func (m *mutation) presence() ([]presence, error) {
	if !m.agentsLoaded {
		a, err := loadPresence(m.ctx, m.tx, m.room)
		if err != nil {
			return nil, err
		}
		m.marks.Overlay(m.room, presenceRows(a))
		m.agents, m.agentsLoaded = a, true
	}
	return m.agents, nil
}

// roomReads is the room's context reads as of the presence the mutation
// read under the lock: every agent's count with this process's marks laid
// over (readmarks.Marks.Overlay), the count a read's salience decays by. Taken
// from the overlaid rows, not from the rows the vocabulary statement
// reads later: a write of marks that committed in between would be in
// those rows and in the marks queued before it, counted twice.
func (m *mutation) roomReads() (int64, error) {
	agents, err := m.presence()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, a := range agents {
		n += a.ContextReads
	}
	return n, nil
}

// mutateOpts tune what the locking round trip reads.
type mutateOpts struct {
	// withPresence reads the room's agents with the lock, for mutations
	// that evaluate CEL (which sees agents): one round trip fewer while
	// the room is locked. Default false.
	withPresence bool
	// grouped lets the mutation share its room's group transaction
	// (mutateGrouped, below) when the service has group commit on.
	grouped bool
}

// seq hands out the next room sequence number (for an append entry).
func (m *mutation) seq() int64 {
	n := m.next
	m.next++
	return n
}

// querier is what a mutation's callback may run statements on: the
// connection holding the open transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// mutate runs fn as one room mutation. fn takes sequence numbers for append
// entries with m.seq(); one more is taken for the _audit entry, whose
// sort_key becomes the mutation's seq. The room row stays locked from the
// first statement to commit, so mutations of a room are totally ordered and
// sequence numbers are gap-free. For an agent principal the agent's grants
// are re-read after the lock, so a grant revoked a moment ago is not used.
//
// The transaction is pipelined to keep the room locked for as few round
// trips as possible: BEGIN goes out with SELECT … FROM rooms … FOR UPDATE
// (which locks the row and reads its seq; the sequence numbers taken are
// written back with the mutation), and fn's queued writes, the audit
// entry, the notification and COMMIT go out together. State reads fn
// needs happen in between, after the lock, so they see every earlier
// mutation of the room.
func (s *Service) mutate(ctx context.Context, p *Principal, roomID string, fn func(m *mutation) error) (seq int64, err error) {
	return s.mutateWith(ctx, p, roomID, mutateOpts{}, fn)
}

// mutateWith is mutate with options for the locking round trip.
func (s *Service) mutateWith(ctx context.Context, p *Principal, roomID string, o mutateOpts, fn func(m *mutation) error) (seq int64, err error) {
	// A connection left inside a transaction is closed by the pool on
	// release rather than reused, so a failed ROLLBACK cannot leak state.
	if o.grouped && s.group != nil {
		return s.mutateGrouped(ctx, p, roomID, o, fn)
	}
	err = s.db.WithConn(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		seq, err = s.mutateOn(ctx, conn, p, roomID, o, fn)
		return err
	})
	return seq, err
}

// mutateOn runs one mutation on conn, in a transaction of its own.
func (s *Service) mutateOn(ctx context.Context, conn *pgxpool.Conn, p *Principal, roomID string, o mutateOpts, fn func(m *mutation) error) (seq int64, err error) {
	open := false
	defer func() {
		if !open || err == nil {
			return
		}
		if _, rbErr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
			s.log.Warn("rollback failed", "room", roomID, "err", rbErr)
		}
	}()

	m := &mutation{ctx: ctx, tx: conn, room: roomID, p: p, marks: s.marks}
	agentID := ""
	if p != nil && p.Kind == KindAgent {
		agentID = p.AgentID
	}
	var grants []string
	// The token the caller was authenticated with must still be the
	// room's (or its agent's) under the lock: a write authenticated just
	// before a rotation that commits while it queues is refused, not
	// applied with the old token (issue 25 item 8: "refused at once").
	roomHash, viewHash, agentHash := p.TokenHashes()
	tokenValid := true
	var lock pgx.Batch
	lock.Queue("BEGIN")
	lock.Queue(`SELECT seq, message_count, created_at,
			coalesce(($2::bytea IS NULL OR token_hash = $2) AND ($3::bytea IS NULL OR view_token_hash = $3), false)
		FROM rooms WHERE id = $1 FOR UPDATE`, roomID, roomHash, viewHash)
	// The mutation's time is read once the lock is held, in a statement
	// of its own: now() is the transaction's start, before any wait for
	// the lock, and an expression of the locking statement may be
	// evaluated before the wait too. A queued mutation so stamps its
	// entries (and starts its timers) no earlier than the mutation that
	// committed before it: time goes in step with seq.
	lock.Queue(`SELECT clock_timestamp()`)
	if agentID != "" {
		// A statement of its own, after the lock: a statement that waited
		// for the lock sees the locked row as committed, but reads every
		// other table as of its start, which would miss a revocation
		// committed by the mutation it waited for.
		lock.Queue(sqlAgentGrant, roomID, agentID, agentHash)
	}
	if o.withPresence {
		lock.Queue(sqlPresence, roomID)
	}
	br := conn.SendBatch(ctx, &lock)
	open = true
	_, err = br.Exec()
	if err == nil {
		var born time.Time
		err = br.QueryRow().Scan(&m.base, &m.msgCount, &born, &tokenValid)
		m.cacheKey = cacheKey(roomID, born)
	}
	if err == nil {
		err = br.QueryRow().Scan(&m.now)
	}
	if err == nil && agentID != "" {
		agentValid := true
		if err = br.QueryRow().Scan(&grants, &agentValid); errors.Is(err, pgx.ErrNoRows) {
			err, grants = nil, nil // the agent is gone: refused below
		}
		tokenValid = tokenValid && agentValid
	}
	if err == nil && o.withPresence {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			m.agents, err = scanPresence(rows)
			m.agentsLoaded = err == nil
			s.marks.Overlay(roomID, presenceRows(m.agents))
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, errNoRoom(roomID)
	}
	if err != nil {
		return 0, err
	}
	if err = m.admit(tokenValid, grants); err != nil {
		return 0, err
	}
	last, err := s.seal(m, fn)
	if err != nil {
		return 0, err
	}
	m.batch.Queue(store.NotifySQL, store.NotifyChannel, roomID+" "+strconv.FormatInt(last, 10))
	m.batch.Queue("COMMIT")
	if err = conn.SendBatch(ctx, &m.batch).Close(); err != nil {
		return 0, writeErr(err)
	}
	open = false
	s.advanceSnapshot(m, last)
	return last, nil
}

// sqlAgentGrant reads an agent's grants and whether its token ($3) is
// still its own.
const sqlAgentGrant = `SELECT grants, coalesce($3::bytea IS NULL OR token_hash = $3, false) FROM agents WHERE room_id = $1 AND id = $2`

// errNoRoom is the refusal of a mutation of a room that does not exist.
func errNoRoom(roomID string) error {
	return errs.New(errs.RoomNotFound, "room %q does not exist", roomID).WithHint("check the room id, or create the room").
		WithNext(errs.Step{Op: errs.OpCreateRoom, Args: map[string]any{"room": roomID}})
}

// writeErr is the caller's error for a refused write statement.
func writeErr(err error) error {
	if store.IsUniqueViolation(err) {
		return errs.New(errs.KeyExists, "a key written by this request already exists").WithHint("write to another key, or omit the key of an append entry")
	}
	return err
}

// admit decides, from what was read under the room lock (m.base set),
// whether the caller's credential still holds (tokenValid) and, for an
// agent, with which grants (nil: the agent is gone).
func (m *mutation) admit(tokenValid bool, grants []string) error {
	m.next = m.base + 1
	if !tokenValid {
		return errRotatedMeanwhile()
	}
	p := m.p
	if p != nil && p.Kind == KindAgent && p.AgentID != "" {
		if grants == nil {
			return errs.New(errs.Unauthorized, "agent %q no longer exists", p.AgentID).WithHint("join the room again")
		}
		m.p = p.WithGrants(grants)
	}
	if m.p != nil {
		m.actor = m.p.Actor()
	}
	return nil
}

// seal runs fn on m and queues on m.batch the mutation's statements: its
// writes, the audit entry and (not in a group transaction) the room's new
// seq; not the commit. It returns the mutation's seq.
func (s *Service) seal(m *mutation, fn func(m *mutation) error) (int64, error) {
	roomID := m.room
	if err := fn(m); err != nil {
		return 0, err
	}
	// Defence in depth: whatever path led here, a read-only credential
	// writes nothing (a refused invocation's audit entry is not a write
	// of theirs: it is queued apart from m.pending).
	if m.p != nil && m.p.ReadOnly() && len(m.pending) > 0 {
		return 0, errs.New(errs.ReadOnlyToken, "a read-only credential (%s) cannot write", m.p.Kind).
			WithHint("write with an agent token or the room token")
	}
	if m.audit == nil {
		panic("substrate: mutation without an audit entry")
	}
	last := m.seq()
	for _, w := range m.pending {
		r := w.r
		r.Revision, r.Writer, r.UpdatedAt = last, m.actor, m.now
		if w.del {
			m.batch.Queue(`DELETE FROM state WHERE room_id = $1 AND scope = $2 AND key = $3`, roomID, r.Scope, r.Key)
			continue
		}
		t := r.timer
		if t == nil {
			t = &timerState{}
		}
		m.batch.Queue(`INSERT INTO state (room_id, scope, key, sort_key, value, version, revision, writer, via, created_at, updated_at,
				timer_json, timer_expires_at, timer_ticks_left, timer_tick_on, timer_effect, timer_started_at, enabled_expr)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11, $12, $13, $14, $15, $16, $17)
			ON CONFLICT (room_id, scope, key) DO UPDATE SET sort_key = EXCLUDED.sort_key, value = EXCLUDED.value,
				version = EXCLUDED.version, revision = EXCLUDED.revision, writer = EXCLUDED.writer, via = EXCLUDED.via,
				updated_at = EXCLUDED.updated_at, timer_json = EXCLUDED.timer_json, timer_expires_at = EXCLUDED.timer_expires_at,
				timer_ticks_left = EXCLUDED.timer_ticks_left, timer_tick_on = EXCLUDED.timer_tick_on,
				timer_effect = EXCLUDED.timer_effect, timer_started_at = EXCLUDED.timer_started_at, enabled_expr = EXCLUDED.enabled_expr`,
			roomID, r.Scope, r.Key, r.SortKey, []byte(r.Value), r.Version, last, m.actor, w.via, m.now,
			[]byte(t.JSON), t.ExpiresAt, t.TicksLeft, t.TickOn, t.Effect, t.StartedAt, r.enabled)
	}
	if len(m.ticks) > 0 {
		m.batch.Queue(`UPDATE state SET timer_ticks_left = timer_ticks_left - 1
			WHERE room_id = $1 AND timer_tick_on = ANY($2) AND timer_ticks_left > 0`, roomID, m.ticks)
	}
	if len(m.vocab) > 0 {
		reads, err := m.roomReads()
		if err != nil {
			return 0, err
		}
		m.touchVocabulary(last, m.decay, reads)
	}
	m.audit["delta"] = m.delta()
	m.audit["prev_seq"] = m.base
	m.audit["ts"] = m.now.UTC().Format(time.RFC3339Nano)
	m.audit["by"] = m.actor
	m.audit["seq"] = last
	auditJSON, err := expr.MarshalJSON(m.audit) // json.Marshal's bytes, without reflection (issue 32)
	if err != nil {
		return 0, err
	}
	m.batch.Queue(`INSERT INTO state (room_id, scope, key, sort_key, value, version, revision, writer, via, created_at, updated_at)
		VALUES ($1, '_audit', $2, $3, $4, 1, $3, $5, 'system', $6, $6)`,
		roomID, strconv.FormatInt(last, 10), last, auditJSON, m.actor, m.now)
	if m.group == nil {
		// A group transaction writes the room's row once for all of its
		// invocations (groupTx.Sync).
		m.batch.Queue(`UPDATE rooms SET seq = $2, message_count = message_count + $3 WHERE id = $1`, roomID, last, m.messages)
	}
	return last, nil
}

// advanceSnapshot derives the room's snapshot after a committed mutation
// from the one before it, when this process has that one cached, so the
// next request does not re-read the room. Rooms with logical timers are
// re-read instead: their ticks change rows this mutation did not write.
func (s *Service) advanceSnapshot(m *mutation, seq int64) {
	old := s.snaps.get(m.cacheKey, m.base)
	if old == nil || old.hasTicks() {
		return
	}
	for _, w := range m.pending {
		if w.r.timer != nil && w.r.timer.TicksLeft != nil {
			return
		}
	}
	s.snaps.put(m.cacheKey, old.advance(s, m.pending, seq, m.msgCount+m.messages))
}

// Group commit (issue 32 item 2) is machinery (internal/groupcommit): it
// runs a room's invocations that arrive together in one transaction,
// each between a savepoint and its release. What each of them is judged
// by is this file's, and the same as in a transaction of its own
// (mutateOn): the room's token hashes, its agents' grants and tokens,
// the time and the room's presence, read under the room lock after the
// invocation arrived; the room row's seq and message count as the
// invocations before it left them; the room's snapshot as they left it,
// published only after the commit. An invocation is answered only once
// the transaction that holds it committed, and one that fails takes
// only itself.

// invocation is one mutation a group transaction runs: mutateGrouped's
// arguments.
type invocation struct {
	p  *Principal
	o  mutateOpts
	fn func(m *mutation) error
}

// groupCommit is the service's group commit.
type groupCommit = groupcommit.Group[invocation, chainAt]

func newGroupCommit(s *Service) *groupCommit {
	return groupcommit.New(groupcommit.Config[invocation, chainAt]{
		DB:      s.db,
		Log:     s.log,
		Open:    func(room string) groupcommit.Txn[invocation, chainAt] { return &groupTx{s: s, room: room} },
		Refused: writeErr,
	})
}

// mutateGrouped runs fn as one mutation of roomID through the room's group
// transaction.
func (s *Service) mutateGrouped(ctx context.Context, p *Principal, roomID string, o mutateOpts, fn func(m *mutation) error) (int64, error) {
	return s.group.Do(ctx, roomID, invocation{p: p, o: o, fn: fn})
}

// groupTx is the core's side of one group transaction of a room: what
// its reads under the lock found, and the room as the transaction (not
// yet committed) has it. It is private to the transaction; its snapshot
// is published only after the commit.
type groupTx struct {
	s    *Service
	room string
	// key names the room's incarnation (cacheKey); seq and msgCount are
	// the room's seq and _messages count after the last invocation
	// evaluated; snap is the room's snapshot at seq, when known (nil: an
	// invocation reads it, after the statements before it have run).
	key           string
	seq, msgCount int64
	snap          *snapshot
	// rowSeq and rowCount are the room row's seq and message_count as
	// the statements sent so far leave them: the row is written once for
	// the invocations since (Sync), not once for each.
	rowSeq, rowCount int64
	// What the current round read under the lock: the room's token
	// hashes, the database's clock and when it arrived, the round's
	// agents (grants and token hash) and the room's presence.
	roomHash, viewHash []byte
	clock, clockAt     time.Time
	lastNow            time.Time
	agents             map[string]agentAuth
	presence           []presence
	presenceLoaded     bool
}

// agentAuth is an agent's grants and token hash as read under the lock.
type agentAuth struct {
	grants []string
	hash   []byte
}

// chainAt is the group's view of the room at one point of the transaction.
type chainAt struct {
	seq, msgCount int64
	snap          *snapshot
}

func (g *groupTx) View() chainAt { return chainAt{seq: g.seq, msgCount: g.msgCount, snap: g.snap} }

func (g *groupTx) SetView(v chainAt) { g.seq, g.msgCount, g.snap = v.seq, v.msgCount, v.snap }

// Sync writes the room row's seq and message count, if invocations moved
// them since the last write: before any statement that might read the
// row (an invocation's own reads) and before the commit.
func (g *groupTx) Sync() []groupcommit.Stmt {
	if g.rowSeq == g.seq && g.rowCount == g.msgCount {
		return nil
	}
	seq, count := g.rowSeq, g.rowCount
	g.rowSeq, g.rowCount = g.seq, g.msgCount
	return []groupcommit.Stmt{{SQL: `UPDATE rooms SET seq = $2, message_count = $3 WHERE id = $1`, Args: []any{g.room, g.seq, g.msgCount},
		Undo: func() { g.rowSeq, g.rowCount = seq, count }}}
}

// Commit notifies the room's listeners of the transaction's last seq.
func (g *groupTx) Commit() []groupcommit.Stmt {
	return []groupcommit.Stmt{{SQL: store.NotifySQL, Args: []any{store.NotifyChannel, g.room + " " + strconv.FormatInt(g.seq, 10)}}}
}

// Committed publishes the transaction's snapshot of the room.
func (g *groupTx) Committed() {
	if g.snap != nil && g.snap.seq == g.seq {
		g.s.snaps.put(g.key, g.snap)
	}
}

// now is an invocation's time: the clock the round read under the lock,
// moved on by the time elapsed since (so at most one response's travel
// behind the database's clock, and never behind an earlier invocation's
// time), in the database's precision.
func (g *groupTx) now() time.Time {
	t := g.clock.Add(time.Since(g.clockAt)).Truncate(time.Microsecond)
	if t.Before(g.lastNow) {
		t = g.lastNow
	}
	g.lastNow = t
	return t
}

// admission is, for p, what mutateOn's locking reads say: whether p's
// token is still the room's (or its agent's), and an agent's grants (nil:
// the agent is gone). Grants and token hashes change only in mutations,
// under the room lock this transaction holds: read once, they hold for
// the rest of it.
func (g *groupTx) admission(p *Principal) (tokenValid bool, grants []string) {
	roomHash, viewHash, agentHash := p.TokenHashes()
	tokenValid = (roomHash == nil || sameHash(g.roomHash, roomHash)) && (viewHash == nil || sameHash(g.viewHash, viewHash))
	if p != nil && p.Kind == KindAgent && p.AgentID != "" {
		a, ok := g.agents[p.AgentID]
		if !ok {
			return tokenValid, nil
		}
		grants = a.grants
		tokenValid = tokenValid && (agentHash == nil || sameHash(a.hash, agentHash))
	}
	return tokenValid, grants
}

// sameHash compares a stored token hash (nil: NULL, which matches
// nothing) with a presented one.
func sameHash(stored, presented []byte) bool {
	return stored != nil && subtle.ConstantTimeCompare(stored, presented) == 1
}

// Reads are a round's reads under the lock, for the invocations todo:
// the first round's take the lock.
func (g *groupTx) Reads(first bool, todo []invocation) []groupcommit.Stmt {
	var reads []groupcommit.Stmt
	if first {
		// The row is the transaction's from here on: only its own
		// invocations change it, and the token hashes are read once.
		reads = append(reads, groupcommit.Stmt{Read: func(br pgx.BatchResults) error {
			var born time.Time
			err := br.QueryRow().Scan(&g.seq, &g.msgCount, &born, &g.roomHash, &g.viewHash)
			if errors.Is(err, pgx.ErrNoRows) {
				return errNoRoom(g.room)
			}
			g.key, g.rowSeq, g.rowCount = cacheKey(g.room, born), g.seq, g.msgCount
			return err
		}, SQL: `SELECT seq, message_count, created_at, token_hash, view_token_hash FROM rooms WHERE id = $1 FOR UPDATE`, Args: []any{g.room}})
	}
	// The time, the grants and the presence each in a statement of their
	// own, after the lock (see mutateOn).
	reads = append(reads, groupcommit.Stmt{Read: func(br pgx.BatchResults) error {
		err := br.QueryRow().Scan(&g.clock)
		g.clockAt = time.Now()
		return err
	}, SQL: `SELECT clock_timestamp()`})
	var ids []string
	presence := false
	for _, j := range todo {
		if j.p != nil && j.p.Kind == KindAgent && j.p.AgentID != "" && !slices.Contains(ids, j.p.AgentID) {
			ids = append(ids, j.p.AgentID)
		}
		presence = presence || j.o.withPresence
	}
	if len(ids) > 0 {
		reads = append(reads, groupcommit.Stmt{Read: func(br pgx.BatchResults) error {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			if g.agents == nil {
				g.agents = map[string]agentAuth{}
			}
			for _, id := range ids {
				delete(g.agents, id)
			}
			var id string
			var a agentAuth
			_, err = pgx.ForEachRow(rows, []any{&id, &a.grants, &a.hash}, func() error {
				g.agents[id] = a
				a = agentAuth{}
				return nil
			})
			return err
		}, SQL: `SELECT id, grants, token_hash FROM agents WHERE room_id = $1 AND id = ANY($2)`, Args: []any{g.room, ids}})
	}
	g.presenceLoaded = false
	if presence {
		// Presence changes without the room lock (heartbeats, statuses,
		// read marks): read again each round, after every invocation in
		// the round arrived.
		reads = append(reads, groupcommit.Stmt{Read: func(br pgx.BatchResults) error {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			if g.presence, err = scanPresence(rows); err != nil {
				return err
			}
			g.s.marks.Overlay(g.room, presenceRows(g.presence))
			g.presenceLoaded = true
			return nil
		}, SQL: sqlPresence, Args: []any{g.room}})
	}
	return reads
}

// Eval judges and seals one invocation as a mutation of the group's
// view of the room (q: its own reads, inside its savepoint).
func (g *groupTx) Eval(ctx context.Context, q groupcommit.Querier, j invocation) (groupcommit.Evaluated, error) {
	s := g.s
	m := &mutation{ctx: ctx, tx: q, room: g.room, p: j.p, marks: s.marks, group: g,
		base: g.seq, msgCount: g.msgCount, cacheKey: g.key, now: g.now()}
	if j.o.withPresence && g.presenceLoaded {
		m.agents, m.agentsLoaded = slices.Clone(g.presence), true
	}
	tokenValid, grants := g.admission(j.p)
	if err := m.admit(tokenValid, grants); err != nil {
		return groupcommit.Evaluated{}, err
	}
	last, err := s.seal(m, j.fn)
	if err != nil {
		return groupcommit.Evaluated{}, err
	}
	return groupcommit.Evaluated{Stmts: m.batch.QueuedQueries, Seq: last, Advance: func() {
		s.advanceGroup(m, last)
		g.seq, g.msgCount = last, m.msgCount+m.messages
	}}, nil
}

// cachedSnap is the room's snapshot at m.base when one is at hand without
// a query: the group transaction's own, or the committed one cached.
func (s *Service) cachedSnap(m *mutation) *snapshot {
	if g := m.group; g != nil && g.snap != nil && g.snap.seq == m.base {
		return g.snap
	}
	return s.snaps.get(m.cacheKey, m.base)
}

// advanceGroup moves the group transaction's snapshot past m (released
// at seq); published only after the commit.
func (s *Service) advanceGroup(m *mutation, seq int64) {
	g := m.group
	g.key = m.cacheKey
	old := s.cachedSnap(m)
	g.snap = nil
	if old == nil || old.hasTicks() {
		return
	}
	for _, w := range m.pending {
		if w.r.timer != nil && w.r.timer.TicksLeft != nil {
			return
		}
	}
	g.snap = old.advance(s, m.pending, seq, m.msgCount+m.messages)
}

// lockedSnapshot loads the room's snapshot inside a mutation.
func (s *Service) lockedSnapshot(m *mutation) (*snapshot, error) {
	if snap := s.cachedSnap(m); snap != nil {
		m.snap = snap
		return snap, nil
	}
	if m.group != nil {
		// Read inside the group transaction, so not yet committed: the
		// group's own until its commit publishes it.
		snap, err := s.readSnapshot(m.ctx, m.tx, m.room, m.base, m.msgCount)
		if err == nil {
			m.snap, m.group.snap, m.group.key = snap, snap, m.cacheKey
		}
		return snap, err
	}
	snap, err := s.loadSnapshot(m.ctx, m.tx, m.room, m.cacheKey, m.base, m.msgCount)
	if err == nil {
		m.snap = snap // loadRows takes the rows it holds from it
	}
	return snap, err
}

// evalField evaluates one expression a mutation runs under the room lock
// (an action's if, result and writes, an expression write's value);
// "if" must be boolean.
func (s *Service) evalField(ctx context.Context, field, src string, vars *expr.Vars) (any, error) {
	p, err := s.cel.Compile(src)
	if err == nil {
		if field == "if" {
			var ok bool
			ok, err = s.cel.EvalBool(ctx, p, vars)
			if err == nil {
				return ok, nil
			}
		} else {
			var v any
			v, err = s.cel.Eval(ctx, p, vars)
			if err == nil {
				return v, nil
			}
		}
	}
	if e, ok := err.(*errs.Error); ok {
		return nil, e.With("field", field)
	}
	return nil, err
}
