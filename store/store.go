// Package store owns the connection to PostgreSQL: the pgx pool, the
// transaction helpers, schema migrations and room notifications. It holds no
// policy; the substrate decides what to write.
//
// The pool is not exported. Every statement goes through DB's methods so
// that one rule can be enforced in one place: code that holds a connection
// (inside ReadTx, InTx, WithConn or a fosite transaction begun with Begin)
// never asks the pool for a second one. Such a request would deadlock as
// soon as as many requests as the pool has connections each hold one and
// wait for another; DB refuses it at once with ErrConnHeld instead, so the
// mistake is a loud error in tests rather than a hang under load.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is the project's handle on PostgreSQL.
type DB struct {
	pool *pgxpool.Pool
	log  *slog.Logger

	stop chan struct{}
	done chan struct{}

	mu             sync.Mutex
	exhaustedSince time.Time // zero while the pool has a free connection
	lastExhaustion time.Duration

	// citus is whether the database has the citus extension, once Workers
	// has asked (0 not yet, 1 no, 2 yes): a readiness probe asks it every
	// few seconds, and the answer does not change while the process runs
	// (distribution happens at start-up).
	citus atomic.Int32
}

// DefaultMaxConns is the pool size when Options.MaxConns is zero. A request
// holds a connection only while its statements run (a wait holds none while
// it waits; the notification listener has its own), so the pool bounds
// concurrent statements, not clients. Measured on 2 cores (README,
// "Database connections"): throughput stops growing at about 4 connections
// per core, and more only queue inside PostgreSQL; 16 leaves headroom for
// slow statements without approaching PostgreSQL's default
// max_connections of 100 when several processes share one database.
const DefaultMaxConns = 16

// Options tune Open.
type Options struct {
	// MaxConns caps the pool. Default DefaultMaxConns (16).
	MaxConns int32
	// ConnectTimeout bounds the first ping. Default 10 s.
	ConnectTimeout time.Duration
	// ExhaustedWarnAfter is how long every connection may stay in use
	// before a warning is logged (and Status reports the pool exhausted).
	// Default 1 s.
	ExhaustedWarnAfter time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// ErrConnHeld is returned when code that holds a connection (its context
// came from ReadTx, InTx, WithConn or Begin) asks the pool for another.
// Run the statement on the held connection, or after releasing it.
var ErrConnHeld = errors.New("store: this request already holds a database connection; run the statement on it or after releasing it (asking the pool for a second one deadlocks under load)")

type heldKey struct{}

// Held marks ctx as belonging to code that holds a connection. DB's methods
// called with such a context return ErrConnHeld.
func Held(ctx context.Context) context.Context { return context.WithValue(ctx, heldKey{}, true) }

func isHeld(ctx context.Context) bool { v, _ := ctx.Value(heldKey{}).(bool); return v }

// refuse logs where a second acquire was attempted (the stack is what a
// maintainer needs to find it) and returns ErrConnHeld.
func (db *DB) refuse() error {
	buf := make([]byte, 4096)
	buf = buf[:runtime.Stack(buf, false)]
	db.log.Error("second database connection requested while one is held", "stack", string(buf))
	return ErrConnHeld
}

// Open connects to url and checks the server answers.
func Open(ctx context.Context, url string, opt Options) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store: parse database url: %w", err)
	}
	cfg.MaxConns = DefaultMaxConns
	if opt.MaxConns > 0 {
		cfg.MaxConns = opt.MaxConns
	}
	if opt.ConnectTimeout == 0 {
		opt.ConnectTimeout = 10 * time.Second
	}
	if opt.ExhaustedWarnAfter <= 0 {
		opt.ExhaustedWarnAfter = time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: open pool: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, opt.ConnectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: database does not answer: %w", err)
	}
	db := &DB{pool: pool, log: opt.Logger, stop: make(chan struct{}), done: make(chan struct{})}
	go db.watch(opt.ExhaustedWarnAfter)
	return db, nil
}

// Close releases every connection.
func (db *DB) Close() {
	select {
	case <-db.stop:
	default:
		close(db.stop)
		<-db.done
	}
	db.pool.Close()
}

// Ping reports whether the database answers now.
func (db *DB) Ping(ctx context.Context) error {
	if isHeld(ctx) {
		return db.refuse()
	}
	return db.pool.Ping(ctx)
}

// ConnConfig is a copy of the pool's connection settings, for a connection
// of its own outside the pool (the notification listener).
func (db *DB) ConnConfig() *pgx.ConnConfig { return db.pool.Config().ConnConfig.Copy() }

// Exec runs one statement on a pooled connection.
func (db *DB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if isHeld(ctx) {
		return pgconn.CommandTag{}, db.refuse()
	}
	return db.pool.Exec(ctx, sql, args...)
}

// Query runs one query on a pooled connection, held until the rows are
// closed: close them before any other statement.
func (db *DB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if isHeld(ctx) {
		return nil, db.refuse()
	}
	return db.pool.Query(ctx, sql, args...)
}

