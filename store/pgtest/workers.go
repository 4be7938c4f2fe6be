package pgtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/store/embedpg"
)

// Worker is a test's handle on one worker of the Citus cluster
// (SYNC_TEST_CITUS): which rooms it holds, and killing it as a crash
// would and bringing it back.
type Worker struct {
	// Index is the worker's place in Workers, from 0.
	Index int
	// Port is its loopback port, as the coordinator's metadata names it.
	Port int
	c    *embedpg.Cluster
}

// Workers returns the cluster's workers (none on plain PostgreSQL),
// starting the cluster if it is not yet.
func Workers(t testing.TB) []*Worker {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if err := start(); err != nil {
		t.Fatalf("pgtest: start PostgreSQL: %v", err)
	}
	out := make([]*Worker, len(workers))
	for i, w := range workers {
		out[i] = &Worker{Index: i, Port: portOf(w), c: w}
	}
	return out
}

// WorkerOf returns the worker that holds room's shard in the database at
// url (one of URL's; the room need not exist: the shard is the hash's).
func WorkerOf(t testing.TB, url, room string) *Worker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(ctx)
	port, err := shardPort(ctx, conn, room)
	if err != nil {
		t.Fatalf("pgtest: the worker of room %q: %v", room, err)
	}
	for _, w := range Workers(t) {
		if w.Port == port {
			return w
		}
	}
	t.Fatalf("pgtest: room %q is on port %d, no worker of this cluster", room, port)
	return nil
}

// shardPort is the port of the worker holding room's shard, asked of the
// coordinator on conn (the room need not exist: the shard is the hash's).
func shardPort(ctx context.Context, conn *pgx.Conn, room string) (port int, err error) {
	err = conn.QueryRow(ctx, `SELECT nodeport FROM pg_dist_shard_placement
		WHERE shardid = get_shard_id_for_distribution_column('rooms', $1::text)`, room).Scan(&port)
	return port, err
}

// Kill ends the worker as a crash would (kill -9 of its postmaster and
// backends). It is restarted when the test ends if the test has not
// done so: the cluster serves the tests after it.
func (w *Worker) Kill(t testing.TB) {
	t.Helper()
	if err := w.c.Kill(); err != nil {
		t.Fatalf("pgtest: kill worker %d: %v", w.Index, err)
	}
	t.Cleanup(func() {
		if !w.Up() {
			_ = w.c.Restart(context.Background())
		}
	})
}

// Restart starts a killed worker again (crash recovery: what it had
// committed is there) and waits until it accepts connections.
func (w *Worker) Restart(t testing.TB) {
	t.Helper()
	if err := w.c.Restart(context.Background()); err != nil {
		t.Fatalf("pgtest: restart worker %d: %v", w.Index, err)
	}
}

// Up reports whether the worker accepts connections.
func (w *Worker) Up() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, w.c.URLFor("postgres"))
	if err != nil {
		return false
	}
	conn.Close(ctx)
	return true
}

// String names the worker in test messages.
func (w *Worker) String() string { return fmt.Sprintf("worker %d (port %d)", w.Index, w.Port) }
