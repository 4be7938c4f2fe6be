package store

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncsubstrate/sync/migrations"
)

// migrationLockKey is the advisory lock that serialises migrations between
// processes starting at once ("syncmig" in ASCII).
const migrationLockKey int64 = 0x73796e636d6967

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	seen := map[int]string{}
	for _, name := range names {
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("store: migration %q is not named NNNN_description.sql", name)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("store: migrations %q and %q share number %d", prev, name, v)
		}
		seen[v] = name
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: name, sql: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// Migrate applies every embedded migration not yet applied, each in its own
// transaction, while holding a session advisory lock so that several
// processes starting at once apply each file exactly once. On Citus it
// then distributes the tables not yet distributed (distribute), under the
// same lock.
func (db *DB) Migrate(ctx context.Context) (applied int, err error) {
	return migrateFS(ctx, db, migrations.FS)
}

func migrateFS(ctx context.Context, db *DB, fsys fs.FS) (applied int, err error) {
	list, err := loadMigrations(fsys)
	if err != nil {
		return 0, err
	}
	err = db.WithConn(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		applied, err = migrateOn(ctx, conn, list, db.log)
		return err
	})
	return applied, err
}

// migrateOn applies what list has that the database lacks, on one
// connection: the advisory lock is the session's.
func migrateOn(ctx context.Context, conn *pgxpool.Conn, list []migration, log *slog.Logger) (applied int, err error) {
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLockKey); err != nil {
		return 0, fmt.Errorf("store: migrate: take lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLockKey)
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return 0, fmt.Errorf("store: migrate: %w", err)
	}
	done := map[int]bool{}
	rows, err := conn.Query(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return 0, fmt.Errorf("store: migrate: %w", err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return 0, fmt.Errorf("store: migrate: %w", err)
	}
	for _, v := range vs {
		done[int(v)] = true
	}
	for _, m := range list {
		if done[m.version] {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name)
			return err
		})
		if err != nil {
			return applied, fmt.Errorf("store: migration %s: %w", m.name, err)
		}
		slog.Info("applied migration", "name", m.name)
		applied++
	}
	return applied, distribute(ctx, conn.Conn(), log)
}
