package bench

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// InvokeScript is pgbench's transaction for one invocation, the same
// shape the server runs (see the file's comment).
//
//go:embed pgbench_invoke.sql
var InvokeScript string

// PGResult is one pgbench run.
type PGResult struct {
	// Workload is the syncd workload this run bounds.
	Workload  string     `json:"workload"`
	Clients   int        `json:"clients"`
	Rooms     int        `json:"rooms"`
	Seconds   float64    `json:"seconds"`
	TPS       float64    `json:"tps"`
	LatencyMs float64    `json:"latency_ms"`
	Intervals []Interval `json:"intervals,omitempty"`
	// Load1 is the one-minute load average when it ended.
	Load1 float64 `json:"load1,omitempty"`
	// Command is how to run it again (the database URL left out).
	Command string `json:"command"`
}

// findPGBench looks on PATH and then where Debian's packages put it.
func findPGBench() (string, error) {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	if len(found) > 0 {
		return found[len(found)-1], nil
	}
	return "", errors.New("pgbench is not installed (Debian: apt-get install postgresql-client or postgresql-contrib)")
}

// runPGBench runs the invocation shape on the server's database for each
// invocation workload asked for, with its clients and rooms, then removes
// what it wrote so that syncd's runs see the tables as they were.
func runPGBench(ctx context.Context, opt Options) ([]*PGResult, error) {
	if opt.DatabaseURL == "" {
		return nil, errors.New("-pgbench needs the server's database: set -database-url (or DATABASE_URL)")
	}
	bin, err := findPGBench()
	if err != nil {
		return nil, err
	}
	var runs []*PGResult
	for _, w := range opt.Workloads {
		switch w {
		case Invoke1:
			runs = append(runs, &PGResult{Workload: w, Clients: 1, Rooms: 1})
		case InvokeN:
			runs = append(runs, &PGResult{Workload: w, Clients: opt.Clients, Rooms: 1})
		case Rooms:
			runs = append(runs, &PGResult{Workload: w, Clients: opt.Clients, Rooms: opt.Rooms})
			if opt.Rooms < QuietRooms {
				runs = append(runs, &PGResult{Workload: w, Clients: opt.Clients, Rooms: QuietRooms})
			}
		}
	}
	if len(runs) == 0 {
		return nil, nil
	}
	script, err := os.CreateTemp("", "pgbench_invoke-*.sql")
	if err != nil {
		return nil, err
	}
	defer os.Remove(script.Name())
	if _, err := script.WriteString(InvokeScript); err != nil {
		return nil, err
	}
	script.Close()
	conn, err := pgx.Connect(ctx, opt.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("connecting to the database for pgbench: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	maxRooms := 0
	for _, r := range runs {
		maxRooms = max(maxRooms, r.Rooms)
	}
	clean := func() error {
		_, err := conn.Exec(context.WithoutCancel(ctx), `DELETE FROM state WHERE room_id LIKE 'pgb%'`)
		if err == nil {
			_, err = conn.Exec(context.WithoutCancel(ctx), `DELETE FROM rooms WHERE id LIKE 'pgb%'`)
		}
		if err == nil {
			_, err = conn.Exec(context.WithoutCancel(ctx), `VACUUM ANALYZE state`)
		}
		if err == nil {
			// Flush what pgbench dirtied now, or the checkpoint lands in
			// syncd's run (fsync is on) and slows its first seconds. Needs
			// a superuser or pg_checkpoint; without, the run goes on.
			_, _ = conn.Exec(context.WithoutCancel(ctx), `CHECKPOINT`)
		}
		return err
	}
	if err := clean(); err != nil {
		return nil, fmt.Errorf("clearing pgbench's rooms: %w", err)
	}
	defer clean() //nolint:errcheck // best effort; the next run clears again
	if _, err := conn.Exec(ctx, `INSERT INTO rooms (id, token_hash, view_token_hash)
		SELECT 'pgb' || i, ('pgbt' || i)::bytea, ('pgbv' || i)::bytea FROM generate_series(1, $1::int) i`, maxRooms); err != nil {
		return nil, fmt.Errorf("creating pgbench's rooms: %w", err)
	}
	for _, r := range runs {
		fmt.Fprintf(opt.Log, "syncd bench: pgbench for %s (%d clients, %d rooms)…\n", r.Workload, r.Clients, r.Rooms)
		secs := max(1, int(opt.Duration.Round(time.Second).Seconds()))
		args := []string{"-n", "-f", script.Name(), "-D", "nrooms=" + strconv.Itoa(r.Rooms), "-c", strconv.Itoa(r.Clients),
			"-j", strconv.Itoa(min(r.Clients, runtime.NumCPU())), "-T", strconv.Itoa(secs)}
		if opt.Intervals > 0 {
			args = append(args, "-P", strconv.Itoa(max(1, int(opt.Intervals.Round(time.Second).Seconds()))))
		}
		r.Command = "pgbench " + strings.Join(args, " ") + " <database URL>"
		r.Command = strings.Replace(r.Command, script.Name(), "cmd/syncd/bench/pgbench_invoke.sql", 1)
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, append(args, opt.DatabaseURL)...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return runs, fmt.Errorf("pgbench: %w: %s", err, strings.TrimSpace(stderr.String()))
		}
		if err := parsePGBench(r, stdout.String(), stderr.String()); err != nil {
			return runs, err
		}
		r.Seconds, r.Load1 = float64(secs), load1()
	}
	return runs, nil
}

var (
	tpsRE      = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)
	latencyRE  = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)
	progressRE = regexp.MustCompile(`^progress: ([0-9.]+) s, ([0-9.]+) tps, lat ([0-9.]+) ms`)
	failedRE   = regexp.MustCompile(`(?m)^number of failed transactions: ([1-9][0-9]*)`)
)

// parsePGBench reads pgbench's summary (stdout) and progress (stderr).
func parsePGBench(r *PGResult, stdout, stderr string) error {
	m := tpsRE.FindStringSubmatch(stdout)
	if m == nil {
		return fmt.Errorf("pgbench printed no tps: %s", strings.TrimSpace(stdout+stderr))
	}
	r.TPS, _ = strconv.ParseFloat(m[1], 64)
	if m := latencyRE.FindStringSubmatch(stdout); m != nil {
		r.LatencyMs, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := failedRE.FindStringSubmatch(stdout); m != nil {
		return fmt.Errorf("pgbench: %s transactions failed", m[1])
	}
	prev := 0.0
	sc := bufio.NewScanner(strings.NewReader(stderr))
	for sc.Scan() {
		if m := progressRE.FindStringSubmatch(sc.Text()); m != nil {
			end, _ := strconv.ParseFloat(m[1], 64)
			tps, _ := strconv.ParseFloat(m[2], 64)
			lat, _ := strconv.ParseFloat(m[3], 64)
			r.Intervals = append(r.Intervals, Interval{StartS: prev, RPS: tps, MeanMs: lat})
			prev = end
		}
	}
	return nil
}
