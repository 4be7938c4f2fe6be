package bench_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/cmd/syncd/bench"
	"github.com/syncsubstrate/sync/cmd/syncd/metrics"
	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/lobby/web"
	"github.com/syncsubstrate/sync/mcp"
	"github.com/syncsubstrate/sync/oauth"
	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/rest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// server is the real REST API on a fresh database with a tiny pool.
func server(t *testing.T, opt rest.Options) (*httptest.Server, *store.DB, string) {
	url := pgtest.URL(t)
	db, err := store.Open(context.Background(), url, store.Options{MaxConns: pgtest.MaxConns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	svc := substrate.New(db, substrate.Options{Features: testFeatures})
	t.Cleanup(svc.Close)
	srv := httptest.NewUnstartedServer(rest.Handler(svc, opt))
	// As syncd's listener: HTTP/1.1 and HTTP/2 without TLS (the waits
	// workload's client speaks the latter).
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &protos
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, db, url
}

// Every workload, briefly, against a real server: each sustains requests
// and none fails; the JSON report has the documented shape.
func TestEveryWorkloadRuns(t *testing.T) {
	srv, _, _ := server(t, rest.Options{RatePerSecond: -1, CreateToken: "let-me-create"})
	rep, err := bench.Run(context.Background(), bench.Options{URL: srv.URL, CreateToken: "let-me-create",
		Duration: 600 * time.Millisecond, Warmup: 100 * time.Millisecond, Intervals: 300 * time.Millisecond,
		Clients: 3, Rooms: 2, Agents: 2, Readers: 2, Waits: 6, PID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	// One per workload, the context one per credential.
	if want := len(bench.Names) + len(bench.ContextCredentials) - 1; len(rep.Results) != want {
		t.Fatalf("%d results, want one per workload and context credential (%d)", len(rep.Results), want)
	}
	var readers []string
	for _, r := range rep.Results {
		if r.Workload == bench.Context {
			readers = append(readers, r.Credential)
		}
	}
	if strings.Join(readers, "; ") != "2 agent tokens; room token; view token" {
		t.Errorf("context read with %q, want each reader its agent's token, then the room token, then the view token", readers)
	}
	for _, r := range rep.Results {
		// Wake-ups are timed from the write's response, which a waiter's
		// own response can beat: their latency may be zero.
		if r.Requests == 0 || r.Errors != 0 || r.P50ms <= 0 && r.Workload != bench.Wake && r.Workload != bench.Waits {
			t.Errorf("%s: %d requests, %d errors (%s), p50 %.2f ms", r.Workload, r.Requests, r.Errors, r.FirstError, r.P50ms)
		}
		if r.Workload != bench.Waits && (r.RPS <= 0 || len(r.Intervals) != 2) {
			t.Errorf("%s: %.1f rps, %d intervals, want 2", r.Workload, r.RPS, len(r.Intervals))
		}
		if r.ServerRSSMiB <= 0 {
			t.Errorf("%s: no resident set read for pid %d", r.Workload, rep.PID)
		}
		if r.Credential == "" || r.NoBound == "" || r.BoundTPS != 0 {
			t.Errorf("%s: credential %q, no bound %q, bound %.0f: want a credential and, without -pgbench, why there is no ratio", r.Workload, r.Credential, r.NoBound, r.BoundTPS)
		}
	}
	if w := rep.Results[len(rep.Results)-1]; w.Workload != bench.Waits || w.Requests != 6 || !strings.Contains(w.Note, "6 of 6 woken") {
		t.Errorf("waits: %+v", w)
	}

	raw, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var shape struct {
		Target  string           `json:"target"`
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(raw, &shape); err != nil || shape.Target != srv.URL || len(shape.Results) == 0 {
		t.Fatalf("report JSON %s: %v", raw, err)
	}
	for _, r := range shape.Results {
		for _, k := range []string{"workload", "label", "credential", "clients", "rooms", "requests", "errors", "rps", "p50_ms", "p99_ms", "server_rss_mib", "no_bound"} {
			if _, ok := r[k]; !ok {
				t.Errorf("result %v has no %q", r["workload"], k)
			}
		}
	}
	var text strings.Builder
	rep.WriteText(&text)
	if !strings.Contains(text.String(), "invoke, 3 clients, 2 rooms × 2") || !strings.Contains(text.String(), "per 300ms") {
		t.Errorf("text report:\n%s", text.String())
	}
	// Without -pgbench every row's bound, shape and ratio are "—".
	for _, r := range rep.Results {
		cells := row(t, text.String(), r.Label, r.Credential)
		if cells == nil {
			continue
		}
		if got := strings.Join(cells[4:7], " "); got != "— — —" {
			t.Errorf("%s, %s: bound columns %q, want — — —", r.Label, r.Credential, got)
		}
	}
	if !strings.Contains(text.String(), "bound — for invoke-1, invoke-n, rooms: not measured: run with -pgbench") {
		t.Errorf("text report does not say why the invocations have no ratio:\n%s", text.String())
	}
}

// Refused requests are counted as errors, not as throughput: against a
// server that rate-limits each credential, the closed loop sees 429s.
// One client against 2/s (burst 4): at most 6 of its requests in the
// second pass, so any machine sees 429s. (It was 8 clients against 20/s
// each: a loaded machine that served 18/s in all never met the limit.)
func TestErrorsAreCounted(t *testing.T) {
	srv, _, _ := server(t, rest.Options{RatePerSecond: 2, RateBurst: 4})
	rep, err := bench.Run(context.Background(), bench.Options{URL: srv.URL, Workloads: []string{bench.Invoke1},
		Clients: 1, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Results[0]
	t.Logf("against 2/s: %.1f rps, %d errors", r.RPS, r.Errors)
	if r.Errors == 0 || !strings.Contains(r.FirstError, "HTTP 429") || r.RPS > 8 {
		t.Fatalf("against a limit of 2/s: %.1f rps, %d errors (%s)", r.RPS, r.Errors, r.FirstError)
	}
}

// A server that wants a room-creation token refuses the set-up, and the
// run says why instead of reporting zeros.
func TestCreateTokenRefused(t *testing.T) {
	srv, _, _ := server(t, rest.Options{RatePerSecond: -1, CreateToken: "secret"})
	_, err := bench.Run(context.Background(), bench.Options{URL: srv.URL, Workloads: []string{bench.Invoke1}, Duration: 100 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("err = %v, want the 401 of room creation", err)
	}
}

// With -cpuprofile-dir each workload leaves a CPU profile of the server
// over its measured time, read from the metrics listener's
// /debug/pprof/profile (here this process's, served as syncd serves it);
// without a metrics listener the run says what it needs.
func TestCPUProfilePerWorkload(t *testing.T) {
	srv, _, _ := server(t, rest.Options{RatePerSecond: -1})
	mux := http.NewServeMux()
	metrics.Profiling(mux, "", nil)
	msrv := httptest.NewServer(mux)
	t.Cleanup(msrv.Close)
	dir := filepath.Join(t.TempDir(), "profiles")
	_, err := bench.Run(context.Background(), bench.Options{URL: srv.URL, MetricsURL: msrv.URL + "/metrics", CPUProfileDir: dir,
		Workloads: []string{bench.Invoke1, bench.Wake}, Duration: time.Second, Warmup: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{bench.Invoke1, bench.Wake} {
		raw, err := os.ReadFile(filepath.Join(dir, w+".pprof"))
		if err != nil || len(raw) < 2 || raw[0] != 0x1f || raw[1] != 0x8b {
			t.Errorf("%s: profile of %d bytes (%v), want a gzipped profile", w, len(raw), err)
		}
	}
	_, err = bench.Run(context.Background(), bench.Options{URL: srv.URL, CPUProfileDir: dir, Workloads: []string{bench.Invoke1}, Duration: 100 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "-metrics-url") {
		t.Errorf("profiles without a metrics listener: %v, want refused naming -metrics-url", err)
	}
}

// pgbench's script runs on the migrated schema (it fails when a migration
// changes what the script writes), and its bound lands beside syncd's.
func TestPGBenchBound(t *testing.T) {
	if _, err := os.Stat("/usr/bin/pgbench"); err != nil {
		if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench"); len(m) == 0 {
			t.Skip("pgbench is not installed")
		}
	}
	srv, db, url := server(t, rest.Options{RatePerSecond: -1})
	rep, err := bench.Run(context.Background(), bench.Options{URL: srv.URL, DatabaseURL: url, PGBench: true,
		Workloads: []string{bench.Invoke1, bench.Rooms}, Clients: 2, Rooms: 2, Duration: time.Second, Warmup: 0, Intervals: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The rooms workload's own 2 rooms and the QuietRooms bound the
	// targets compare it with.
	if len(rep.PGBench) != 3 || rep.PGBench[0].TPS <= 0 || rep.PGBench[1].Rooms != 2 || rep.PGBench[2].Rooms != bench.QuietRooms {
		t.Fatalf("pgbench runs: %+v", rep.PGBench)
	}
	for _, r := range rep.Results {
		if r.BoundTPS <= 0 || r.PctOfBound <= 0 || r.NoBound != "" {
			t.Errorf("%s: bound %.1f tps, %.0f %% (%s)", r.Workload, r.BoundTPS, r.PctOfBound, r.NoBound)
		}
	}
	if rooms := rep.Results[1]; len(rooms.Bounds) != 2 || rooms.Bounds[0].Rooms != bench.QuietRooms || rooms.BoundTPS != rep.PGBench[2].TPS {
		t.Errorf("rooms: bounds %+v, want the %d-room one first", rooms.Bounds, bench.QuietRooms)
	}
	// pgbench's rooms and rows are gone, so syncd's runs saw the tables as
	// they were.
	var left int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM state WHERE room_id LIKE 'pgb%'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d pgbench rows left (%v)", left, err)
	}
}

// row is the cells after label and credential of the report's row of
// them (rps, p50, p99, errors, bound, clients × rooms, % bound, cpu, rss,
// load), nil with an error when there is none.
func row(t *testing.T, text, label, credential string) []string {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, label+" ")
		if !ok {
			continue
		}
		if rest, ok = strings.CutPrefix(strings.TrimLeft(rest, " "), credential+" "); ok {
			if cells := strings.Fields(rest); len(cells) == 10 {
				return cells
			}
		}
	}
	t.Errorf("no row %q, %q with 10 cells after them in:\n%s", label, credential, text)
	return nil
}

// Each row prints its credential and its rate as a percentage of the
// bound measured for it, the rooms workload against the QuietRooms bound
// first and its own rooms' below; a workload pgbench does not bound, or
// one measured without -pgbench, prints "—" and the report says why.
func TestBoundColumns(t *testing.T) {
	pg := []*bench.PGResult{
		{Workload: bench.Invoke1, Clients: 1, Rooms: 1, TPS: 1359},
		{Workload: bench.Rooms, Clients: 8, Rooms: 8, TPS: 4349},
		{Workload: bench.Rooms, Clients: 8, Rooms: bench.QuietRooms, TPS: 5500},
	}
	rep := &bench.Report{Target: "http://x", PGBench: pg, Results: []*bench.Result{
		{Workload: bench.Invoke1, Label: "invoke, 1 client, one room", Credential: "agent token", RPS: 795},
		{Workload: bench.Rooms, Label: "invoke, 8 clients, 8 rooms × 1", Credential: "8 agent tokens", RPS: 1515},
		{Workload: bench.InvokeN, Label: "invoke, 8 clients, one room", Credential: "8 agent tokens", RPS: 1745},
		{Workload: bench.Context, Label: "context of 500 keys, 8 readers", Credential: "view token", RPS: 510},
		{Workload: bench.Context, Label: "context of 500 keys, 8 readers", Credential: "8 agent tokens", RPS: 2400},
	}}
	for _, r := range rep.Results {
		bench.AttachBounds(r, pg)
	}
	if r := rep.Results[0]; r.BoundTPS != 1359 || r.PctOfBound != 100*795.0/1359 || len(r.Bounds) != 1 {
		t.Errorf("invoke-1: bound %.0f, %.2f %%, %+v", r.BoundTPS, r.PctOfBound, r.Bounds)
	}
	if r := rep.Results[1]; r.BoundTPS != 5500 || len(r.Bounds) != 2 || r.Bounds[1].Rooms != 8 || r.Bounds[1].Pct != 100*1515.0/4349 {
		t.Errorf("rooms: bound %.0f, %+v", r.BoundTPS, r.Bounds)
	}
	var text strings.Builder
	rep.WriteText(&text)
	out := text.String()
	t.Log("\n" + out)
	for _, c := range []struct{ label, credential, bound string }{
		{"invoke, 1 client, one room", "agent token", "1359 1×1 58"},
		{"invoke, 8 clients, 8 rooms × 1", "8 agent tokens", "5500 8×64 28"},
		{"invoke, 8 clients, one room", "8 agent tokens", "— — —"},
		{"context of 500 keys, 8 readers", "view token", "— — —"},
		{"context of 500 keys, 8 readers", "8 agent tokens", "— — —"},
	} {
		if cells := row(t, out, c.label, c.credential); cells != nil && strings.Join(cells[4:7], " ") != c.bound {
			t.Errorf("%s, %s: bound columns %q, want %q", c.label, c.credential, strings.Join(cells[4:7], " "), c.bound)
		}
	}
	if !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool {
		return strings.HasPrefix(l, "  the same against ") && strings.Join(strings.Fields(l), " ") == "the same against 4349 8×8 35"
	}) {
		t.Errorf("rooms: no row of its own 8 rooms' bound:\n%s", out)
	}
	if !strings.Contains(out, "bound — for invoke-n: not measured: run with -pgbench") ||
		!strings.Contains(out, "bound — for context: no comparable bound") {
		t.Errorf("the report does not say why rows have no ratio:\n%s", out)
	}
	if n := rep.Results[2].NoBound; !strings.Contains(n, "-pgbench") {
		t.Errorf("invoke-n without its bound: no_bound %q", n)
	}
	if n := rep.Results[3].NoBound; !strings.Contains(n, "no comparable bound") {
		t.Errorf("context: no_bound %q", n)
	}
}

// Each context credential sends its own token: the agents' readers each
// their agent's, the others the room's or the view's.
func TestContextTokens(t *testing.T) {
	got := []string{bench.ContextTokenOf("agent", 0), bench.ContextTokenOf("agent", 3), bench.ContextTokenOf("room", 1), bench.ContextTokenOf("view", 1)}
	if strings.Join(got, " ") != "agent0 agent1 room view" {
		t.Fatalf("tokens %q", got)
	}
}

// The copy beside the REST benchmarks is the same script.
func TestPGBenchScriptCopy(t *testing.T) {
	raw, err := os.ReadFile("../../../substrate/rest/testdata/pgbench_invoke.sql")
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != bench.InvokeScript {
		t.Fatal("substrate/rest/testdata/pgbench_invoke.sql differs from cmd/syncd/bench/pgbench_invoke.sql: copy it")
	}
}

// pgbench's summary and progress lines are read as they are printed by
// PostgreSQL 15's pgbench; failed transactions are an error, not a rate.
func TestParsePGBench(t *testing.T) {
	stdout := "transaction type: x.sql\nnumber of failed transactions: 0 (0.000%)\nlatency average = 1.070 ms\ntps = 934.949153 (without initial connection time)\n"
	stderr := "progress: 15.0 s, 805.2 tps, lat 1.240 ms stddev 0.3, 0 failed\nprogress: 30.0 s, 754.0 tps, lat 1.320 ms stddev 0.4, 0 failed\n"
	var r bench.PGResult
	if err := bench.ParsePGBench(&r, stdout, stderr); err != nil {
		t.Fatal(err)
	}
	if r.TPS != 934.949153 || r.LatencyMs != 1.07 || len(r.Intervals) != 2 || r.Intervals[1].StartS != 15 || r.Intervals[1].RPS != 754 {
		t.Fatalf("%+v", r)
	}
	failed := strings.Replace(stdout, "transactions: 0 (", "transactions: 12 (", 1)
	if err := bench.ParsePGBench(&r, failed, ""); err == nil || !strings.Contains(err.Error(), "12 transactions failed") {
		t.Fatalf("failed transactions: err = %v", err)
	}
}

// fullServer is syncd's surfaces as its main composes them (REST, OAuth
// with the given sign-up policy, MCP, the people's pages and their live streams,
// /readyz) on a fresh database with a tiny pool, served at a localhost
// public URL as passkeys need; metrics is its Prometheus /metrics.
func fullServer(t *testing.T, signup string) (base, metricsURL string) {
	url := pgtest.URL(t)
	db, err := store.Open(context.Background(), url, store.Options{MaxConns: pgtest.MaxConns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base = "http://localhost:" + strings.Split(ln.Addr().String(), ":")[1]
	svc := substrate.New(db, substrate.Options{Features: testFeatures})
	t.Cleanup(svc.Close)
	lob := lobby.New(db, svc)
	auth, err := oauth.New(context.Background(), db, oauth.Options{PublicURL: base, Rooms: lob, Signup: signup, RatePerSecond: -1})
	if err != nil {
		t.Fatal(err)
	}
	people, err := web.New(web.Options{Lobby: lob, Substrate: svc, SignedIn: auth.SignedIn, PublicURL: base})
	if err != nil {
		t.Fatal(err)
	}
	pages := http.NewServeMux()
	pages.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "ready", "pool": db.Status()})
	})
	auth.Routes(pages)
	people.Routes(pages)
	api := rest.Handler(svc, rest.Options{RatePerSecond: -1})
	mux := http.NewServeMux()
	h := mcp.Handler(mcp.Options{Lobby: lob, Substrate: svc, Auth: auth, PublicURL: base})
	mux.Handle("/mcp", h)
	mux.Handle("/rooms", api)
	mux.Handle("/rooms/", api)
	mux.Handle("/", pages)
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Config.RegisterOnShutdown(people.Close)
	srv.Start()
	t.Cleanup(srv.Close)
	mx := metrics.New()
	mx.Watch(metrics.Sources{Service: svc, DB: db})
	msrv := httptest.NewServer(mx.Handler("", nil))
	t.Cleanup(msrv.Close)
	return base, msrv.URL + "/metrics"
}

// The soak workload runs its mixed load without errors and samples the
// server each interval, with a tiny pool (the waits it holds must not
// starve the other requests): REST clients, MCP clients of a person it
// signed up with a passkey, and that person's live room pages, each of
// which must have done its part (an MCP call that came back isError, or a
// page that stopped receiving, is an error).
func TestSoakRunsAndSamples(t *testing.T) {
	base, metricsURL := fullServer(t, "open")
	rep, err := bench.Run(context.Background(), bench.Options{URL: base, MetricsURL: metricsURL, Workloads: []string{bench.Soak},
		Duration: 3 * time.Second, Warmup: 300 * time.Millisecond, Intervals: time.Second, Clients: 8,
		MCPClients: 3, PageStreams: 3, PID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Results[0]
	var text strings.Builder
	rep.WriteText(&text)
	t.Log(text.String())
	if r.Requests == 0 || r.Errors != 0 {
		t.Fatalf("soak: %d requests, %d errors (%s)", r.Requests, r.Errors, r.FirstError)
	}
	if len(r.Samples) < 4 {
		t.Errorf("soak sampled the server %d times, want at least 4: %+v", len(r.Samples), r.Samples)
	}
	for _, s := range r.Samples {
		if s.RSSMiB <= 0 || s.Goroutines <= 0 || s.FDs <= 0 || s.PoolMax != pgtest.MaxConns {
			t.Errorf("sample %+v: want resident set, goroutines, descriptors and the pool of %d", s, pgtest.MaxConns)
		}
	}
	got := map[string]int64{}
	for _, s := range r.Surfaces {
		got[s.Name] = s.Requests
	}
	for _, name := range []string{"REST invoke", "REST context", "REST wait", "REST state", "MCP sync_invoke_action", "MCP sync_read_context", "MCP sync_wait", "live page updates"} {
		if got[name] == 0 {
			t.Errorf("soak: no %s: %+v", name, r.Surfaces)
		}
	}
	if !strings.Contains(r.Note, "updates per page stream") || strings.Contains(r.Note, "stream 0,") {
		t.Errorf("note: %s", r.Note)
	}
}

// A live page stream that receives nothing while its room keeps changing
// is counted as stalled, once per episode; one that keeps up is not.
func TestSoakCountsStalledStreams(t *testing.T) {
	quiet, live, all := bench.StallsCounted(600*time.Millisecond, 100*time.Millisecond, 20*time.Millisecond)
	if quiet != 1 || live != 0 || all != 1 {
		t.Fatalf("stalled: quiet stream %d, live stream %d, errors %d; want the quiet one once", quiet, live, all)
	}
}

// Against a server whose sign-up is by invitation, the soak says how to
// give it its person instead of running without one.
func TestSoakNeedsSignUp(t *testing.T) {
	base, _ := fullServer(t, "invite")
	_, err := bench.Run(context.Background(), bench.Options{URL: base, Workloads: []string{bench.Soak}, Duration: 100 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "-signup open") || !strings.Contains(err.Error(), "-invite") {
		t.Fatalf("err = %v, want the sign-up refused and how to allow it", err)
	}
}
