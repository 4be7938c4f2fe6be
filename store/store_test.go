package store_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// Several processes starting at once on an empty database each run
// Migrate; the advisory lock must make every migration apply exactly once
// and every caller succeed. (On an already migrated database the runs
// never race, which is why this starts from an empty one.)
//
// On Citus (SYNC_TEST_CITUS) the database has the citus extension, as a
// deployment's has before its first migration: the processes distribute
// the schema too, under the same lock, once (checkDistributed).
func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	url := pgtest.EmptyURL(t)
	ctx := context.Background()
	admin, err := store.Open(ctx, url, store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	procs := make([]*store.DB, 6) // one pool each, as separate processes have
	for i := range procs {
		if procs[i], err = store.Open(ctx, url, store.Options{MaxConns: 2}); err != nil {
			t.Fatal(err)
		}
		defer procs[i].Close()
	}
	var wg sync.WaitGroup
	errs := make([]error, len(procs))
	applied := make([]int, len(procs))
	start := make(chan struct{})
	for i, db := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			applied[i], errs[i] = db.Migrate(ctx)
		}()
	}
	close(start)
	wg.Wait()
	total := 0
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent migrate %d: %v", i, err)
		}
		total += applied[i]
	}
	var n, files int
	if err := admin.QueryRow(ctx, `SELECT count(*), count(DISTINCT version) FROM schema_migrations`).Scan(&n, &files); err != nil {
		t.Fatal(err)
	}
	if n != files || n == 0 || total != n {
		t.Fatalf("schema_migrations has %d rows for %d versions; the runs applied %d in all", n, files, total)
	}
	if pgtest.Citus() {
		checkDistributed(t, admin)
	}
}

func TestMigrateFromEmptyDatabase(t *testing.T) {
	ctx := context.Background()
	// Every table, whatever the migrations add later.
	db, err := store.Open(ctx, pgtest.EmptyURL(t), store.Options{MaxConns: pgtest.MaxConns})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	applied, err := db.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if applied == 0 {
		t.Fatal("no migration applied to an empty database")
	}
	if _, err := db.Exec(ctx, `SELECT room_id, scope, key, version FROM state LIMIT 0`); err != nil {
		t.Fatalf("state table missing after migrate: %v", err)
	}
	again, err := db.Migrate(ctx)
	if err != nil || again != 0 {
		t.Fatalf("second migrate applied %d (err %v), want 0", again, err)
	}
}

