package embedpg_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/store/embedpg"
)

// Data committed before a stop is there after the next start, and a second
// start reuses the initialised cluster instead of re-running initdb.
func TestRestartKeepsData(t *testing.T) {
	dir, err := os.MkdirTemp("", "embedpg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx := context.Background()
	opt := embedpg.Options{Dir: dir, Database: "restart", Logger: slog.New(slog.DiscardHandler)}

	run := func(sql string, scan ...any) {
		t.Helper()
		c, err := embedpg.Start(ctx, opt)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := pgx.Connect(ctx, c.URL())
		if err != nil {
			t.Fatal(err)
		}
		if len(scan) == 0 {
			_, err = conn.Exec(ctx, sql)
		} else {
			err = conn.QueryRow(ctx, sql).Scan(scan...)
		}
		conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := c.Stop(sctx); err != nil {
			t.Fatal(err)
		}
	}
	run(`CREATE TABLE kept (v text); INSERT INTO kept VALUES ('survives')`)
	var got string
	run(`SELECT v FROM kept`, &got)
	if got != "survives" {
		t.Fatalf("after restart got %q", got)
	}
}

func TestStopIsIdempotentAndSocketOnly(t *testing.T) {
	dir, err := os.MkdirTemp("", "embedpg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx := context.Background()
	c, err := embedpg.Start(ctx, embedpg.Options{Dir: dir, NoSync: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	var listen string
	if err := conn.QueryRow(ctx, `SHOW listen_addresses`).Scan(&listen); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if listen != "" {
		t.Fatalf("listen_addresses = %q, want no TCP listener", listen)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := pgx.Connect(ctx, c.URL()); err == nil {
		t.Fatal("server still answers after Stop")
	}
}

// A second start that may attach on a running cluster's directory (syncd
// invite while syncd runs) uses that cluster and leaves it running when it
// stops.
func TestSecondStartSharesTheCluster(t *testing.T) {
	dir, err := os.MkdirTemp("", "embedpg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx := context.Background()
	opt := embedpg.Options{Dir: dir, NoSync: true, Logger: slog.New(slog.DiscardHandler)}
	owner, err := embedpg.Start(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Stop(ctx)
	opt.Attach = true
	guest, err := embedpg.Start(ctx, opt)
	if err != nil {
		t.Fatalf("second start: %v", err)
	}
	if err := guest.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, owner.URL())
	if err != nil {
		t.Fatalf("the guest's Stop stopped the owner's cluster: %v", err)
	}
	conn.Close(ctx)

	// The guest's failure is its own while the owner runs; once the
	// owner has stopped the cluster under it, Explain says so.
	failed := errors.New("query failed")
	if got := guest.Explain(failed); got != failed {
		t.Fatalf("Explain with the owner running: %v", got)
	}
	if err := owner.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	got := guest.Explain(failed)
	if !errors.Is(got, failed) || !strings.Contains(got.Error(), "stopped it while the command ran") ||
		!strings.Contains(got.Error(), fmt.Sprintf("process %d", os.Getpid())) {
		t.Fatalf("Explain after the owner stopped: %v", got)
	}
}

// lines is a log destination that hands each line to a channel.
type lines chan string

func (l lines) Write(b []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		select {
		case l <- line:
		default:
		}
	}
	return len(b), nil
}

// A second start that may not attach (a server) does not use the cluster
// another process runs: it says it waits for that owner, starts its own
// cluster once the owner has stopped, and owns it (its Stop stops it).
func TestSecondStartWaitsForTheOwner(t *testing.T) {
	dir, err := os.MkdirTemp("", "embedpg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx := context.Background()
	owner, err := embedpg.Start(ctx, embedpg.Options{Dir: dir, NoSync: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Stop(ctx)

	log := make(lines, 100)
	type started struct {
		c   *embedpg.Cluster
		err error
	}
	second := make(chan started, 1)
	go func() {
		c, err := embedpg.Start(ctx, embedpg.Options{Dir: dir, NoSync: true, Logger: slog.New(slog.NewTextHandler(log, nil))})
		second <- started{c, err}
	}()
	want := fmt.Sprintf("waiting for the previous syncd (pid %d) to stop its embedded PostgreSQL", os.Getpid())
	for waiting := false; !waiting; {
		select {
		case line := <-log:
			waiting = strings.Contains(line, want)
		case s := <-second:
			if s.err == nil {
				s.c.Stop(ctx)
			}
			t.Fatalf("the second start returned (%v) while the first process ran the cluster, without waiting for it", s.err)
		case <-time.After(30 * time.Second):
			t.Fatalf("no %q in 30 s", want)
		}
	}
	if err := owner.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	s := <-second
	if s.err != nil {
		t.Fatalf("second start after the owner stopped: %v", s.err)
	}
	conn, err := pgx.Connect(ctx, s.c.URL())
	if err != nil {
		t.Fatalf("the second start's cluster: %v", err)
	}
	conn.Close(ctx)
	if err := s.c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.Connect(ctx, s.c.URL()); err == nil {
		t.Fatal("the second start's Stop left the cluster running: it did not own it")
	}
}

// Past OwnerWait a second start refuses, naming the owner and what to do;
// a start that may attach, on the same busy directory, attaches.
func TestSecondStartRefusesPastTheWait(t *testing.T) {
	dir, err := os.MkdirTemp("", "embedpg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx := context.Background()
	opt := embedpg.Options{Dir: dir, NoSync: true, Logger: slog.New(slog.DiscardHandler)}
	owner, err := embedpg.Start(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Stop(ctx)
	opt.OwnerWait = 300 * time.Millisecond
	c, err := embedpg.Start(ctx, opt)
	if err == nil {
		c.Stop(ctx)
		t.Fatal("a second start on a cluster another process runs did not refuse")
	}
	for _, want := range []string{fmt.Sprintf("process %d", os.Getpid()), "SYNC_DATA_DIR", "DATABASE_URL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	conn, err := pgx.Connect(ctx, owner.URL())
	if err != nil {
		t.Fatalf("the owner's cluster after the refused start: %v", err)
	}
	conn.Close(ctx)
}

// Kill ends the server as a crash would: its clients lose their
// connections at once; Restart brings it back on the same socket and
// port with everything committed before the kill.
func TestKillAndRestart(t *testing.T) {
	dir, err := os.MkdirTemp("", "embedpg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx := context.Background()
	c, err := embedpg.Start(ctx, embedpg.Options{Dir: dir, Database: "killed", NoSync: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE kept (v text); INSERT INTO kept VALUES ('committed')`); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT 1`); err == nil {
		t.Fatal("a connection to the killed server still answers")
	}
	conn.Close(ctx)
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var got string
	if err := conn.QueryRow(ctx, `SELECT v FROM kept`).Scan(&got); err != nil || got != "committed" {
		t.Fatalf("after the restart: %q, %v", got, err)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.Stop(sctx); err != nil {
		t.Fatal(err)
	}
}
