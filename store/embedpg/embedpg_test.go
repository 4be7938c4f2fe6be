package embedpg_test

import (
	"context"
	"log/slog"
	"os"
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

// A second start on a running cluster's directory (syncd invite while
// syncd runs) uses that cluster and leaves it running when it stops.
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
}
