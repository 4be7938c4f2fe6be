// Package bench is `syncd bench`: a closed-loop load client that drives a
// sync server over HTTP on loopback through its real REST API, either a
// server already running (-url) or one it starts as a separate process,
// and prints what the server sustained (requests/s, latency percentiles,
// errors, and the server's CPU and memory when it runs on this machine).
// With -pgbench it first runs PostgreSQL's own bound for the same
// transaction shape, so the two figures come from one sitting.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Options configure one run. Main fills them from flags.
type Options struct {
	// URL is the server to drive. Empty: start one (see Exec, DatabaseURL).
	URL string
	// CreateToken is the server's room-creation token (SYNC_CREATE_TOKEN),
	// when it has one. Default none.
	CreateToken string
	// DatabaseURL is the database of the server bench starts, and the one
	// pgbench runs on. Empty with no URL: an embedded cluster in a temporary
	// directory (fsync on), removed afterwards. Needed with URL for -pgbench.
	DatabaseURL string
	// Exec is the syncd binary to start when URL is empty. Default: the
	// running executable.
	Exec string
	// ServerFlags are passed to the server bench starts (for instance
	// -group-commit=false). Default none.
	ServerFlags []string
	// MetricsURL is the server's Prometheus /metrics, read around the
	// invocation workloads for the group commit batch sizes. Set
	// automatically for a server bench starts; default none.
	MetricsURL string
	// PID is the server's process id when URL names a server on this
	// machine, so its CPU and memory can be read from /proc. Default 0
	// (not reported); set automatically for a server bench starts.
	PID int
	// Workloads to run, in this order. Default all of Names.
	Workloads []string
	// Duration is each workload's measured time. Default 10 s.
	Duration time.Duration
	// Warmup runs each workload this long before measuring. Default 2 s.
	Warmup time.Duration
	// Clients is the number of concurrent clients of the "invoke-n" and
	// "rooms" workloads. Default 8.
	Clients int
	// Rooms and Agents shape the "rooms" workload: Rooms rooms of Agents
	// agents each, which the clients sweep through. Default 8 × 1.
	Rooms, Agents int
	// Readers is the number of concurrent readers of the "context"
	// workload. Default 8.
	Readers int
	// ContextQuery is the query string of the context read. Default
	// "messages=false" (a lean read without messages).
	ContextQuery string
	// ContextAs are the credentials the context's readers read with, one
	// measured run each on the same room: agent (each reader its own
	// agent's token), room or view. Each authority has its own cached
	// build on the server (issue 47 item 2 asks which are served from it),
	// so each is measured apart. Default all three.
	ContextAs []string
	// Waits is the number of concurrent waits of the "waits" workload.
	// Default 1,000.
	Waits int
	// HTTP1 makes the "waits" workload's client speak HTTP/1.1, one
	// connection per wait, as against a server without h2c. Default
	// false: HTTP/2 without TLS.
	HTTP1 bool
	// Intervals, when positive, also reports each workload's rate per
	// interval of its measured time (and pgbench's, with --progress).
	Intervals time.Duration
	// PGBench runs pgbench's bound just before each invocation workload.
	PGBench bool
	// CPUProfileDir, when set, receives a CPU profile of the server over
	// each workload's measured time, <workload>.pprof, taken from its
	// /debug/pprof/profile on the metrics listener: a server bench starts
	// is started with -pprof; a -url server needs -pprof and MetricsURL.
	// Default none.
	CPUProfileDir string
	// workload is the one running, which names its profile.
	workload string
	// MCPClients and PageStreams are the soak's MCP clients and live room
	// pages, run by a person bench signs up with a software passkey (the
	// server must allow open sign-up, or Invite must be an invite token).
	// Default 4 each; negative: none.
	MCPClients, PageStreams int
	// Invite is an invite token (from `syncd invite`) for the soak's
	// person, for a -url server whose sign-up is by invitation. Default
	// none: open sign-up (which a server bench starts allows).
	Invite string
	// Log receives progress lines. Default io.Discard.
	Log io.Writer
}

