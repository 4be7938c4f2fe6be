package substrate

import (
	"context"
	"crypto/subtle"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate/internal/groupcommit"
)

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
