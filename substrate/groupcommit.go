package substrate

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncsubstrate/sync/store"
)

// Group commit (issue 32 item 2). One transaction per invocation caps a
// room at what PostgreSQL commits serially under the room lock. Instead,
// invocations of a room queue; the first one in leads: on one connection
// it opens a transaction, locks the room row once, and runs the queued
// invocations in it, each between SAVEPOINT and RELEASE, so a failure
// rolls back only itself. Invocations that arrive while the transaction
// is open join it (up to maxGroup); one NOTIFY and COMMIT go out
// together, and every caller is answered after that commit. The leader
// does not wait for company: a batch is whatever queued meanwhile.
//
// The transaction does not wait for the database between invocations
// (runGroup): each is evaluated against the group's own view of the room
// (its seq, _messages count and snapshot as the invocations before it
// left them) while their statements queue, and the statements go out
// together. If PostgreSQL refuses one (a constraint, a trigger), that
// invocation is rolled back to its savepoint and the ones after it,
// evaluated on a view that had it, are evaluated again.

// maxGroup bounds how many invocations one transaction carries, so the
// first caller of a busy room is not kept waiting by an endless stream.
const maxGroup = 64

// groupJob is one invocation waiting for (or in) a group transaction.
type groupJob struct {
	ctx  context.Context
	p    *Principal
	o    mutateOpts
	fn   func(m *mutation) error
	wake chan struct{} // leadership handed to this job
	done chan struct{} // answered: seq, err
	seq  int64
	err  error
	// In the transaction: applied, its statements are queued or ran
	// (seq is its); spSent, its SAVEPOINT went out; before, the group's
	// view of the room before it (where a failure of it goes back to).
	applied, spSent bool
	before          chainAt
}

// roomQueue is one room's invocations waiting for the next transaction.
type roomQueue struct {
	jobs    []*groupJob
	leading bool
}

// groupCommit holds the queues of busy rooms.
type groupCommit struct {
	mu    sync.Mutex
	rooms map[string]*roomQueue
	// batches and grouped count transactions and the invocations they
	// carried; largest is the largest batch; rounds the rounds of reads;
	// redone the invocations evaluated again (Stats).
	batches, grouped, largest, rounds, redone atomic.Int64
}

// groupTx is one group transaction of a room: the connection it runs
// on, what its reads under the lock found, the room as the transaction
// (not yet committed) has it, and the statements not yet sent. It is
// private to the transaction; its snapshot is published only after the
// commit.
type groupTx struct {
	conn *pgxpool.Conn
	ctx  context.Context
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
	// the invocations since (syncRoom), not once for each.
	rowSeq, rowCount int64
	// open: BEGIN went out.
	open bool
	// What the current round read under the lock: the room's token
	// hashes, the database's clock and when it arrived, the round's
	// agents (grants and token hash) and the room's presence.
	roomHash, viewHash []byte
	clock, clockAt     time.Time
	lastNow            time.Time
	agents             map[string]agentAuth
	presence           []presence
	presenceLoaded     bool
	// pend are the statements queued and not yet sent.
	pend []groupStmt
	// evaluated are the invocations evaluated, in order. redo are those a
	// flush found judged on writes PostgreSQL refused (evaluated after
	// the refused invocation): they are evaluated again, in order, before
	// anything else. replay says that the invocation being evaluated must
	// be too.
	evaluated []*groupJob
	redo      []*groupJob
	replay    bool
	// broken: the transaction cannot go on (a rollback to a savepoint
	// failed); every invocation in it fails.
	broken error
	// rounds counts the rounds of reads (Stats).
	rounds int
}

// agentAuth is an agent's grants and token hash as read under the lock.
type agentAuth struct {
	grants []string
	hash   []byte
}

// groupStmt is one queued statement: an invocation's (job) or the
// transaction's own (job nil), with read to consume its result (nil:
// executed, its result dropped).
type groupStmt struct {
	q    *pgx.QueuedQuery
	job  *groupJob
	read func(br pgx.BatchResults) error
	// undo, if set, undoes what queueing it noted, when it did not run.
	undo func()
}

// chainAt is the group's view of the room at one point of the transaction.
type chainAt struct {
	seq, msgCount int64
	snap          *snapshot
}

// errReplay stops an invocation whose evaluation read statements that
// PostgreSQL skipped: it is evaluated again.
var errReplay = errors.New("substrate: group commit: evaluated again")