// Workload names, in their default order.
const (
	Invoke1 = "invoke-1" // one client invoking an action on one room
	InvokeN = "invoke-n" // Clients clients invoking on one room
	Rooms   = "rooms"    // Clients clients invoking across Rooms × Agents
	Context = "context"  // Readers readers of a 500-key room's lean context
	Wake    = "wake"     // a waiter woken by an invocation
	Waits   = "waits"    // Waits concurrent waits woken by one write
)

// ContextCredentials are the credentials the context workload can read
// with (-context-as), in their default order. An observer (a signed-in
// person who has not embodied) reads only over MCP with an OAuth grant,
// not with a REST token, so it is not among them.
var ContextCredentials = []string{"agent", "room", "view"}

// QuietRooms is how many rooms the second bound of the "rooms" workload
// spreads pgbench's clients over: pgbench picks a room at random for each
// transaction, so on as many rooms as clients its clients wait on each
// other's row locks, which syncd's clients (one room each) never do; the
// performance targets compare 8 clients over 8 rooms with this bound.
const QuietRooms = 64

// Soak is a mixed load (invocations, context reads, waits, state reads)
// for Duration, the server sampled every Intervals (default a minute). It
// is not among the defaults: it is meant to run for ten minutes.
const Soak = "soak"

// Names lists every workload run by default.
var Names = []string{Invoke1, InvokeN, Rooms, Context, Wake, Waits}

// known are the workloads -workloads accepts.
var known = append(slices.Clone(Names), Soak)

// Report is one run's results (the -json output).
type Report struct {
	Started time.Time `json:"started"`
	// Target is the server's base URL; Local reports whether bench started it.
	Target string `json:"target"`
	Local  bool   `json:"started_server"`
	// PID is the server process whose CPU and memory are reported (0: none).
	PID     int       `json:"server_pid,omitempty"`
	Results []*Result `json:"results"`
	// PGBench holds pgbench's runs, when asked for.
	PGBench []*PGResult `json:"pgbench,omitempty"`
}