// QueryRow runs a query for one row on a pooled connection.
func (db *DB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if isHeld(ctx) {
		return errRow{db.refuse()}
	}
	return db.pool.QueryRow(ctx, sql, args...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// InTx runs fn in one read-write transaction: committed when fn returns
// nil, rolled back otherwise (including on panic). fn gets a context marked
// as holding a connection: use it, and tx, for everything inside.
func (db *DB) InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error {
	return db.tx(ctx, pgx.TxOptions{}, fn)
}

// ReadTx runs fn in a read-only, repeatable-read transaction: every
// statement sees the same snapshot of the database.
func (db *DB) ReadTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error {
	return db.tx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

func (db *DB) tx(ctx context.Context, opts pgx.TxOptions, fn func(context.Context, Tx) error) (err error) {
	if isHeld(ctx) {
		return db.refuse()
	}
	tx, err := db.pool.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	// Every way out but a commit rolls back: an error, a panic, and also
	// runtime.Goexit (t.Fatal inside fn), which neither returns an error
	// nor panics; without this the pool connection would never return.
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err = fn(Held(ctx), tx); err != nil {
		return err
	}
	committed = true
	if err = tx.Commit(ctx); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	return nil
}

// Begin starts a transaction that the caller ends (for libraries that drive
// transactions themselves, as fosite does). The returned context is marked
// as holding a connection; pass it to every statement until Commit or
// Rollback.
func (db *DB) Begin(ctx context.Context) (context.Context, Tx, error) {
	if isHeld(ctx) {
		return ctx, nil, db.refuse()
	}
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return ctx, nil, err
	}
	return Held(ctx), tx, nil
}

// WithConn runs fn on one pooled connection, released when fn returns
// (closed instead if fn left it inside a transaction).
func (db *DB) WithConn(ctx context.Context, fn func(ctx context.Context, conn *pgxpool.Conn) error) error {
	if isHeld(ctx) {
		return db.refuse()
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	return fn(Held(ctx), conn)
}

// PoolStatus is what /readyz reports of the pool.
type PoolStatus struct {
	MaxConns      int32 `json:"max_conns"`
	InUse         int32 `json:"in_use"`
	Idle          int32 `json:"idle"`
	WaitedAcquire int64 `json:"waited_acquires"`
	// ExhaustedMS is how long every connection has been in use, 0 when one
	// is free.
	ExhaustedMS int64 `json:"exhausted_ms"`
	// LastExhaustionMS is how long the last episode of exhaustion that
	// passed the warning threshold lasted.
	LastExhaustionMS int64 `json:"last_exhaustion_ms,omitempty"`
	// Acquires counts connections handed out, and AcquireWait sums the
	// time callers spent getting them (metrics; not in /readyz).
	Acquires    int64         `json:"-"`
	AcquireWait time.Duration `json:"-"`
}

// Status reports the pool's use now.
func (db *DB) Status() PoolStatus {
	st := db.pool.Stat()
	out := PoolStatus{MaxConns: st.MaxConns(), InUse: st.AcquiredConns(), Idle: st.IdleConns(), WaitedAcquire: st.EmptyAcquireCount(),
		Acquires: st.AcquireCount(), AcquireWait: st.AcquireDuration()}
	db.mu.Lock()
	if !db.exhaustedSince.IsZero() {
		out.ExhaustedMS = time.Since(db.exhaustedSince).Milliseconds()
	}
	out.LastExhaustionMS = db.lastExhaustion.Milliseconds()
	db.mu.Unlock()
	return out
}

// watch samples the pool and warns when every connection has been in use
// for longer than warnAfter: requests are then queueing for the database,
// and SYNC_DB_MAX_CONNS (or the database) is the bottleneck.
func (db *DB) watch(warnAfter time.Duration) {
	defer close(db.done)
	tick := time.NewTicker(min(warnAfter/4, 250*time.Millisecond))
	defer tick.Stop()
	warned := false
	for {
		select {
		case <-db.stop:
			return
		case now := <-tick.C:
			st := db.pool.Stat()
			full := st.AcquiredConns() >= st.MaxConns()
			db.mu.Lock()
			switch {
			case full && db.exhaustedSince.IsZero():
				db.exhaustedSince = now
			case full && !warned && now.Sub(db.exhaustedSince) >= warnAfter:
				warned = true
				db.log.Warn("database pool exhausted: every connection in use; requests are waiting (raise SYNC_DB_MAX_CONNS if the database has room)",
					"for", now.Sub(db.exhaustedSince).Round(time.Millisecond), "max_conns", st.MaxConns(), "waited_acquires", st.EmptyAcquireCount())
			case !full && !db.exhaustedSince.IsZero():
				if warned {
					db.lastExhaustion = now.Sub(db.exhaustedSince)
					db.log.Info("database pool has free connections again", "exhausted_for", db.lastExhaustion.Round(time.Millisecond))
				}
				db.exhaustedSince, warned = time.Time{}, false
			}
			db.mu.Unlock()
		}
	}
}

// NotifyChannel is the PostgreSQL channel on which every committed room
// mutation is announced, with payload "<room id> <seq>" (or "<room id>
// presence" / "<room id> deleted").
const NotifyChannel = "sync_room"

// NotifySQL is the statement that announces a room change; queued inside a
// transaction, PostgreSQL delivers it only if and when the transaction
// commits. Arguments: the channel (NotifyChannel) and the payload.
const NotifySQL = `SELECT pg_notify($1, $2)`

// Notify announces a change of room to the waiters of every process
// ("<room> <what>": a seq, "presence" or "deleted"). Inside a transaction,
// queue NotifySQL on it instead, so the announcement goes out at commit.
func (db *DB) Notify(ctx context.Context, room, what string) error {
	_, err := db.Exec(ctx, NotifySQL, NotifyChannel, room+" "+what)
	return err
}

// IsUniqueViolation reports whether err is PostgreSQL's unique_violation.
func IsUniqueViolation(err error) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr) && pgErr.SQLState() == "23505"
}

// Tx is a transaction handed to InTx and ReadTx callbacks.
type Tx = pgx.Tx