func (g *groupTx) queue(j *groupJob, sql string, args ...any) {
	g.pend = append(g.pend, groupStmt{q: &pgx.QueuedQuery{SQL: sql, Arguments: args}, job: j})
}

func (g *groupTx) queueRead(read func(br pgx.BatchResults) error, sql string, args ...any) {
	g.pend = append(g.pend, groupStmt{q: &pgx.QueuedQuery{SQL: sql, Arguments: args}, read: read})
}

// syncRoom queues the write of the room row's seq and message count, if
// invocations moved them since the last one: before any statement that
// might read the row (an invocation's own reads) and before the commit.
func (g *groupTx) syncRoom() {
	if g.rowSeq == g.seq && g.rowCount == g.msgCount {
		return
	}
	seq, count := g.rowSeq, g.rowCount
	g.queue(nil, `UPDATE rooms SET seq = $2, message_count = $3 WHERE id = $1`, g.room, g.seq, g.msgCount)
	g.pend[len(g.pend)-1].undo = func() { g.rowSeq, g.rowCount = seq, count }
	g.rowSeq, g.rowCount = g.seq, g.msgCount
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
	roomHash, viewHash, agentHash := p.tokenHashes()
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

// queueReads queues a round's reads under the lock, for the invocations
// todo: the first round opens the transaction and takes the lock. They
// go out after the statements of the invocations already evaluated, so
// they see them.
func (s *Service) queueReads(g *groupTx, todo []*groupJob) {
	if !g.open {
		g.queue(nil, "BEGIN")
		g.open = true
	}
	first := g.rounds == 0
	g.rounds++
	if first {
		// The row is the transaction's from here on: only its own
		// invocations change it, and the token hashes are read once.
		g.queueRead(func(br pgx.BatchResults) error {
			var born time.Time
			err := br.QueryRow().Scan(&g.seq, &g.msgCount, &born, &g.roomHash, &g.viewHash)
			if errors.Is(err, pgx.ErrNoRows) {
				return errNoRoom(g.room)
			}
			g.key, g.rowSeq, g.rowCount = cacheKey(g.room, born), g.seq, g.msgCount
			return err
		}, `SELECT seq, message_count, created_at, token_hash, view_token_hash FROM rooms WHERE id = $1 FOR UPDATE`, g.room)
	}
	// The time, the grants and the presence each in a statement of their
	// own, after the lock (see mutateOn).
	g.queueRead(func(br pgx.BatchResults) error {
		err := br.QueryRow().Scan(&g.clock)
		g.clockAt = time.Now()
		return err
	}, `SELECT clock_timestamp()`)
	var ids []string
	presence := false
	for _, j := range todo {
		if j.p != nil && j.p.Kind == KindAgent && j.p.AgentID != "" && !slices.Contains(ids, j.p.AgentID) {
			ids = append(ids, j.p.AgentID)
		}
		presence = presence || j.o.withPresence
	}
	if len(ids) > 0 {
		g.queueRead(func(br pgx.BatchResults) error {
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
		}, `SELECT id, grants, token_hash FROM agents WHERE room_id = $1 AND id = ANY($2)`, g.room, ids)
	}
	g.presenceLoaded = false
	if presence {
		// Presence changes without the room lock (heartbeats, statuses,
		// read marks): read again each round, after every invocation in
		// the round arrived.
		g.queueRead(func(br pgx.BatchResults) error {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			if g.presence, err = scanPresence(rows); err != nil {
				return err
			}
			s.marks.overlay(g.room, g.presence)
			g.presenceLoaded = true
			return nil
		}, sqlPresence, g.room)
	}
}

// flush sends the queued statements in one round trip and reads their
// results. When PostgreSQL
// refuses a statement of an invocation, that invocation alone fails: the
// transaction goes back to its savepoint, the group's view of the room to
// where it was before it, and the invocations whose statements followed
// (PostgreSQL skipped them, or they were not sent yet) are to be
// evaluated again (g.redo; flush returns errReplay, and none of the
// transaction's own statements queued for it ran). Any other failure is
// the transaction's.
func (g *groupTx) flush() error {
	if len(g.pend) == 0 {
		return nil
	}
	pend := g.pend
	g.pend = nil
	failed, err := readResults(g.conn.SendBatch(g.ctx, batchOf(pend)), pend)
	return g.settled(pend, failed, err)
}

func batchOf(pend []groupStmt) *pgx.Batch {
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, len(pend))}
	for i, st := range pend {
		b.QueuedQueries[i] = st.q
	}
	return b
}

