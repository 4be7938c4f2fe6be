// Package pgtest gives tests a real, freshly migrated PostgreSQL database.
//
// Each test binary starts one throwaway cluster with the same launcher the
// server uses (store/embedpg), migrates a template database once, and hands
// every test its own copy of it. Set SYNC_TEST_DATABASE_URL to a server's
// admin URL to use that server instead of starting one, or SYNC_TEST_CITUS
// to a number of workers to start a Citus cluster instead (CitusEnv).
//
// A package using it declares
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
package pgtest

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/embedpg"
)

var (
	mu       sync.Mutex
	cluster  *embedpg.Cluster
	tmpDir   string
	adminURL string
	template string
	counter  int
)

// Main runs the tests, then stops the cluster and removes its files.
func Main(m *testing.M) int {
	if n, err := citusWorkers(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	} else if n > 0 {
		if why := citusMissing(); why != "" {
			if os.Getenv("CI") == "true" {
				fmt.Fprintf(os.Stderr, "pgtest: %s=%d asks for a Citus cluster, and with CI=true it must run: %s\n", CitusEnv, n, why)
				return 1
			}
			fmt.Printf("pgtest: skipping this package's tests: %s=%d asks for a Citus cluster, but %s\n", CitusEnv, n, why)
			return 0
		}
	}
	code := m.Run()
	mu.Lock()
	defer mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stopWorkers(ctx)
	if cluster != nil {
		_ = cluster.Stop(ctx)
	}
	if tmpDir != "" {
		_ = os.RemoveAll(tmpDir)
	}
	return code
}

// start brings up the shared server and the migrated template; mu is held.
func start() error {
	if template != "" {
		return nil
	}
	ctx := context.Background()
	workers, err := citusWorkers()
	if err != nil {
		return err
	}
	if u := os.Getenv("SYNC_TEST_DATABASE_URL"); u != "" && workers == 0 {
		adminURL = u
	} else if workers > 0 {
		if err := startCitus(ctx, workers); err != nil {
			return err
		}
	} else {
		dir, err := os.MkdirTemp("", "syncpg")
		if err != nil {
			return err
		}
		tmpDir = dir
		c, err := embedpg.Start(ctx, embedpg.Options{
			Dir:      dir,
			Database: "postgres",
			NoSync:   true,
			// Durability is pointless for a throwaway cluster.
			Settings: map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", "max_connections": "200"},
			Logger:   slog.New(slog.DiscardHandler),
		})
		if err != nil {
			return err
		}
		cluster = c
		adminURL = c.URL()
	}
	name := fmt.Sprintf("sync_tmpl_%d_%d", os.Getpid(), time.Now().UnixNano())
	if workers > 0 {
		err = citusTemplate(ctx, name)
	} else {
		err = exec(ctx, adminURL, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	}
	if err != nil {
		return err
	}
	db, err := store.Open(ctx, withDatabase(adminURL, name), store.Options{})
	if err != nil {
		return err
	}
	_, err = db.Migrate(ctx)
	db.Close() // a template must have no connections to be copied
	if err != nil {
		return err
	}
	if workers > 0 {
		if err := releaseTemplate(ctx, name); err != nil {
			return err
		}
	}
	template = name
	return nil
}

func exec(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func withDatabase(raw, db string) string {
	u, err := url.Parse(raw)
	if err != nil {
		panic(err)
	}
	u.Path = "/" + db
	return u.String()
}

// URL returns the connection string of a new, migrated, empty database.
func URL(t testing.TB) string {
	t.Helper()
	name := newDatabase(t, "", func(name string) error {
		if Citus() {
			return copyCitus(context.Background(), name)
		}
		return exec(context.Background(), adminURL, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s",
			pgx.Identifier{name}.Sanitize(), pgx.Identifier{template}.Sanitize()))
	})
	if Citus() {
		t.Cleanup(func() { dropCitus(name) })
	}
	return withDatabase(adminURL, name)
}

// EmptyURL returns the connection string of a new database with no
// schema, dropped when the test ends: tests of the migrations themselves.
// On Citus the database has the citus extension on every node and the
// workers added, as a Citus deployment starts before its first migration.
func EmptyURL(t testing.TB) string {
	t.Helper()
	name := newDatabase(t, "empty_", func(name string) error {
		if Citus() {
			return citusTemplate(context.Background(), name)
		}
		return exec(context.Background(), adminURL, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	})
	t.Cleanup(func() {
		if Citus() {
			dropCitus(name)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = exec(ctx, adminURL, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	return withDatabase(adminURL, name)
}

// newDatabase starts the server if need be and creates the test's next
// database, named template_<kind><n>, with create, under the lock that
// numbers them (CREATE DATABASE ... TEMPLATE refuses a template in use by
// another copy at the same moment).
func newDatabase(t testing.TB, kind string, create func(name string) error) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if err := start(); err != nil {
		t.Fatalf("pgtest: start PostgreSQL: %v", err)
	}
	counter++
	name := fmt.Sprintf("%s_%s%d", template, kind, counter)
	if err := create(name); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	return name
}

// MaxConns is the pool size New gives a test: deliberately tiny, so that
// code holding one connection while it waits for another deadlocks in the
// tests (and store's guard refuses it) instead of only under production
// load.
const MaxConns = 2

// New returns a pool of MaxConns connections on a new, migrated, empty
// database, closed when the test ends.
func New(t testing.TB) *store.DB {
	t.Helper()
	return NewPool(t, MaxConns)
}

// NewPool is New with a pool of maxConns connections (benchmarks measure
// the server's default pool size with it).
func NewPool(t testing.TB, maxConns int32) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), URL(t), store.Options{MaxConns: maxConns})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(db.Close)
	return db
}
