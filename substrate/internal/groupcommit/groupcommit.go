// Package groupcommit runs the mutations of one room that arrive together
// in one transaction (issue 32 item 2): what it makes fast is a busy
// room's write path, which would otherwise commit serially under the room
// lock. The rule it serves is the core's (substrate/mutation.go: what a
// mutation reads under the lock, how it is judged and sealed, what a
// commit guarantees); the core passes it in as a Txn per transaction, and
// this package knows no table, no rule and no clock. It only orders,
// pipelines and undoes: each invocation is judged by the core as it would
// be in a transaction of its own, fails alone, and is answered only after
// the commit that holds it.
//
// Its whole interface: New makes a Group from a Config (the pool, a
// logger, Open for the core's Txn, Refused for a statement PostgreSQL
// refused); Group.Do runs one invocation; the core implements Txn, and
// sees the transaction only through Stmt, Querier and Evaluated. Stats,
// Queued and the RoundHook and RedoHook fields are for tests and
// measurements: they observe, and decide nothing.
package groupcommit

// One transaction per invocation caps a room at what PostgreSQL commits
// serially under the room lock. Instead, invocations of a room queue;
// the first one in leads: on one connection it opens a transaction,
// takes the lock once (the core's first reads), and runs the queued
// invocations in it, each between SAVEPOINT and RELEASE, so a failure
// rolls back only itself. Invocations that arrive while the transaction
// is open join it (up to maxGroup); the commit's statements and COMMIT
// go out together, and every caller is answered after that commit. The
// leader does not wait for company: a batch is whatever queued
// meanwhile.
//
// The transaction does not wait for the database between invocations
// (run): each is evaluated against the group's own view of the room (the
// core's, as the invocations before it left it) while their statements
// queue, and the statements go out together. If PostgreSQL refuses one
// (a constraint, a trigger), that invocation is rolled back to its
// savepoint, the view goes back to where it was before it, and the ones
// after it, evaluated on a view that had it, are evaluated again.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncsubstrate/sync/store"
)

// maxGroup bounds how many invocations one transaction carries, so the
// first caller of a busy room is not kept waiting by an endless stream.
const maxGroup = 64

// Querier is an invocation's connection inside a group transaction: a
// statement of its own (a read of rows the group's view lacks) goes out
// after every statement queued before it, inside its savepoint.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Stmt is a statement of the transaction's own (not an invocation's).
type Stmt struct {
	SQL  string
	Args []any
	// Read consumes its result (nil: executed, its result dropped).
	Read func(pgx.BatchResults) error
	// Undo, if set, undoes what queueing it noted, when it did not run
	// (PostgreSQL refused a statement sent before it).
	Undo func()
}

// Evaluated is an invocation the core judged and sealed: its statements,
// its answer (the seq it committed at), and Advance, which moves the
// group's view of the room past it once its statements are queued.
type Evaluated struct {
	Stmts   []*pgx.QueuedQuery
	Seq     int64
	Advance func()
}

// Txn is the core's side of one group transaction of a room, made by
// Config.Open for each: what the transaction reads under the lock, how
// one invocation (A) is judged, and the group's view of the room (V)
// that invocations are judged on and that a refusal puts back.
type Txn[A, V any] interface {
	// Reads are a round's reads under the lock for the invocations args,
	// which arrived before it; first: the transaction's first round,
	// whose reads take the lock. They go out after the statements of the
	// invocations already evaluated, so they see them.
	Reads(first bool, args []A) []Stmt
	// Eval judges one invocation against the group's view; its own reads
	// go through q. An error fails it alone.
	Eval(ctx context.Context, q Querier, arg A) (Evaluated, error)
	// View is the group's view of the room now; SetView puts back one it
	// returned, when PostgreSQL refused the invocation evaluated on it.
	View() V
	SetView(V)
	// Sync writes what the invocations evaluated since the last Sync
	// changed in rows they share (nil: nothing): sent before any
	// invocation's own statement and before the commit.
	Sync() []Stmt
	// Commit goes out with COMMIT (a notification).
	Commit() []Stmt
	// Committed: the transaction committed; what it made may be
	// published.
	Committed()
}

// Config is what a Group needs of the core.
type Config[A, V any] struct {
	// DB is the pool a leader takes its transaction's connection from.
	DB *store.DB
	// Log takes failed rollbacks and invocations that panicked. Required.
	Log *slog.Logger
	// Open makes the core's side of a new transaction of room. Required.
	Open func(room string) Txn[A, V]
	// Refused is an invocation's error when PostgreSQL refused one of its
	// statements (nil: PostgreSQL's error as it is).
	Refused func(error) error
}

