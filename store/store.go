// Package store owns the connection to PostgreSQL: the pgx pool, the
// transaction helper, schema migrations and room notifications. It holds no
// policy; the substrate decides what to write.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is the project's handle on PostgreSQL.
type DB struct {
	Pool *pgxpool.Pool
}

// Options tune Open.
type Options struct {
	// MaxConns caps the pool. Default: max(8, 4 × GOMAXPROCS) as chosen by
	// pgxpool when zero.
	MaxConns int32
	// ConnectTimeout bounds the first ping. Default 10 s.
	ConnectTimeout time.Duration
}

// Open connects to url and checks the server answers.
func Open(ctx context.Context, url string, opt Options) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store: parse database url: %w", err)
	}
	if opt.MaxConns > 0 {
		cfg.MaxConns = opt.MaxConns
	}
	if opt.ConnectTimeout == 0 {
		opt.ConnectTimeout = 10 * time.Second
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
	return &DB{Pool: pool}, nil
}

// Close releases every connection.
func (db *DB) Close() { db.Pool.Close() }

// Ping reports whether the database answers now.
func (db *DB) Ping(ctx context.Context) error { return db.Pool.Ping(ctx) }

// InTx runs fn in one transaction: committed when fn returns nil, rolled
// back otherwise (including on panic).
func (db *DB) InTx(ctx context.Context, fn func(Tx) error) (err error) {
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			panic(p)
		}
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	if err = tx.Commit(ctx); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	return nil
}

// NotifyChannel is the PostgreSQL channel on which every committed room
// mutation is announced, with payload "<room id> <seq>".
const NotifyChannel = "sync_room"

// QueueNotify sends the room's change notification from inside tx; PostgreSQL
// delivers it only if and when tx commits.
func QueueNotify(ctx context.Context, tx pgx.Tx, roomID string, seq int64) error {
	_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, fmt.Sprintf("%s %d", roomID, seq))
	return err
}

// IsUniqueViolation reports whether err is PostgreSQL's unique_violation.
func IsUniqueViolation(err error) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr) && pgErr.SQLState() == "23505"
}

// Tx is a transaction handed to InTx callbacks.
type Tx = pgx.Tx
