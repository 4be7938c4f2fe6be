package pgtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/store/embedpg"
)

// CitusEnv names the setting that runs a test binary's databases on a
// Citus cluster started on loopback: SYNC_TEST_CITUS=2 is a coordinator
// and two workers. The tests are the same; every database they get is
// migrated and distributed (store.Migrate) as syncd does on Citus.
// Without Citus installed the package's tests are skipped, with one line
// saying so, except with CI=true, where they fail.
const CitusEnv = "SYNC_TEST_CITUS"

// citusShards is the shard count of the tests' distributed tables: two
// per worker of the usual two, so that rooms land on both and a
// statement reaching every shard stays cheap on a small machine.
const citusShards = "4"

var workers []*embedpg.Cluster

// citusWorkers is the number of workers SYNC_TEST_CITUS asks for (0:
// plain PostgreSQL).
func citusWorkers() (int, error) {
	v := os.Getenv(CitusEnv)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 8 {
		return 0, fmt.Errorf("pgtest: %s=%q: want the number of Citus workers, 0 to 8", CitusEnv, v)
	}
	return n, nil
}

// Citus reports whether the tests run on a Citus cluster.
func Citus() bool {
	n, err := citusWorkers()
	return err == nil && n > 0
}

// citusMissing says why Citus cannot run here ("" when it can): the
// server binaries lack its library.
func citusMissing() string {
	bin, err := embedpg.FindBinaries()
	if err != nil {
		return err.Error()
	}
	lib := filepath.Join(filepath.Dir(bin), "lib")
	if out, err := osexec.Command(filepath.Join(bin, "pg_config"), "--pkglibdir").Output(); err == nil {
		lib = strings.TrimSpace(string(out))
	}
	if _, err := os.Stat(filepath.Join(lib, "citus.so")); err != nil {
		return fmt.Sprintf("Citus is not installed for the PostgreSQL in %s (no %s; build it with shared/citus/build.sh)", bin, filepath.Join(lib, "citus.so"))
	}
	return ""
}

// citusSettings are every node's: Citus loaded, and plain connections
// between the nodes (loopback, trust).
func citusSettings() map[string]string {
	// synchronous_commit stays on: a worker killed mid-load
	// (Worker.Kill) must keep what it acknowledged, and without fsync
	// that costs a write to the WAL file, not a flush to the disk.
	return map[string]string{"fsync": "off", "synchronous_commit": "on", "full_page_writes": "off", "max_connections": "300",
		"shared_preload_libraries": "citus", "citus.node_conninfo": "sslmode=disable", "citus.shard_count": citusShards,
		// One maintenance daemon per database in use: room for a few
		// tests' databases at once.
		"max_worker_processes": "64",
		// Tests that make a statement fail put a trigger on a room table.
		"citus.enable_unsafe_triggers": "on"}
}

// startCitus starts a coordinator (cluster) and n workers, each on a
// free loopback port; mu is held.
func startCitus(ctx context.Context, n int) error {
	dir, err := os.MkdirTemp("", "syncpg")
	if err != nil {
		return err
	}
	tmpDir = dir
	// Each node's directory is handed to the account PostgreSQL runs as
	// (as root, postgres), which must be able to enter this one.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	nodes := make([]*embedpg.Cluster, n+1)
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i], errs[i] = startNode(ctx, filepath.Join(dir, strconv.Itoa(i)))
		}()
	}
	wg.Wait()
	cluster, workers = nodes[0], nodes[1:]
	if err := errors.Join(errs...); err != nil {
		return err
	}
	adminURL = cluster.URLFor("postgres")
	return nil
}