// Group holds the queues of busy rooms.
type Group[A, V any] struct {
	cfg   Config[A, V]
	mu    sync.Mutex
	rooms map[string]*roomQueue[A, V]
	// batches and grouped count transactions and the invocations they
	// carried; largest is the largest batch; rounds the rounds of reads;
	// redone the invocations evaluated again (Stats).
	batches, grouped, largest, rounds, redone atomic.Int64
	// RoundHook, when set (by tests, before the first invocation), runs
	// after each round's reads; RedoHook when the commit's flush found a
	// statement refused.
	RoundHook func(room string, round int)
	RedoHook  func(room string)
}

// New returns a group commit over cfg.
func New[A, V any](cfg Config[A, V]) *Group[A, V] {
	if cfg.Refused == nil {
		cfg.Refused = func(err error) error { return err }
	}
	return &Group[A, V]{cfg: cfg, rooms: map[string]*roomQueue[A, V]{}}
}

// Stats counts a Group's work since it was made.
type Stats struct {
	// Batches counts transactions, Invocations the invocations they
	// carried, Largest the largest batch, Rounds the rounds of reads
	// under the lock, Redone the invocations evaluated again after a
	// refusal.
	Batches, Invocations, Largest, Rounds, Redone int64
}

// Stats is what g has done so far.
func (g *Group[A, V]) Stats() Stats {
	return Stats{Batches: g.batches.Load(), Invocations: g.grouped.Load(), Largest: g.largest.Load(),
		Rounds: g.rounds.Load(), Redone: g.redone.Load()}
}

// Queued says whether a caller of room leads a group transaction now and
// how many callers are queued for it (tests order their callers by it).
func (g *Group[A, V]) Queued(room string) (leading bool, queued int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if q := g.rooms[room]; q != nil {
		return q.leading, len(q.jobs)
	}
	return false, 0
}

// job is one invocation waiting for (or in) a group transaction.
type job[A, V any] struct {
	ctx  context.Context
	arg  A
	wake chan struct{} // leadership handed to this job
	done chan struct{} // answered: seq, err
	seq  int64
	err  error
	// In the transaction: applied, its statements are queued or ran
	// (seq is its); spSent, its SAVEPOINT went out; before, the group's
	// view of the room before it (where a failure of it goes back to).
	applied, spSent bool
	before          V
}

// roomQueue is one room's invocations waiting for the next transaction.
type roomQueue[A, V any] struct {
	jobs    []*job[A, V]
	leading bool
}

// tx is one group transaction of a room: the connection it runs on, the
// core's side of it, and the statements not yet sent.
type tx[A, V any] struct {
	conn *pgxpool.Conn
	ctx  context.Context
	room string
	core Txn[A, V]
	// open: BEGIN went out.
	open bool
	// pend are the statements queued and not yet sent.
	pend []stmt[A, V]
	// evaluated are the invocations evaluated, in order. redo are those a
	// flush found judged on writes PostgreSQL refused (evaluated after
	// the refused invocation): they are evaluated again, in order, before
	// anything else. replay says that the invocation being evaluated must
	// be too.
	evaluated []*job[A, V]
	redo      []*job[A, V]
	replay    bool
	// broken: the transaction cannot go on (a rollback to a savepoint
	// failed); every invocation in it fails.
	broken error
	// rounds counts the rounds of reads (Stats).
	rounds  int
	refused func(error) error
}

// stmt is one queued statement: an invocation's (job) or the
// transaction's own (job nil), with read to consume its result (nil:
// executed, its result dropped).
type stmt[A, V any] struct {
	q    *pgx.QueuedQuery
	job  *job[A, V]
	read func(br pgx.BatchResults) error
	// undo, if set, undoes what queueing it noted, when it did not run.
	undo func()
}

// errReplay stops an invocation whose evaluation read statements that
// PostgreSQL skipped: it is evaluated again.
var errReplay = errors.New("substrate: group commit: evaluated again")

func (t *tx[A, V]) queue(j *job[A, V], sql string, args ...any) {
	t.pend = append(t.pend, stmt[A, V]{q: &pgx.QueuedQuery{SQL: sql, Arguments: args}, job: j})
}

