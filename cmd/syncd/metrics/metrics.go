// Package metrics exposes the server's Prometheus metrics: request latency
// by route pattern and MCP tool, invocations by outcome, open waits,
// notifications, the database pool, rate-limit refusals and CEL cost.
//
// The domain packages keep plain counters (substrate.Service.Stats,
// store.DB.Status, httpmw.Stack.Refusals) and know nothing of Prometheus;
// this package reads them at scrape time and observes latencies through
// the hooks of httpmw and mcp. Every label takes its values from a set the
// server fixes (route patterns, tool names, error codes, standard methods),
// never from what a client sent, so no request can create a series.
package metrics

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/httpmw"
)

// Latency buckets in seconds: from a cached read to a wait's 45 s limit.
var buckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Metrics is one server's registry.
type Metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.HistogramVec
	tools    *prometheus.HistogramVec
}

// New returns a registry with the Go runtime and process collectors and
// the latency histograms; Watch adds the server's counters.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sync_http_request_duration_seconds", Help: "HTTP requests by route pattern, method and status.", Buckets: buckets,
	}, []string{"route", "method", "code"})
	m.tools = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sync_mcp_tool_duration_seconds", Help: "MCP tool calls by tool and outcome (ok or the error code).", Buckets: buckets,
	}, []string{"tool", "outcome"})
	m.reg.MustRegister(m.requests, m.tools, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Sources are what Watch reads at scrape time; a nil one is left out.
type Sources struct {
	Service *substrate.Service
	DB      *store.DB
	HTTP    *httpmw.Stack
}

// Watch registers the server's counters.
func (m *Metrics) Watch(src Sources) {
	m.reg.MustRegister(&collector{src: src})
}

// methods are the label values of method; anything else is OTHER.
var methods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true, "OPTIONS": true}

// ObserveRequest is httpmw's Observe hook. The route is the pattern that
// served the request with its method left out (the method is a label of
// its own), or "unmatched".
func (m *Metrics) ObserveRequest(r *http.Request, status int, took time.Duration) {
	route := r.Pattern
	if _, path, ok := strings.Cut(route, " "); ok {
		route = path
	}
	if route == "" {
		route = "unmatched"
	}
	method := r.Method
	if !methods[method] {
		method = "OTHER"
	}
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Observe(took.Seconds())
}

// ObserveTool is mcp's ObserveTool hook.
func (m *Metrics) ObserveTool(tool, outcome string, took time.Duration) {
	m.tools.WithLabelValues(tool, outcome).Observe(took.Seconds())
}

