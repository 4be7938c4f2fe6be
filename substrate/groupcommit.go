package substrate

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncsubstrate/sync/store"
)

// Group commit (issue 32 item 2). One transaction per invocation caps a
// room at what PostgreSQL commits serially under the room lock. Instead,
// invocations of a room queue; the first one in leads: on one connection
// it opens a transaction, locks the room row once, and runs queued
// invocations one after the other, each between SAVEPOINT and RELEASE
// (a failure rolls back to its savepoint: only its writes go, and the
// room's seq, read again per invocation inside the transaction, goes back
// with them, so sequences stay gap-free). Invocations that arrive while
// the transaction is open join it (up to maxGroup); then one NOTIFY and
// COMMIT go out together. Every caller is answered after that commit.
// The leader does not wait for company: a batch is whatever queued while
// the previous transaction was open.

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
	// carried; largest is the largest batch (Stats).
	batches, grouped, largest atomic.Int64
}

// groupTx is what the invocations of one group transaction share: the
// room's snapshot as the transaction (not yet committed) has it. It is
// private to the transaction and published only after the commit.
type groupTx struct {
	key  string
	snap *snapshot
	// broken: the transaction cannot go on (a rollback to a savepoint
	// failed); the invocations not yet committed fail with it.
	broken error
	// open: BEGIN went out; committed: COMMIT went out with an
	// invocation's writes and succeeded.
	open, committed bool
	// lastOne reports whether the invocation whose writes go out now is
	// the transaction's last (then NOTIFY and COMMIT go with them).
	lastOne func() bool
}

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
	if err != nil {
		// Whatever had been applied went with the transaction.
		for _, j := range batch {
			if j.err == nil {
				j.seq, j.err = 0, err
			}
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
// The round trips are those of a transaction of its own per invocation
// (two), with BEGIN and the row lock sent with the first invocation's
// reads and NOTIFY and COMMIT with the last one's writes: one client
// alone costs what it did without group commit.
func (s *Service) runGroup(ctx context.Context, conn *pgxpool.Conn, roomID string, batch *[]*groupJob) (err error) {
	g := &groupTx{}
	defer func() {
		if g.open && err != nil {
			if _, rbErr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
				s.log.Warn("rollback failed", "room", roomID, "err", rbErr)
			}
		}
	}()
	// The invocation being run is the last of the transaction when no
	// other one is queued by the time its writes go out.
	g.lastOne = func() bool { return len(*batch) >= maxGroup || s.group.empty(roomID) }
	var last int64
	applied := 0
	for !g.committed && len(*batch) < maxGroup {
		j := s.group.pop(roomID)
		if j == nil {
			break
		}
		*batch = append(*batch, j)
		if err := j.ctx.Err(); err != nil {
			j.err = err // the caller left before its turn: nothing done
			continue
		}
		jctx := store.Held(context.WithoutCancel(j.ctx))
		j.seq, j.err = s.groupStep(jctx, conn, roomID, j, g)
		if g.broken != nil {
			return g.broken
		}
		if j.err == nil {
			applied++
			last = j.seq
		}
	}
	if !g.committed {
		switch {
		case !g.open:
		case applied == 0:
			_, err = conn.Exec(ctx, "ROLLBACK")
			g.open = false
			if err != nil {
				return err
			}
		default:
			var fin pgx.Batch
			fin.Queue(store.NotifySQL, store.NotifyChannel, roomID+" "+strconv.FormatInt(last, 10))
			fin.Queue("COMMIT")
			if err = conn.SendBatch(ctx, &fin).Close(); err != nil {
				return err
			}
			g.open = false
		}
	}
	if applied > 0 && g.snap != nil && g.snap.seq == last {
		s.snaps.put(g.key, g.snap)
	}
	return nil
}

// groupStep runs one job inside the group transaction; a panic in it
// rolls back its savepoint and fails it alone.
func (s *Service) groupStep(ctx context.Context, conn *pgxpool.Conn, roomID string, j *groupJob, g *groupTx) (seq int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("invocation panicked in a group transaction", "room", roomID, "panic", r)
			if g.broken == nil {
				g.broken = rollbackSavepoint(context.WithoutCancel(ctx), conn)
			}
			seq, err = 0, fmt.Errorf("substrate: internal error: %v", r)
		}
	}()
	return s.mutateOn(ctx, conn, j.p, roomID, j.o, j.fn, g)
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