// readResults reads a batch's results: the index of the first statement
// that failed (-1: none) and the error.
func readResults(br pgx.BatchResults, pend []groupStmt) (int, error) {
	failed := -1
	var err error
	for i, st := range pend {
		if st.read != nil {
			err = st.read(br)
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			failed = i
			break
		}
	}
	if cerr := br.Close(); failed < 0 {
		return -1, cerr
	}
	return failed, err
}

// settled acts on the results of pend (see flush). Statements queued
// since (g.pend) would follow pend's: after a refusal they are not sent.
func (g *groupTx) settled(pend []groupStmt, failed int, err error) error {
	if failed < 0 {
		return err
	}
	j := pend[failed].job
	if j == nil {
		return err
	}
	if aborted(err) {
		// The transaction refuses everything: a rollback to a savepoint
		// before did not take. Evaluating the rest again would meet the
		// same refusal, round after round, and never answer the callers.
		g.broken = err
		return err
	}
	if rbErr := rollbackSavepoint(context.WithoutCancel(g.ctx), g.conn); rbErr != nil {
		g.broken = rbErr
		return rbErr
	}
	// The statements after the refused one did not run, nor will those
	// queued since.
	after := append(slices.Clone(pend[failed+1:]), g.pend...)
	g.pend = nil
	for i := len(after) - 1; i >= 0; i-- {
		if after[i].undo != nil {
			after[i].undo()
		}
	}
	j.applied, j.seq, j.err = false, 0, writeErr(err)
	g.seq, g.msgCount, g.snap = j.before.seq, j.before.msgCount, j.before.snap
	// Every invocation evaluated after it was judged on a view that had
	// its writes, whether it queued statements or was refused on its own.
	i := slices.Index(g.evaluated, j)
	for _, k := range g.evaluated[i+1:] {
		k.applied, k.seq, k.err = false, 0, nil
		g.redo = append(g.redo, k)
	}
	g.evaluated = g.evaluated[:i+1]
	return errReplay
}

// takeRedo returns the invocations to evaluate again, in order.
func (g *groupTx) takeRedo() []*groupJob {
	r := g.redo
	g.redo = nil
	return r
}

// redoing counts the invocations about to be evaluated again.
func (s *Service) redoing(g *groupTx) []*groupJob {
	r := g.takeRedo()
	s.group.redone.Add(int64(len(r)))
	return r
}

// groupQuerier is an invocation's connection inside a group transaction:
// a statement of its own (a read of rows the group's snapshot lacks) goes
// out after every statement queued before it, inside its savepoint.
type groupQuerier struct {
	g *groupTx
	j *groupJob
}

func (q *groupQuerier) ready() error {
	if !q.j.spSent {
		q.g.syncRoom()
		q.g.queue(q.j, "SAVEPOINT invocation")
		q.j.spSent = true
	}
	err := q.g.flush()
	if errors.Is(err, errReplay) {
		q.g.replay = true
	} else if err != nil && q.g.broken == nil {
		q.g.broken = err
	}
	return err
}