// Result is one workload's figures over its measured time.
type Result struct {
	Workload   string  `json:"workload"`
	Label      string  `json:"label"`
	Clients    int     `json:"clients"`
	Rooms      int     `json:"rooms"`
	Requests   int64   `json:"requests"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	RPS        float64 `json:"rps"`
	P50ms      float64 `json:"p50_ms"`
	P99ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	// AvgBytes is the mean response size, for reads.
	AvgBytes int64 `json:"avg_bytes,omitempty"`
	// ServerCPU is the server's CPU time over the measured time, in percent
	// of one core; ServerRSSMiB its largest resident set seen; ServerFDs its
	// open file descriptors at the end. Reported when the server's PID is known.
	ServerCPU    float64 `json:"server_cpu_pct,omitempty"`
	ServerRSSMiB float64 `json:"server_rss_mib,omitempty"`
	ServerFDs    int     `json:"server_fds,omitempty"`
	// Credential is what the workload's measured requests authenticate
	// with (for instance "8 agent tokens", "view token"): the server caches
	// and admits per authority, so one read measured with two credentials
	// is two figures.
	Credential string `json:"credential"`
	// BoundTPS is pgbench's rate for the same shape, the one the
	// performance targets compare with (for "rooms", QuietRooms rooms);
	// PctOfBound is RPS as a percentage of it. Bounds lists every bound
	// measured for the workload in the same sitting, that one first.
	BoundTPS   float64 `json:"bound_tps,omitempty"`
	PctOfBound float64 `json:"pct_of_bound,omitempty"`
	Bounds     []Bound `json:"bounds,omitempty"`
	// NoBound says why there is no ratio: the workload has no comparable
	// bound, or -pgbench was not given.
	NoBound string `json:"no_bound,omitempty"`
	// FirstMinuteRPS and LastMinuteRPS are the rates of the measured
	// time's first and last minute, for runs of two minutes or more.
	FirstMinuteRPS float64 `json:"first_minute_rps,omitempty"`
	LastMinuteRPS  float64 `json:"last_minute_rps,omitempty"`
	// Intervals is the rate per Options.Intervals of the measured time.
	Intervals []Interval `json:"intervals,omitempty"`
	// Load1 is the machine's one-minute load average when the workload
	// ended (from /proc/loadavg): a busy machine's figures are noisy.
	Load1 float64 `json:"load1,omitempty"`
	// Note says what a workload measured beyond the columns.
	Note string `json:"note,omitempty"`
	// Samples are the soak's samples of the server, one per interval.
	Samples []Sample `json:"samples,omitempty"`
	// Surfaces are the soak's requests per kind (REST, MCP, live pages).
	Surfaces []Surface `json:"surfaces,omitempty"`
}

// Bound is one pgbench bound of a workload and the workload's rate as a
// percentage of it.
type Bound struct {
	Clients int     `json:"clients"`
	Rooms   int     `json:"rooms"`
	TPS     float64 `json:"tps"`
	Pct     float64 `json:"pct"`
}

// Why a result has no ratio (Result.NoBound).
const (
	noComparableBound = "no comparable bound: pgbench's script is an invocation's transaction"
	noPGBench         = "not measured: run with -pgbench"
)

// bounded reports whether pgbench's script bounds workload w.
func bounded(w string) bool { return w == Invoke1 || w == InvokeN || w == Rooms }

// attachBounds puts pgbench's runs for res's workload beside its rate:
// the run on the most rooms first (for "rooms", the QuietRooms bound the
// targets name; the others have one run).
func attachBounds(res *Result, pgs []*PGResult) {
	res.Bounds, res.BoundTPS, res.PctOfBound, res.NoBound = nil, 0, 0, ""
	for _, pg := range pgs {
		if pg.Workload != res.Workload || pg.TPS <= 0 {
			continue
		}
		res.Bounds = append(res.Bounds, Bound{Clients: pg.Clients, Rooms: pg.Rooms, TPS: pg.TPS, Pct: 100 * res.RPS / pg.TPS})
	}
	slices.SortStableFunc(res.Bounds, func(a, b Bound) int { return b.Rooms - a.Rooms })
	switch {
	case len(res.Bounds) > 0:
		res.BoundTPS, res.PctOfBound = res.Bounds[0].TPS, res.Bounds[0].Pct
	case !bounded(res.Workload):
		res.NoBound = noComparableBound
	default:
		res.NoBound = noPGBench
	}
}

// Interval is one slice of a measured run.
type Interval struct {
	StartS float64 `json:"start_s"`
	RPS    float64 `json:"rps"`
	P50ms  float64 `json:"p50_ms,omitempty"`
	// MeanMs is pgbench's mean latency (it reports no percentiles).
	MeanMs float64 `json:"mean_ms,omitempty"`
}

// Main runs `syncd bench` with the arguments after "bench" and returns the
// process's exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	opt, asJSON, err := parseFlags(args, stderr)
	if err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		fmt.Fprintln(stderr, "syncd bench:", err)
		return 2
	}
	opt.Log = stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := Run(ctx, opt)
	if rep != nil {
		if asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(rep)
		} else {
			rep.WriteText(stdout)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "syncd bench:", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (Options, bool, error) {
	var o Options
	fs := flag.NewFlagSet("syncd bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.URL, "url", "", "server to drive; empty starts one (embedded PostgreSQL, or DATABASE_URL)")
	fs.StringVar(&o.CreateToken, "create-token", os.Getenv("SYNC_CREATE_TOKEN"), "the server's room-creation token (SYNC_CREATE_TOKEN)")
	fs.StringVar(&o.DatabaseURL, "database-url", os.Getenv("DATABASE_URL"), "database of the started server and of pgbench (DATABASE_URL)")
	fs.StringVar(&o.Exec, "exec", "", "syncd binary to start (default: this one)")
	fs.IntVar(&o.PID, "pid", 0, "process id of the -url server, to report its CPU and memory")
	serverFlags := fs.String("server-flags", "", "flags for the server bench starts, space-separated (e.g. -group-commit=false)")
	fs.StringVar(&o.MetricsURL, "metrics-url", "", "the -url server's /metrics (its -metrics-addr), for group commit batch sizes")
	workloads := fs.String("workloads", strings.Join(Names, ","), "workloads to run, comma-separated: "+strings.Join(known, ", "))
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, "measured time per workload")
	fs.DurationVar(&o.Warmup, "warmup", 2*time.Second, "unmeasured time before each workload")
	fs.IntVar(&o.Clients, "clients", 8, "clients of invoke-n and rooms")
	fs.IntVar(&o.Rooms, "rooms", 8, "rooms of the rooms workload")
	fs.IntVar(&o.Agents, "agents", 1, "agents per room of the rooms workload")
	fs.IntVar(&o.Readers, "readers", 8, "readers of the context workload")
	fs.StringVar(&o.ContextQuery, "context-query", "messages=false", "query string of the context read")
	contextAs := fs.String("context-as", strings.Join(ContextCredentials, ","), "credentials of the context's readers, comma-separated, one run each: "+strings.Join(ContextCredentials, ", "))
	fs.IntVar(&o.Waits, "waits", 1000, "concurrent waits of the waits workload")
	fs.BoolVar(&o.HTTP1, "http1", false, "waits workload over HTTP/1.1 (one connection per wait) instead of h2c")
	fs.DurationVar(&o.Intervals, "intervals", 0, "also report the rate per interval of each run (e.g. 15s)")
	fs.BoolVar(&o.PGBench, "pgbench", false, "run pgbench's bound for the same transaction shape just before each invocation workload")
	fs.StringVar(&o.CPUProfileDir, "cpuprofile-dir", "", "save a CPU profile of the server over each workload's measured time here, as <workload>.pprof (starts the server with -pprof; a -url server needs -pprof and -metrics-url)")
	fs.IntVar(&o.MCPClients, "mcp-clients", 4, "MCP clients of the soak, each its own OAuth grant of a person bench signs up (0: none)")
	fs.IntVar(&o.PageStreams, "page-streams", 4, "live room page streams of the soak's person (0: none; at most 16)")
	fs.StringVar(&o.Invite, "invite", "", "invite token (syncd invite) for the soak's person when the -url server's sign-up is by invitation")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return o, false, err
	}
	if fs.NArg() > 0 {
		return o, false, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.ServerFlags = strings.Fields(*serverFlags)
	for _, w := range strings.Split(*workloads, ",") {
		if w = strings.TrimSpace(w); w == "" {
			continue
		}
		if !slices.Contains(known, w) {
			return o, false, fmt.Errorf("unknown workload %q (known: %s)", w, strings.Join(known, ", "))
		}
		o.Workloads = append(o.Workloads, w)
	}
	if o.Duration <= 0 || o.Warmup < 0 || o.Clients < 1 || o.Rooms < 1 || o.Agents < 1 || o.Readers < 1 || o.Waits < 1 || o.Intervals < 0 {
		return o, false, fmt.Errorf("durations, clients, rooms, agents, readers and waits must be positive")
	}
	if o.MCPClients < 0 || o.PageStreams < 0 || o.PageStreams > 16 {
		return o, false, fmt.Errorf("-mcp-clients must be 0 or more, -page-streams 0 to 16 (a person's live pages are bounded)")
	}
	// 0 on the command line is none; in Options it is the default.
	for _, v := range []*int{&o.MCPClients, &o.PageStreams} {
		if *v == 0 {
			*v = -1
		}
	}
	for _, as := range strings.Split(*contextAs, ",") {
		if as = strings.TrimSpace(as); as == "" {
			continue
		}
		if !slices.Contains(ContextCredentials, as) {
			return o, false, fmt.Errorf("-context-as %q is not one of %s", as, strings.Join(ContextCredentials, ", "))
		}
		if !slices.Contains(o.ContextAs, as) {
			o.ContextAs = append(o.ContextAs, as)
		}
	}
	if len(o.ContextAs) == 0 {
		return o, false, errors.New("-context-as names no credential")
	}
	return o, *asJSON, nil
}

func (o *Options) defaults() {
	if len(o.Workloads) == 0 {
		o.Workloads = Names
	}
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	if o.Warmup < 0 {
		o.Warmup = 0
	}
	for _, f := range []struct {
		v   *int
		def int
	}{{&o.Clients, 8}, {&o.Rooms, 8}, {&o.Agents, 1}, {&o.Readers, 8}, {&o.Waits, 1000}} {
		if *f.v <= 0 {
			*f.v = f.def
		}
	}
	if o.MCPClients == 0 {
		o.MCPClients = 4
	}
	if o.PageStreams == 0 {
		o.PageStreams = 4
	}
	if o.ContextQuery == "" {
		o.ContextQuery = "messages=false"
	}
	if len(o.ContextAs) == 0 {
		o.ContextAs = slices.Clone(ContextCredentials)
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// Run runs the workloads and returns their report. On an error part-way
// it returns what it measured so far with the error.
func Run(ctx context.Context, opt Options) (*Report, error) {
	opt.defaults()
	rep := &Report{Started: time.Now().UTC(), Target: opt.URL, PID: opt.PID}
	if opt.URL == "" {
		srv, err := startServer(ctx, &opt)
		if err != nil {
			return nil, err
		}
		defer srv.stop()
		opt.URL, opt.PID, opt.DatabaseURL, opt.MetricsURL = srv.url, srv.pid, srv.dbURL, srv.metrics
		rep.Target, rep.PID, rep.Local = srv.url, srv.pid, true
	}
	if opt.CPUProfileDir != "" {
		if opt.MetricsURL == "" {
			return rep, errors.New("-cpuprofile-dir needs the server's metrics listener (-metrics-url) with -pprof on")
		}
		if err := os.MkdirAll(opt.CPUProfileDir, 0o755); err != nil {
			return rep, err
		}
	}
	b := newBencher(opt)
	// Each workload's bound is measured just before it, on the database
	// as it stands then: measured all first, the bounds ran on fresh
	// tables while the later workloads ran after every bound's and
	// workload's writes (8 clients over 8 rooms measured 57 % of its bound
	// at the end of such a sequence, 82–86 % on its own).
	bound := func(w string) ([]*PGResult, error) {
		if !opt.PGBench {
			return nil, nil
		}
		one := opt
		one.Workloads = []string{w}
		pg, err := runPGBench(ctx, one)
		rep.PGBench = append(rep.PGBench, pg...)
		return pg, err
	}
	for _, w := range opt.Workloads {
		pg, err := bound(w)
		if err != nil {
			return rep, err
		}
		fmt.Fprintf(opt.Log, "syncd bench: %s…\n", w)
		b.opt.workload = w
		results, err := b.run(ctx, w)
		for _, res := range results {
			if res.Load1 == 0 {
				res.Load1 = load1()
			}
			attachBounds(res, pg)
			rep.Results = append(rep.Results, res)
		}
		if err != nil {
			return rep, fmt.Errorf("%s: %w", w, err)
		}
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}
	return rep, nil
}

// load1 is the one-minute load average, 0 where /proc has none.
func load1() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// WriteText prints the report as a table, with intervals and notes below.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "target %s", r.Target)
	if r.Local {
		fmt.Fprintf(w, " (started by bench, pid %d)", r.PID)
	} else if r.PID > 0 {
		fmt.Fprintf(w, " (pid %d)", r.PID)
	}
	fmt.Fprintf(w, ", %s\n\n", r.Started.Format(time.RFC3339))
	const row = "%-34s %-16s %9s %8s %8s %7s %9s %7s %7s %7s %8s %6s\n"
	fmt.Fprintf(w, row, "workload", "credential", "rps", "p50 ms", "p99 ms", "errors", "bound", "c×rooms", "% bound", "cpu %", "rss MiB", "load")
	for _, x := range r.Results {
		// "—" where there is no ratio, whether the workload has no
		// comparable bound or -pgbench was not given (NoBound says which).
		bound, shape, pct := "—", "—", "—"
		if len(x.Bounds) > 0 {
			bound, shape, pct = boundCells(x.Bounds[0])
		}
		cpu, rss := "-", "-"
		if r.PID > 0 {
			cpu, rss = fmt.Sprintf("%.0f", x.ServerCPU), fmt.Sprintf("%.0f", x.ServerRSSMiB)
		}
		fmt.Fprintf(w, row, x.Label, x.Credential, fmt.Sprintf("%.1f", x.RPS), fmt.Sprintf("%.2f", x.P50ms), fmt.Sprintf("%.2f", x.P99ms),
			strconv.FormatInt(x.Errors, 10), bound, shape, pct, cpu, rss, fmt.Sprintf("%.1f", x.Load1))
		for _, bd := range x.Bounds[min(1, len(x.Bounds)):] {
			bound, shape, pct := boundCells(bd)
			fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf(row, "  the same against", "", "", "", "", "", bound, shape, pct, "", "", ""), " \n"))
		}
	}
	var unmeasured, incomparable []string
	for _, x := range r.Results {
		switch x.NoBound {
		case noPGBench:
			unmeasured = appendOnce(unmeasured, x.Workload)
		case noComparableBound:
			incomparable = appendOnce(incomparable, x.Workload)
		}
	}
	if len(unmeasured) > 0 {
		fmt.Fprintf(w, "\nbound — for %s: %s.\n", strings.Join(unmeasured, ", "), noPGBench)
	}
	if len(incomparable) > 0 {
		fmt.Fprintf(w, "\nbound — for %s: %s.\n", strings.Join(incomparable, ", "), noComparableBound)
	}
	for _, x := range r.Results {
		if x.Note != "" || x.FirstError != "" || len(x.Intervals) > 0 || x.FirstMinuteRPS > 0 {
			fmt.Fprintf(w, "\n%s, %s:", x.Label, x.Credential)
			if x.Note != "" {
				fmt.Fprintf(w, " %s.", x.Note)
			}
			if x.FirstError != "" {
				fmt.Fprintf(w, " first error: %s", x.FirstError)
			}
			if x.FirstMinuteRPS > 0 {
				fmt.Fprintf(w, " first minute %.1f/s, last minute %.1f/s (%+.1f %%).", x.FirstMinuteRPS, x.LastMinuteRPS,
					100*(x.LastMinuteRPS-x.FirstMinuteRPS)/x.FirstMinuteRPS)
			}
			fmt.Fprintln(w)
			writeIntervals(w, x.Intervals, "rps")
			writeSoak(w, x)
		}
	}
	for _, p := range r.PGBench {
		fmt.Fprintf(w, "\npgbench %s: %.1f tps, %d clients, %d rooms, %.0f s, load %.1f: %s\n", p.Workload, p.TPS, p.Clients, p.Rooms, p.Seconds, p.Load1, p.Command)
		writeIntervals(w, p.Intervals, "tps")
	}
}

func appendOnce(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// boundCells are a bound's columns: its rate, its clients × rooms, and
// the workload's rate as a percentage of it.
func boundCells(b Bound) (tps, shape, pct string) {
	return fmt.Sprintf("%.0f", b.TPS), fmt.Sprintf("%d×%d", b.Clients, b.Rooms), fmt.Sprintf("%.0f", b.Pct)
}

func writeIntervals(w io.Writer, iv []Interval, unit string) {
	if len(iv) == 0 {
		return
	}
	parts := make([]string, len(iv))
	for i, x := range iv {
		parts[i] = fmt.Sprintf("%.0f", x.RPS)
	}
	fmt.Fprintf(w, "  per %s from %.0f s: %s %s", intervalLen(iv), iv[0].StartS, strings.Join(parts, " → "), unit)
	if first, last := iv[0].RPS, iv[len(iv)-1].RPS; first > 0 {
		fmt.Fprintf(w, " (last %+.0f %% of first)", 100*(last-first)/first)
	}
	fmt.Fprintln(w)
}

func intervalLen(iv []Interval) string {
	if len(iv) < 2 {
		return "interval"
	}
	d := time.Duration((iv[1].StartS - iv[0].StartS) * float64(time.Second))
	if d >= time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}