func TestInTxRollsBackOnError(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	boom := errBoom{}
	err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO rooms (id, token_hash, view_token_hash) VALUES ('r', 'a', 'b')`); err != nil {
			return err
		}
		return boom
	})
	if err != boom {
		t.Fatalf("InTx returned %v, want the callback's error", err)
	}
	var n int
	_ = db.QueryRow(ctx, `SELECT count(*) FROM rooms`).Scan(&n)
	if n != 0 {
		t.Fatalf("rolled-back insert is visible: %d rooms", n)
	}
}

// A callback that leaves through runtime.Goexit (t.Fatal inside a
// transaction) neither returns nor panics; its transaction must still be
// rolled back and its connection returned, or a small pool runs dry and
// everything after it waits forever.
func TestTxReleasedOnGoexit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := store.Open(ctx, pgtest.URL(t), store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Close waits for every connection to come back: bounded, so a
		// leak fails the test instead of hanging the binary.
		closed := make(chan struct{})
		go func() { db.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Error("the pool did not close: a connection was never released")
		}
	}()
	for i := 0; i < 2; i++ { // both connections, were each one leaked
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
				if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
					return err
				}
				runtime.Goexit()
				return nil
			})
		}()
		<-done
	}
	for i := 0; i < 2; i++ {
		err := db.ReadTx(ctx, func(ctx context.Context, tx store.Tx) error {
			var one int
			return tx.QueryRow(ctx, `SELECT 1`).Scan(&one)
		})
		if err != nil {
			t.Fatalf("transaction %d after two callbacks left through Goexit: %v (pool %+v)", i, err, db.Status())
		}
	}
}

type errBoom struct{}

func (errBoom) Error() string { return "boom" }

// Code that holds a connection and asks the pool for another deadlocks once
// as many requests do so as the pool has connections. The guard refuses the
// second request at once, whichever way the first connection was taken.
func TestSecondConnectionRefused(t *testing.T) {
	db, err := store.Open(context.Background(), pgtest.URL(t), store.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	second := map[string]func(context.Context) error{
		"Exec": func(ctx context.Context) error { _, err := db.Exec(ctx, `SELECT 1`); return err },
		"Query": func(ctx context.Context) error {
			rows, err := db.Query(ctx, `SELECT 1`)
			if err == nil {
				rows.Close()
			}
			return err
		},
		"QueryRow": func(ctx context.Context) error { var n int; return db.QueryRow(ctx, `SELECT 1`).Scan(&n) },
		"ReadTx": func(ctx context.Context) error {
			return db.ReadTx(ctx, func(context.Context, store.Tx) error { return nil })
		},
		"InTx": func(ctx context.Context) error {
			return db.InTx(ctx, func(context.Context, store.Tx) error { return nil })
		},
		"WithConn": func(ctx context.Context) error {
			return db.WithConn(ctx, func(context.Context, *pgxpool.Conn) error { return nil })
		},
		"Begin": func(ctx context.Context) error {
			_, tx, err := db.Begin(ctx)
			if err == nil {
				_ = tx.Rollback(ctx)
			}
			return err
		},
	}
	first := map[string]func(func(context.Context) error) error{
		"ReadTx": func(f func(context.Context) error) error {
			return db.ReadTx(ctx, func(ctx context.Context, _ store.Tx) error { return f(ctx) })
		},
		"InTx": func(f func(context.Context) error) error {
			return db.InTx(ctx, func(ctx context.Context, _ store.Tx) error { return f(ctx) })
		},
		"WithConn": func(f func(context.Context) error) error {
			return db.WithConn(ctx, func(ctx context.Context, _ *pgxpool.Conn) error { return f(ctx) })
		},
		"Begin": func(f func(context.Context) error) error {
			hctx, tx, err := db.Begin(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			return f(hctx)
		},
	}
	for fname, hold := range first {
		for sname, ask := range second {
			t.Run(fname+"/"+sname, func(t *testing.T) {
				err := hold(ask)
				if !errors.Is(err, store.ErrConnHeld) {
					t.Fatalf("second connection inside %s: got %v, want ErrConnHeld", fname, err)
				}
			})
		}
	}
	// Outside a held connection every method works.
	for sname, ask := range second {
		if err := ask(ctx); err != nil {
			t.Fatalf("%s on a free pool: %v", sname, err)
		}
	}
}

// An exhausted pool is reported while it lasts and logged once it has lasted
// longer than the threshold.
func TestPoolExhaustionReported(t *testing.T) {
	var logs syncBuffer
	db, err := store.Open(context.Background(), pgtest.URL(t), store.Options{MaxConns: 1, ExhaustedWarnAfter: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if st := db.Status(); st.MaxConns != 1 || st.ExhaustedMS != 0 {
		t.Fatalf("idle pool status %+v", st)
	}
	err = db.WithConn(context.Background(), func(context.Context, *pgxpool.Conn) error {
		// Stays: the pool held past the warning's threshold (200 ms) on
		// the real clock is what is reported.
		time.Sleep(700 * time.Millisecond)
		if st := db.Status(); st.InUse != 1 || st.ExhaustedMS < 200 {
			t.Errorf("status while every connection is held: %+v", st)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(logs.String(), "database pool exhausted") && strings.Contains(logs.String(), "free connections again")
	}, "the exhaustion warning and its end logged:\n%s", func() any { return logs.String() })
	if st := db.Status(); st.ExhaustedMS != 0 || st.LastExhaustionMS < 200 {
		t.Fatalf("status after release %+v", st)
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