func (q *groupQuerier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := q.ready(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return q.g.conn.Exec(ctx, sql, args...)
}

func (q *groupQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := q.ready(); err != nil {
		return nil, err
	}
	return q.g.conn.Query(ctx, sql, args...)
}

func (q *groupQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := q.ready(); err != nil {
		return errRow{err}
	}
	return q.g.conn.QueryRow(ctx, sql, args...)
}

// errRow is a row that failed before its query was sent.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// mutateGrouped runs fn as one mutation of roomID through the room's group
// transaction.
func (s *Service) mutateGrouped(ctx context.Context, p *Principal, roomID string, o mutateOpts, fn func(m *mutation) error) (int64, error) {
	g := s.group
	j := &groupJob{ctx: ctx, p: p, o: o, fn: fn, wake: make(chan struct{}, 1), done: make(chan struct{})}
	g.mu.Lock()
	q := g.rooms[roomID]
	if q == nil {
		q = &roomQueue{}
		g.rooms[roomID] = q
	}
	q.jobs = append(q.jobs, j)
	lead := !q.leading
	q.leading = true
	g.mu.Unlock()
	if !lead {
		// A queued caller does not leave when its context ends: the
		// leader skips it if it has not started, and once it started,
		// its answer follows the commit within one transaction's time.
		select {
		case <-j.done:
			return j.seq, j.err
		case <-j.wake:
		}
	}
	s.lead(ctx, roomID)
	<-j.done
	return j.seq, j.err
}

// pop takes the next queued job of roomID (nil: none).
func (g *groupCommit) pop(roomID string) *groupJob {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.rooms[roomID]
	if q == nil || len(q.jobs) == 0 {
		return nil
	}
	j := q.jobs[0]
	q.jobs[0] = nil
	q.jobs = q.jobs[1:]
	return j
}

// take takes up to n queued jobs of roomID.
func (g *groupCommit) take(roomID string, n int) []*groupJob {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.rooms[roomID]
	if q == nil || n <= 0 {
		return nil
	}
	n = min(n, len(q.jobs))
	out := slices.Clone(q.jobs[:n])
	clear(q.jobs[:n])
	q.jobs = q.jobs[n:]
	return out
}

// empty reports whether no job of roomID is queued.
func (g *groupCommit) empty(roomID string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.rooms[roomID]
	return q == nil || len(q.jobs) == 0
}

// handOff passes the room's leadership to the first queued job, or ends it.
func (g *groupCommit) handOff(roomID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.rooms[roomID]
	if len(q.jobs) > 0 {
		q.jobs[0].wake <- struct{}{}
		return
	}
	delete(g.rooms, roomID)
}

// lead runs one group transaction of roomID and answers its callers.
func (s *Service) lead(ctx context.Context, roomID string) {
	var batch []*groupJob
	defer func() {
		r := recover()
		for _, j := range batch {
			if r != nil && j.err == nil {
				j.err = fmt.Errorf("substrate: group commit: %v", r)
				j.seq = 0
			}
			close(j.done)
		}
		s.group.handOff(roomID)
		if r != nil {
			panic(r)
		}
	}()
	// The transaction serves every caller in it: no caller's end (a
	// client that went away) may cancel it.
	err := s.db.WithConn(context.WithoutCancel(ctx), func(ctx context.Context, conn *pgxpool.Conn) error {
		return s.runGroup(ctx, conn, roomID, &batch)
	})
	if len(batch) == 0 {
		// No connection: the first queued caller (this one) is told.
		if j := s.group.pop(roomID); j != nil {
			batch = append(batch, j)
			j.err = err
		}
		return
	}
	for _, j := range batch {
		switch {
		case j.err != nil:
		case err != nil:
			// Whatever had been applied went with the transaction.
			j.seq, j.err = 0, err
		case !j.applied:
			// Never answer "done" for what was not committed.
			j.err = errors.New("substrate: group commit: the invocation was not evaluated")
		}
	}
	if n := int64(len(batch)); n > 0 {
		s.group.batches.Add(1)
		s.group.grouped.Add(n)
		for {
			l := s.group.largest.Load()
			if n <= l || s.group.largest.CompareAndSwap(l, n) {
				break
			}
		}
	}
}

// runGroup is the group transaction on conn: it appends to *batch each
// job it took; an error is the transaction's (every job in it fails).
//
// It runs in rounds. A round takes the jobs queued by then and reads,
// under the lock, what they are judged by (the time, their agents'
// grants and tokens, the room's presence); the first round opens the
// transaction and takes the lock with them. Then it evaluates the jobs
// one after the other against the group's own view of the room (each
// sees the ones before it) without waiting for the database: their
// statements, each job's between SAVEPOINT and RELEASE, queue and go
// out with the next round's reads, or with NOTIFY and COMMIT when no job
// is left. A round is one round trip, whatever number of jobs it
// carries; one job alone costs the two round trips of a transaction of
// its own.
func (s *Service) runGroup(ctx context.Context, conn *pgxpool.Conn, roomID string, batch *[]*groupJob) (err error) {
	g := &groupTx{conn: conn, ctx: ctx, room: roomID}
	defer func() {
		if g.open && err != nil {
			if _, rbErr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
				s.log.Warn("rollback failed", "room", roomID, "err", rbErr)
			}
		}
		s.group.rounds.Add(int64(g.rounds))
	}()
	var todo []*groupJob
	readsDue := false
	for {
		if len(todo) == 0 && !readsDue {
			for _, j := range s.group.take(roomID, maxGroup-len(*batch)) {
				*batch = append(*batch, j)
				if err := j.ctx.Err(); err != nil {
					j.err = err // the caller left before its turn: nothing done
					continue
				}
				todo = append(todo, j)
			}
			readsDue = len(todo) > 0
		}
		if len(todo) > 0 {
			if readsDue {
				s.queueReads(g, todo)
				if err := g.flush(); errors.Is(err, errReplay) {
					todo = append(s.redoing(g), todo...)
					continue
				} else if err != nil {
					return err
				}
				readsDue = false
				if groupRoundHook != nil {
					groupRoundHook(roomID, g.rounds)
				}
			}
			j := todo[0]
			todo = todo[1:]
			s.groupEval(g, j)
			if g.broken != nil {
				return g.broken
			}
			if g.replay {
				// j is evaluated again, once: when its own SAVEPOINT went
				// out with the refused statement, it is among the redone.
				g.replay = false
				redo := s.redoing(g)
				if !slices.Contains(redo, j) {
					s.group.redone.Add(1)
					redo = append(redo, j)
				}
				todo = append(redo, todo...)
			}
			if len(todo) > 0 || !s.group.empty(roomID) && len(*batch) < maxGroup {
				continue
			}
		}
		// No job left: commit, unless PostgreSQL refuses a statement not
		// yet sent (then the jobs after it go again).
		applied := false
		for _, j := range *batch {
			applied = applied || j.applied
		}
		if !applied {
			break
		}
		g.syncRoom()
		g.queue(nil, store.NotifySQL, store.NotifyChannel, roomID+" "+strconv.FormatInt(g.seq, 10))
		g.queue(nil, "COMMIT")
		if err := g.flush(); errors.Is(err, errReplay) {
			if groupRedoHook != nil {
				groupRedoHook(roomID)
			}
			todo = s.redoing(g)
			continue
		} else if err != nil {
			return err
		}
		g.open = false
		if g.snap != nil && g.snap.seq == g.seq {
			s.snaps.put(g.key, g.snap)
		}
		return nil
	}
	if g.open {
		// Nothing to commit: every job failed.
		g.open = false
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			return err
		}
	}
	return nil
}