// startNode starts one node on a port free a moment ago: another process
// may take it meanwhile, so a failure is tried again on another.
func startNode(ctx context.Context, dir string) (*embedpg.Cluster, error) {
	var err error
	for range 3 {
		var port int
		if port, err = freePort(); err != nil {
			return nil, err
		}
		var c *embedpg.Cluster
		c, err = embedpg.Start(ctx, embedpg.Options{Dir: dir, Database: "postgres", NoSync: true, Port: port,
			Settings: citusSettings(), Logger: slog.New(slog.DiscardHandler)})
		if err == nil {
			return c, nil
		}
	}
	return nil, err
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func portOf(c *embedpg.Cluster) int {
	p, _ := strconv.Atoi(queryOf(c.URL(), "port"))
	return p
}

// citusTemplate makes database name a Citus database on every node, the
// workers added to the coordinator's: migrated, it is the template each
// test's database is copied from, on every node alike (a copy of a
// distributed database is one when each node copies its part, the shards
// and metadata being named alike).
func citusTemplate(ctx context.Context, name string) error {
	for _, w := range workers {
		if err := execAll(ctx, w.URLFor("postgres"), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return err
		}
		if err := execAll(ctx, w.URLFor(name), "CREATE EXTENSION citus"); err != nil {
			return err
		}
	}
	stmts := []string{"CREATE EXTENSION citus", fmt.Sprintf("SELECT citus_set_coordinator_host('127.0.0.1', %d)", portOf(cluster))}
	for _, w := range workers {
		stmts = append(stmts, fmt.Sprintf("SELECT citus_add_node('127.0.0.1', %d)", portOf(w)))
	}
	if err := execAll(ctx, adminURL, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return err
	}
	return execAll(ctx, cluster.URLFor(name), stmts...)
}

// releaseTemplate ends every session on the template, on every node (the
// coordinator's connections to the workers, Citus's maintenance daemons),
// and refuses new ones: a database is copied only when nobody is
// connected to it, and Citus restarts a database's maintenance daemon a
// few seconds after it ends.
func releaseTemplate(ctx context.Context, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, c := range append([]*embedpg.Cluster{cluster}, workers...) {
		conn, err := pgx.Connect(ctx, c.URLFor("postgres"))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH ALLOW_CONNECTIONS false"); err != nil {
			return err
		}
		for {
			var left int
			if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = $1 AND pid <> pg_backend_pid()`, name).Scan(&left); err != nil {
				return err
			}
			if left == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("pgtest: sessions still on the Citus template %s after 30 s", name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// copyCitus copies the template to database name on every node at once,
// file by file: a Citus database's catalog is large enough that copying
// it through the WAL (PostgreSQL 15's default) took several times as long.
func copyCitus(ctx context.Context, name string) error {
	nodes := append([]*embedpg.Cluster{cluster}, workers...)
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, c := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = execAll(ctx, c.URLFor("postgres"), fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s STRATEGY FILE_COPY",
				pgx.Identifier{name}.Sanitize(), pgx.Identifier{template}.Sanitize()))
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%w (on the template: %s)", errs[i], sessions(ctx, c, template))
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// sessions describes who is connected to database name on node c.
func sessions(ctx context.Context, c *embedpg.Cluster, name string) string {
	conn, err := pgx.Connect(ctx, c.URLFor("postgres"))
	if err != nil {
		return err.Error()
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT format('%s %s %s: %s', pid, application_name, backend_type, left(query, 200))
		FROM pg_stat_activity WHERE datname = $1`, name)
	if err != nil {
		return err.Error()
	}
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err.Error()
	}
	return strings.Join(list, "; ")
}

// dropCitus drops a test's database on every node when the test ends:
// each database in use has a maintenance daemon on each node, and those
// of finished tests would crowd out the next.
func dropCitus(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range append([]*embedpg.Cluster{cluster}, workers...) {
		_ = execAll(ctx, c.URLFor("postgres"), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	}
}

func stopWorkers(ctx context.Context) {
	for _, w := range workers {
		if w != nil {
			_ = w.Stop(ctx)
		}
	}
}

func execAll(ctx context.Context, url string, stmts ...string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("pgtest: %s: %w", s, err)
		}
	}
	return nil
}

func queryOf(raw, key string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Query().Get(key)
}

// LockWaits is a statement counting the other sessions of this database
// that wait for a lock. On Citus it counts them on every node: a
// statement routed to a worker waits there for the row it locks, and its
// session on the coordinator waits for the worker, not for a lock.
func LockWaits() string {
	if Citus() {
		return `SELECT count(*) FROM citus_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
			AND global_pid <> citus_backend_gpid()`
	}
	return `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
		AND pid <> pg_backend_pid()`
}