// queueOwn queues statements of the transaction's own.
func (t *tx[A, V]) queueOwn(sts []Stmt) {
	for _, s := range sts {
		t.pend = append(t.pend, stmt[A, V]{q: &pgx.QueuedQuery{SQL: s.SQL, Arguments: s.Args}, read: s.Read, undo: s.Undo})
	}
}

// queueReads queues a round's reads under the lock, for the invocations
// todo: the first round opens the transaction and takes the lock.
func (t *tx[A, V]) queueReads(todo []*job[A, V]) {
	if !t.open {
		t.queue(nil, "BEGIN")
		t.open = true
	}
	first := t.rounds == 0
	t.rounds++
	args := make([]A, len(todo))
	for i, j := range todo {
		args[i] = j.arg
	}
	t.queueOwn(t.core.Reads(first, args))
}

// flush sends the queued statements in one round trip and reads their
// results. When PostgreSQL refuses a statement of an invocation, that
// invocation alone fails: the transaction goes back to its savepoint,
// the group's view of the room to where it was before it, and the
// invocations whose statements followed (PostgreSQL skipped them, or
// they were not sent yet) are to be evaluated again (t.redo; flush
// returns errReplay, and none of the transaction's own statements queued
// for it ran). Any other failure is the transaction's.
func (t *tx[A, V]) flush() error {
	if len(t.pend) == 0 {
		return nil
	}
	pend := t.pend
	t.pend = nil
	failed, err := readResults(t.conn.SendBatch(t.ctx, batchOf(pend)), pend)
	return t.settled(pend, failed, err)
}

func batchOf[A, V any](pend []stmt[A, V]) *pgx.Batch {
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, len(pend))}
	for i, st := range pend {
		b.QueuedQueries[i] = st.q
	}
	return b
}

// readResults reads a batch's results: the index of the first statement
// that failed (-1: none) and the error.
func readResults[A, V any](br pgx.BatchResults, pend []stmt[A, V]) (int, error) {
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
// since (t.pend) would follow pend's: after a refusal they are not sent.
func (t *tx[A, V]) settled(pend []stmt[A, V], failed int, err error) error {
	if failed < 0 {
		return err
	}
	j := pend[failed].job
	if j == nil {
		return err
	}
	if aborted(err) || lost(err) {
		// The transaction refuses everything: a rollback to a savepoint
		// before did not take. Evaluating the rest again would meet the
		// same refusal, round after round, and never answer the callers.
		// Or the connection that held the room's rows is gone (on Citus,
		// the coordinator's to the room's worker): the writes of the
		// invocations before this one went with it, whatever a rollback
		// to the savepoint answers, and the transaction cannot commit.
		t.broken = err
		return err
	}
	if rbErr := rollbackSavepoint(context.WithoutCancel(t.ctx), t.conn); rbErr != nil {
		t.broken = rbErr
		return rbErr
	}
	// The statements after the refused one did not run, nor will those
	// queued since.
	after := append(slices.Clone(pend[failed+1:]), t.pend...)
	t.pend = nil
	for i := len(after) - 1; i >= 0; i-- {
		if after[i].undo != nil {
			after[i].undo()
		}
	}
	j.applied, j.seq, j.err = false, 0, t.refused(err)
	t.core.SetView(j.before)
	// Every invocation evaluated after it was judged on a view that had
	// its writes, whether it queued statements or was refused on its own.
	i := slices.Index(t.evaluated, j)
	for _, k := range t.evaluated[i+1:] {
		k.applied, k.seq, k.err = false, 0, nil
		t.redo = append(t.redo, k)
	}
	t.evaluated = t.evaluated[:i+1]
	return errReplay
}

// redoing returns the invocations to evaluate again, in order, and
// counts them.
func (g *Group[A, V]) redoing(t *tx[A, V]) []*job[A, V] {
	r := t.redo
	t.redo = nil
	g.redone.Add(int64(len(r)))
	return r
}

// querier is an invocation's Querier.
type querier[A, V any] struct {
	t *tx[A, V]
	j *job[A, V]
}

func (q *querier[A, V]) ready() error {
	if !q.j.spSent {
		q.t.queueOwn(q.t.core.Sync())
		q.t.queue(q.j, "SAVEPOINT invocation")
		q.j.spSent = true
	}
	err := q.t.flush()
	if errors.Is(err, errReplay) {
		q.t.replay = true
	} else if err != nil && q.t.broken == nil {
		q.t.broken = err
	}
	return err
}

func (q *querier[A, V]) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := q.ready(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return q.t.conn.Exec(ctx, sql, args...)
}

func (q *querier[A, V]) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := q.ready(); err != nil {
		return nil, err
	}
	return q.t.conn.Query(ctx, sql, args...)
}