// Handler serves the metrics in Prometheus' text format. With a token, a
// request must carry it as its bearer token; a wrong one is charged to its
// address's budget on limits (when not nil), so the token cannot be
// guessed at speed.
func (m *Metrics) Handler(token string, limits *httpmw.Stack) http.Handler {
	return Guard(token, limits, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
}

// Guard lets through to h only requests carrying token as their bearer
// token (any request when token is empty), as Handler does for /metrics.
func Guard(token string, limits *httpmw.Stack, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := sha256.Sum256([]byte(httpmw.Bearer(r)))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			if limits != nil && !limits.Limit(w, r, "") {
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="sync-metrics"`)
			httpmw.Fail(w, r, errs.New(errs.Unauthorized, "the metrics need the server's metrics token").
				WithHint("send Authorization: Bearer <SYNC_METRICS_TOKEN>"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Profiling registers Go's runtime profiles (net/http/pprof) under
// /debug/pprof/ on mux, behind token as Guard. It is meant for the
// metrics listener only: profiles name the code, show request data in
// goroutine stacks and cost CPU while they run, so they are not for the
// Internet. pprof's cmdline is left out: the command line holds what
// operators pass as flags (-database-url with its password,
// -create-token), which a profile never needs and a listener without a
// token would give anyone who reaches it; /debug/pprof/cmdline answers
// 404 (pprof.Index: no such profile).
func Profiling(mux *http.ServeMux, token string, limits *httpmw.Stack) {
	g := func(h http.Handler) http.Handler { return Guard(token, limits, h) }
	mux.Handle("GET /debug/pprof/", g(http.HandlerFunc(pprof.Index)))
	mux.Handle("GET /debug/pprof/profile", g(http.HandlerFunc(pprof.Profile)))
	mux.Handle("GET /debug/pprof/symbol", g(http.HandlerFunc(pprof.Symbol)))
	mux.Handle("POST /debug/pprof/symbol", g(http.HandlerFunc(pprof.Symbol)))
	mux.Handle("GET /debug/pprof/trace", g(http.HandlerFunc(pprof.Trace)))
}

// collector reads the server's counters at scrape time.
type collector struct{ src Sources }

var (
	descWaits       = prometheus.NewDesc("sync_waits_open", "Waits in progress in this process.", nil, nil)
	descNotified    = prometheus.NewDesc("sync_notifications_received_total", "Room notifications this process heard (LISTEN).", nil, nil)
	descInvocations = prometheus.NewDesc("sync_invocations_total", "Invocations of actions and builtins on every surface, by outcome (ok or the error code).", []string{"outcome"}, nil)
	descCELEvals    = prometheus.NewDesc("sync_cel_evaluations_total", "CEL expression evaluations.", nil, nil)
	descCELCost     = prometheus.NewDesc("sync_cel_cost_total", "Summed cel-go runtime cost of the evaluations (what the per-expression limit counts).", nil, nil)
	descViewEvals   = prometheus.NewDesc("sync_view_evaluations_total", "View evaluations (a view of state alone is evaluated once per state).", nil, nil)
	descRoomBusy    = prometheus.NewDesc("sync_room_busy_refusals_total", "Requests refused with room_busy: their room had spent its expression budget per second.", nil, nil)
	descPoolInUse   = prometheus.NewDesc("sync_db_pool_in_use", "Database connections in use.", nil, nil)
	descPoolIdle    = prometheus.NewDesc("sync_db_pool_idle", "Idle database connections.", nil, nil)
	descPoolMax     = prometheus.NewDesc("sync_db_pool_max", "The pool's size (SYNC_DB_MAX_CONNS).", nil, nil)
	descAcquires    = prometheus.NewDesc("sync_db_pool_acquires_total", "Connections handed out by the pool.", nil, nil)
	descWaited      = prometheus.NewDesc("sync_db_pool_waited_acquires_total", "Acquisitions that had to wait for a connection (none was idle).", nil, nil)
	descAcquireWait = prometheus.NewDesc("sync_db_pool_acquire_wait_seconds_total", "Time spent acquiring connections.", nil, nil)
	descGroupTx     = prometheus.NewDesc("sync_group_commit_transactions_total", "Group transactions: one room lock and commit for the invocations that queued while the room's previous one was open.", nil, nil)
	descGroupInv    = prometheus.NewDesc("sync_group_commit_invocations_total", "Invocations carried by group transactions (divided by the transactions: the mean batch).", nil, nil)
	descGroupMax    = prometheus.NewDesc("sync_group_commit_largest", "The most invocations one group transaction carried.", nil, nil)
	descGroupRounds = prometheus.NewDesc("sync_group_commit_rounds_total", "Rounds of reads under the lock of group transactions: one round trip each, for the invocations queued by then.", nil, nil)
	descGroupRedone = prometheus.NewDesc("sync_group_commit_redone_total", "Invocations of group transactions evaluated again after PostgreSQL refused an earlier invocation's statement.", nil, nil)
	descRefusals    = prometheus.NewDesc("sync_rate_limit_refusals_total", "Requests refused over a rate budget, by what the budget belongs to (credential or address).", []string{"budget"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWaits, descNotified, descInvocations, descCELEvals, descCELCost, descViewEvals, descRoomBusy,
		descPoolInUse, descPoolIdle, descPoolMax, descAcquires, descWaited, descAcquireWait, descRefusals,
		descGroupTx, descGroupInv, descGroupMax, descGroupRounds, descGroupRedone} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	if s := c.src.Service; s != nil {
		st := s.Stats()
		gauge(descWaits, float64(st.OpenWaits))
		counter(descNotified, float64(st.Notifications))
		// ok is always present, so a dashboard's rate has a series from
		// the start.
		counter(descInvocations, float64(st.Invocations["ok"]), "ok")
		for outcome, n := range st.Invocations {
			if outcome != "ok" {
				counter(descInvocations, float64(n), outcome)
			}
		}
		counter(descCELEvals, float64(st.CELEvaluations))
		counter(descCELCost, float64(st.CELCost))
		counter(descViewEvals, float64(st.ViewEvaluations))
		counter(descRoomBusy, float64(st.RoomBusy))
		counter(descGroupTx, float64(st.GroupBatches))
		counter(descGroupInv, float64(st.GroupInvocations))
		gauge(descGroupMax, float64(st.GroupLargest))
		counter(descGroupRounds, float64(st.GroupRounds))
		counter(descGroupRedone, float64(st.GroupRedone))
	}
	if db := c.src.DB; db != nil {
		st := db.Status()
		gauge(descPoolInUse, float64(st.InUse))
		gauge(descPoolIdle, float64(st.Idle))
		gauge(descPoolMax, float64(st.MaxConns))
		counter(descAcquires, float64(st.Acquires))
		counter(descWaited, float64(st.WaitedAcquire))
		counter(descAcquireWait, st.AcquireWait.Seconds())
	}
	if h := c.src.HTTP; h != nil {
		cred, addr := h.Refusals()
		counter(descRefusals, float64(cred), "credential")
		counter(descRefusals, float64(addr), "address")
	}
}