// groupRoundHook, when set (by tests), runs after each round's reads;
// groupRedoHook when the commit's flush found a statement refused.
var (
	groupRoundHook func(roomID string, round int)
	groupRedoHook  func(roomID string)
)

// groupEval evaluates job j in the group transaction g: its statements
// queue (g.pend), and the group's view of the room moves past it; or it
// fails alone; or (g.replay) it is to be evaluated again.
func (s *Service) groupEval(g *groupTx, j *groupJob) {
	g.evaluated = append(g.evaluated, j)
	j.before = chainAt{seq: g.seq, msgCount: g.msgCount, snap: g.snap}
	j.applied, j.spSent, j.seq, j.err = false, false, 0, nil
	ctx := store.Held(context.WithoutCancel(j.ctx))
	m := &mutation{ctx: ctx, tx: &groupQuerier{g: g, j: j}, room: g.room, p: j.p, marks: s.marks, group: g,
		base: g.seq, msgCount: g.msgCount, cacheKey: g.key, now: g.now()}
	if j.o.withPresence && g.presenceLoaded {
		m.agents, m.agentsLoaded = slices.Clone(g.presence), true
	}
	tokenValid, grants := g.admission(j.p)
	var last int64
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("invocation panicked in a group transaction", "room", g.room, "panic", r)
				err = fmt.Errorf("substrate: internal error: %v", r)
			}
		}()
		if err := m.admit(tokenValid, grants); err != nil {
			return err
		}
		last, err = s.seal(m, j.fn)
		return err
	}()
	if g.replay || g.broken != nil {
		j.spSent = false
		return
	}
	if err != nil {
		j.err = err
		if j.spSent {
			// It ran statements of its own: undo them.
			if rbErr := rollbackSavepoint(context.WithoutCancel(g.ctx), g.conn); rbErr != nil {
				g.broken = rbErr
			}
		}
		return
	}
	if !j.spSent {
		g.queue(j, "SAVEPOINT invocation")
	}
	for _, q := range m.batch.QueuedQueries {
		g.pend = append(g.pend, groupStmt{q: q, job: j})
	}
	g.queue(j, "RELEASE SAVEPOINT invocation")
	j.applied, j.seq = true, last
	s.advanceGroup(m, last)
	g.seq, g.msgCount = last, m.msgCount+m.messages
}

// aborted says err is PostgreSQL refusing a statement because the
// transaction is already aborted (in_failed_sql_transaction).
func aborted(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25P02"
}

// rollbackSavepoint undoes one invocation of a group transaction.
func rollbackSavepoint(ctx context.Context, conn *pgxpool.Conn) error {
	// The simple protocol, in one round trip: an aborted transaction
	// refuses the prepare a batch would start with.
	_, err := conn.Conn().PgConn().Exec(ctx, "ROLLBACK TO SAVEPOINT invocation; RELEASE SAVEPOINT invocation").ReadAll()
	return err
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