func (q *querier[A, V]) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := q.ready(); err != nil {
		return errRow{err}
	}
	return q.t.conn.QueryRow(ctx, sql, args...)
}

// errRow is a row that failed before its query was sent.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// Do runs arg as one invocation of room through the room's group
// transaction, and answers with its seq once the transaction committed.
// A caller whose ctx ends before its turn is answered with ctx's error
// and nothing done; once its turn came, it is answered after the commit.
func (g *Group[A, V]) Do(ctx context.Context, room string, arg A) (int64, error) {
	j := &job[A, V]{ctx: ctx, arg: arg, wake: make(chan struct{}, 1), done: make(chan struct{})}
	g.mu.Lock()
	q := g.rooms[room]
	if q == nil {
		q = &roomQueue[A, V]{}
		g.rooms[room] = q
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
	g.lead(ctx, room)
	<-j.done
	return j.seq, j.err
}

// pop takes the next queued job of room (nil: none).
func (g *Group[A, V]) pop(room string) *job[A, V] {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.rooms[room]
	if q == nil || len(q.jobs) == 0 {
		return nil
	}
	j := q.jobs[0]
	q.jobs[0] = nil
	q.jobs = q.jobs[1:]
	return j
}

// take takes up to n queued jobs of room.
func (g *Group[A, V]) take(room string, n int) []*job[A, V] {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.rooms[room]
	if q == nil || n <= 0 {
		return nil
	}
	n = min(n, len(q.jobs))
	out := slices.Clone(q.jobs[:n])
	clear(q.jobs[:n])
	q.jobs = q.jobs[n:]
	return out
}

// empty reports whether no job of room is queued.
func (g *Group[A, V]) empty(room string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.rooms[room]
	return q == nil || len(q.jobs) == 0
}

// handOff passes the room's leadership to the first queued job, or ends it.
func (g *Group[A, V]) handOff(room string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.rooms[room]
	if len(q.jobs) > 0 {
		q.jobs[0].wake <- struct{}{}
		return
	}
	delete(g.rooms, room)
}

// lead runs one group transaction of room and answers its callers.
func (g *Group[A, V]) lead(ctx context.Context, room string) {
	var batch []*job[A, V]
	defer func() {
		r := recover()
		for _, j := range batch {
			if r != nil && j.err == nil {
				j.err = fmt.Errorf("substrate: group commit: %v", r)
				j.seq = 0
			}
			close(j.done)
		}
		g.handOff(room)
		if r != nil {
			panic(r)
		}
	}()
	// The transaction serves every caller in it: no caller's end (a
	// client that went away) may cancel it.
	err := g.cfg.DB.WithConn(context.WithoutCancel(ctx), func(ctx context.Context, conn *pgxpool.Conn) error {
		return g.run(ctx, conn, room, &batch)
	})
	if len(batch) == 0 {
		// No connection: the first queued caller (this one) is told.
		if j := g.pop(room); j != nil {
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
		g.batches.Add(1)
		g.grouped.Add(n)
		for {
			l := g.largest.Load()
			if n <= l || g.largest.CompareAndSwap(l, n) {
				break
			}
		}
	}
}

// run is the group transaction on conn: it appends to *batch each job it
// took; an error is the transaction's (every job in it fails).
//
// It runs in rounds. A round takes the jobs queued by then and reads,
// under the lock, what they are judged by (the core's Reads); the first
// round opens the transaction and takes the lock with them. Then it
// evaluates the jobs one after the other against the group's own view of
// the room (each sees the ones before it) without waiting for the
// database: their statements, each job's between SAVEPOINT and RELEASE,
// queue and go out with the next round's reads, or with the commit's
// statements and COMMIT when no job is left. A round is one round trip,
// whatever number of jobs it carries; one job alone costs the two round
// trips of a transaction of its own.
func (g *Group[A, V]) run(ctx context.Context, conn *pgxpool.Conn, room string, batch *[]*job[A, V]) (err error) {
	t := &tx[A, V]{conn: conn, ctx: ctx, room: room, core: g.cfg.Open(room), refused: g.cfg.Refused}
	defer func() {
		if t.open && err != nil {
			if _, rbErr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
				g.cfg.Log.Warn("rollback failed", "room", room, "err", rbErr)
			}
		}
		g.rounds.Add(int64(t.rounds))
	}()
	var todo []*job[A, V]
	readsDue := false
	for {
		if len(todo) == 0 && !readsDue {
			for _, j := range g.take(room, maxGroup-len(*batch)) {
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
				t.queueReads(todo)
				if err := t.flush(); errors.Is(err, errReplay) {
					todo = append(g.redoing(t), todo...)
					continue
				} else if err != nil {
					return err
				}
				readsDue = false
				if g.RoundHook != nil {
					g.RoundHook(room, t.rounds)
				}
			}
			j := todo[0]
			todo = todo[1:]
			g.eval(t, j)
			if t.broken != nil {
				return t.broken
			}
			if t.replay {
				// j is evaluated again, once: when its own SAVEPOINT went
				// out with the refused statement, it is among the redone.
				t.replay = false
				redo := g.redoing(t)
				if !slices.Contains(redo, j) {
					g.redone.Add(1)
					redo = append(redo, j)
				}
				todo = append(redo, todo...)
			}
			if len(todo) > 0 || !g.empty(room) && len(*batch) < maxGroup {
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
		t.queueOwn(t.core.Sync())
		t.queueOwn(t.core.Commit())
		t.queue(nil, "COMMIT")
		if err := t.flush(); errors.Is(err, errReplay) {
			if g.RedoHook != nil {
				g.RedoHook(room)
			}
			todo = g.redoing(t)
			continue
		} else if err != nil {
			return err
		}
		t.open = false
		t.core.Committed()
		return nil
	}
	if t.open {
		// Nothing to commit: every job failed.
		t.open = false
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			return err
		}
	}
	return nil
}

// eval evaluates job j in the group transaction t: its statements queue
// (t.pend), and the group's view of the room moves past it; or it fails
// alone; or (t.replay) it is to be evaluated again.
func (g *Group[A, V]) eval(t *tx[A, V], j *job[A, V]) {
	t.evaluated = append(t.evaluated, j)
	j.before = t.core.View()
	j.applied, j.spSent, j.seq, j.err = false, false, 0, nil
	ctx := store.Held(context.WithoutCancel(j.ctx))
	var ev Evaluated
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				g.cfg.Log.Error("invocation panicked in a group transaction", "room", t.room, "panic", r)
				err = fmt.Errorf("substrate: internal error: %v", r)
			}
		}()
		ev, err = t.core.Eval(ctx, &querier[A, V]{t: t, j: j}, j.arg)
		return err
	}()
	if t.replay || t.broken != nil {
		j.spSent = false
		return
	}
	if err != nil {
		j.err = err
		if j.spSent {
			// It ran statements of its own: undo them.
			if rbErr := rollbackSavepoint(context.WithoutCancel(t.ctx), t.conn); rbErr != nil {
				t.broken = rbErr
			}
		}
		return
	}
	if !j.spSent {
		t.queue(j, "SAVEPOINT invocation")
	}
	for _, q := range ev.Stmts {
		t.pend = append(t.pend, stmt[A, V]{q: q, job: j})
	}
	t.queue(j, "RELEASE SAVEPOINT invocation")
	j.applied, j.seq = true, ev.Seq
	if ev.Advance != nil {
		ev.Advance()
	}
}

// aborted says err is PostgreSQL refusing a statement because the
// transaction is already aborted (in_failed_sql_transaction).
func aborted(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25P02"
}

// lost says err is a connection the transaction ran on gone: class 08
// (Citus reports a worker it lost so), or the server shutting down.
func lost(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	c := pgErr.Code
	return len(c) == 5 && c[:2] == "08" || c == "57P01" || c == "57P02" ||
		c == "XX000" && strings.Contains(pgErr.Message, "connection")
}

// rollbackSavepoint undoes one invocation of a group transaction.
func rollbackSavepoint(ctx context.Context, conn *pgxpool.Conn) error {
	// The simple protocol, in one round trip: an aborted transaction
	// refuses the prepare a batch would start with.
	_, err := conn.Conn().PgConn().Exec(ctx, "ROLLBACK TO SAVEPOINT invocation; RELEASE SAVEPOINT invocation").ReadAll()
	return err
}
