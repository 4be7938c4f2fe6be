// Command syncd is the sync server: the substrate's REST API (and, as they
// land, OAuth and MCP) over PostgreSQL, embedded by default.
//
//	syncd            run the server
//	syncd migrate    apply database migrations and exit
//	syncd invite     print a one-time sign-up link and exit
//	syncd bench      drive a server with load and print what it sustained
//	syncd collaborate  run a loom collaborator against a chat model (README, the loom)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/syncsubstrate/sync/cmd/syncd/bench"
	"github.com/syncsubstrate/sync/cmd/syncd/metrics"
	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/lobby/web"
	"github.com/syncsubstrate/sync/mcp"
	"github.com/syncsubstrate/sync/mcp/plugin"
	"github.com/syncsubstrate/sync/oauth"
	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/embedpg"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/httpmw"
	"github.com/syncsubstrate/sync/substrate/loom"
	"github.com/syncsubstrate/sync/substrate/rest"
	"github.com/syncsubstrate/sync/substrate/salience"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "bench" {
		os.Exit(bench.Main(args[1:], os.Stdout, os.Stderr))
	}
	if len(args) > 0 && args[0] == "collaborate" {
		os.Exit(collaborateMain(args[1:]))
	}
	cmd := "serve"
	if len(args) > 0 && (args[0] == "migrate" || args[0] == "serve" || args[0] == "invite") {
		cmd, args = args[0], args[1:]
	}
	cfg, err := parseConfig(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "syncd:", err)
		os.Exit(2)
	}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, nil)
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(os.Stderr, nil)
	}
	slog.SetDefault(slog.New(h))

	ctx, stop := signalContext()
	defer stop()
	if err := run(ctx, cmd, cfg, nil); err != nil {
		slog.Error("syncd stopped", "err", err)
		os.Exit(1)
	}
}

// signalContext ends at SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// features are the features every Service this binary builds runs (the
// server, the collaborate command): the loom (its → commands, the read
// rule over its documents and the models' thinking) and adaptive
// salience. A feature left out here is off in syncd, and a test says so
// (TestSyncdRunsEveryFeature).
func features() []substrate.Feature {
	return []substrate.Feature{loom.Feature(), salience.Feature()}
}

// run serves until ctx ends. ready, when not nil, receives the listener's
// address once the server accepts connections (tests use it).
func run(ctx context.Context, cmd string, cfg *config, ready chan<- string) (err error) {
	db, closeDB, explain, err := openDatabase(ctx, cfg, cmd != "serve")
	if err != nil {
		return err
	}
	defer closeDB()
	defer func() { err = explain(err) }()

	applied, err := db.Migrate(ctx)
	if err != nil {
		return err
	}
	if cmd == "migrate" {
		slog.Info("migrations done", "applied", applied)
		return nil
	}
	mx := newMetrics(cfg)
	svc := substrate.New(db, substrate.Options{Limits: substrate.Limits{MaxValueBytes: cfg.MaxValue, MaxValueDepth: cfg.MaxValueDepth,
		RoomCostPerSecond: cfg.RoomCostPerSecond, GateQuantum: cfg.GateQuantum, ActionCostPerRead: cfg.ActionCostPerRead},
		Wait: substrate.WaitOptions{Recheck: cfg.WaitRecheck, NowRecheck: cfg.WaitNowRecheck}, NoGroupCommit: !cfg.GroupCommit,
		Features: features()})
	defer svc.Close()
	if _, err := svc.ConfigureSearch(ctx, cfg.SearchLanguage); err != nil {
		return fmt.Errorf("search language: %w", err)
	}
	loom.Attach(svc, loom.Options{GeneratorURL: cfg.LoomGeneratorURL, GeneratorModel: cfg.LoomGeneratorModel, GeneratorKey: cfg.LoomGeneratorKey})
	go svc.RunJanitor(ctx, time.Minute)
	lob := lobby.New(db, svc)
	// One middleware stack for every surface, so that a credential's rate
	// budget and the client address behind proxies are the same on each.
	var accessLog *slog.Logger
	if cfg.AccessLog {
		accessLog = slog.Default()
	}
	// Processes on one database share the rate limits: each counts the
	// live ones and allows its share.
	peers := &httpmw.Peers{}
	pctx, stopPeers := context.WithCancel(ctx)
	peersDone := make(chan struct{})
	go func() { db.RunPeers(pctx, store.PeerOptions{OnCount: peers.Set}); close(peersDone) }()
	defer func() { stopPeers(); <-peersDone }() // before the database closes
	stack, observeTool := middleware(cfg, mx, peers, accessLog)
	if mx != nil {
		mx.Watch(metrics.Sources{Service: svc, DB: db, HTTP: stack})
	}
	auth, err := oauth.New(ctx, db, oauth.Options{
		HTTP:                     stack,
		PublicURL:                cfg.PublicURL,
		Signup:                   cfg.Signup,
		RedirectAllowList:        cfg.RedirectAllow,
		DisableMetadataDocuments: !cfg.CIMD,
		MetadataProxy:            cfg.OutboundProxy,
		Rooms:                    lob,
		RatePerSecond:            min(cfg.RateLimit, 0), // 0: its default; negative: off with the REST limit
	})
	if err != nil {
		return err
	}
	if cmd == "invite" {
		link, err := auth.InviteURL(ctx, "")
		if err != nil {
			return err
		}
		fmt.Println(link)
		return nil
	}
	if _, err := auth.EnsureEnrolment(ctx); err != nil {
		return err
	}
	go every(ctx, time.Hour, func(ctx context.Context) { purge(ctx, auth, lob) })

	// The pages, the authorization server and the probes share one mux
	// behind the stack; the REST API and /mcp wrap themselves with it.
	pages := http.NewServeMux()
	probes(pages, db, peers)
	if cfg.MetricsToken != "" {
		pages.Handle("GET /metrics", mx.Handler(cfg.MetricsToken, stack))
	}
	auth.Routes(pages)
	// One key for every process on the database: a rotated token sealed
	// by one is shown by whichever answers the redirect.
	showOnce, err := auth.PageKey(ctx, "show_once", 32)
	if err != nil {
		return err
	}
	people, err := web.New(web.Options{Lobby: lob, Substrate: svc, SignedIn: auth.SignedIn, PublicURL: cfg.PublicURL, ShowOnceKey: showOnce})
	if err != nil {
		return err
	}
	people.Routes(pages)
	api := rest.Handler(svc, rest.Options{HTTP: stack, CreateToken: cfg.CreateToken})
	roomPage := stack.Wrap(http.HandlerFunc(people.RoomPage))
	mux := http.NewServeMux()
	// Event streams end as the shutdown begins (RegisterOnShutdown below):
	// a client holds its listen stream for its whole session, which would
	// hold every stop for the whole SYNC_SHUTDOWN_TIMEOUT.
	streams, endStreams := context.WithCancel(context.Background())
	defer endStreams()
	mcpHandler := mcp.Handler(mcp.Options{Lobby: lob, Substrate: svc, Auth: auth, PublicURL: cfg.PublicURL,
		AllowedOrigins: cfg.MCPOrigins, Version: version(), HTTP: stack, ObserveTool: observeTool, Shutdown: streams, DB: db})
	// /mcp/ too: people paste the URL either way, and a 404 there reads as
	// "the server is down".
	mux.Handle("/mcp", mcpHandler)
	mux.Handle("/mcp/{$}", mcpHandler)
	mux.Handle("GET "+mcp.IconPath, stack.Wrap(mcp.Icons()))
	mux.Handle("GET "+mcp.FaviconPath, stack.Wrap(mcp.Icons()))
	// Claude Code's skill and its plugin of this server (README, Claude Code).
	claude, err := plugin.New(cfg.PublicURL)
	if err != nil {
		return err
	}
	for _, path := range []string{plugin.SkillPath, plugin.MarketplacePath, plugin.ArchivePath} {
		mux.Handle("GET "+path, stack.Wrap(claude.Handler()))
	}
	mux.Handle("/rooms", api)
	// /rooms/{id} is the REST API's room, and the room page for a browser.
	mux.Handle("/rooms/", roomOrAPI(roomPage, api))
	mux.Handle("/", stack.Wrap(pages))
	if cfg.CreateToken == "" {
		slog.Warn("room creation is open to anyone who can reach the server; set SYNC_CREATE_TOKEN to restrict it", "public_url", cfg.PublicURL)
	}

	return serve(ctx, cfg, mux, people, endStreams, mx, stack, ready)
}

// serve listens on cfg.Addr (and cfg.MetricsAddr) and serves mux until
// ctx ends, then drains for at most cfg.ShutdownIn.
func serve(ctx context.Context, cfg *config, mux http.Handler, people *web.Web, endStreams func(), mx *metrics.Metrics, stack *httpmw.Stack, ready chan<- string) error {
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		// HTTP/2 without TLS (prior knowledge) beside HTTP/1.1: a client
		// holding many long requests at once (waits) multiplexes them
		// over a few connections instead of one descriptor each. TLS is
		// the proxy's in front; what it speaks to syncd is unchanged.
		Protocols: serverProtocols(),
		HTTP2:     &http.HTTP2Config{MaxConcurrentStreams: 1000},
	}
	// Event streams would outlast the drain; their clients reconnect to
	// another process. Ordinary requests drain.
	srv.RegisterOnShutdown(people.Close)
	srv.RegisterOnShutdown(endStreams)
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	if cfg.MetricsAddr != "" {
		closeMetrics, err := serveMetrics(cfg, mx, stack, errc)
		if err != nil {
			_ = srv.Close()
			return err
		}
		defer closeMetrics()
	}
	metadataFetch := metadataFetchMode(cfg)
	// The message names the URL a person opens: passkeys refuse an IP
	// address ("This is an invalid domain"), so not the listen address.
	slog.Info("syncd listening: open "+cfg.PublicURL, "addr", ln.Addr().String(), "public_url", cfg.PublicURL, "client_ip_header", cfg.ClientIPHeader,
		"trusted_proxies", len(cfg.TrustedProxies), "client_metadata_documents", metadataFetch)
	if ready != nil {
		ready <- ln.Addr().String()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	slog.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownIn)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		slog.Warn("shutdown did not drain every request", "err", err)
	}
	return nil
}

// newMetrics returns the metrics, or nil: they are collected only when
// something may read them.
func newMetrics(cfg *config) *metrics.Metrics {
	if cfg.MetricsAddr != "" || cfg.MetricsToken != "" {
		return metrics.New()
	}
	return nil
}

// middleware builds the one middleware stack every surface shares;
// observeTool is nil without metrics.
func middleware(cfg *config, mx *metrics.Metrics, peers *httpmw.Peers, accessLog *slog.Logger) (stack *httpmw.Stack, observeTool func(string, string, time.Duration)) {
	mwOpt := httpmw.Options{MaxBodyBytes: cfg.MaxBody, RatePerSecond: cfg.RateLimit, Peers: peers,
		TrustedProxies: cfg.TrustedProxies, ClientIPHeader: cfg.ClientIPHeader, AccessLog: accessLog, HSTS: strings.HasPrefix(cfg.PublicURL, "https://")}
	if mx != nil {
		mwOpt.Observe, observeTool = mx.ObserveRequest, mx.ObserveTool
	}
	return httpmw.New(mwOpt), observeTool
}

// purge removes what has expired: OAuth tokens and unused clients, and
// the MCP sessions whose grant ended. A failure is logged; the next hour
// tries again.
func purge(ctx context.Context, auth *oauth.Server, lob *lobby.Lobby) {
	if tokens, clients, err := auth.Purge(ctx); err != nil {
		slog.Warn("purging expired OAuth tokens and unused clients failed", "err", err)
	} else if tokens+clients > 0 {
		slog.Info("purged OAuth records", "tokens", tokens, "clients", clients)
	}
	if n, err := lob.PurgeSessions(ctx, auth); err != nil {
		slog.Warn("purging ended MCP sessions failed", "err", err)
	} else if n > 0 {
		slog.Info("purged MCP sessions whose grant ended", "sessions", n)
	}
}

// probes adds the liveness and readiness probes to pages.
func probes(pages *http.ServeMux, db *store.DB, peers *httpmw.Peers) {
	pages.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	pages.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		pctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "application/json")
		status, code := "ready", http.StatusOK
		body := map[string]any{}
		if err := db.Ping(pctx); err != nil {
			status, code = "database unavailable", http.StatusServiceUnavailable
		} else if h, citus, err := db.Workers(pctx); citus {
			// A Citus worker that is down is reported, not judged: it
			// takes only its rooms with it, and every process sees the
			// same cluster, so taking this one out of rotation would
			// take the other workers' rooms down too.
			if err != nil {
				h.Down = append(h.Down, "unknown: "+err.Error())
			}
			body["workers"] = h
			if len(h.Down) > 0 {
				status = "degraded: a database worker is down; its rooms answer 503"
			}
		}
		// The pool is reported, not judged: an exhausted pool means
		// requests queue for the database, which a load balancer taking
		// this process out of rotation would only make worse elsewhere.
		body["status"], body["pool"], body["processes"] = status, db.Status(), peers.N()
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(body)
	})
}

// roomOrAPI serves /rooms/{id}: the room page to a browser, the REST API
// to everyone else.
func roomOrAPI(roomPage, api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if web.IsPage(r) {
			roomPage.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// serveMetrics serves /metrics (and the profiles, with SYNC_PPROF) on
// cfg.MetricsAddr; a serving error goes to errc. The returned func
// closes that server.
func serveMetrics(cfg *config, mx *metrics.Metrics, stack *httpmw.Stack, errc chan<- error) (func(), error) {
	// Its own listener, so that it can stay on a private interface
	// while the public one faces the Internet.
	mln, err := net.Listen("tcp", cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s for metrics: %w", cfg.MetricsAddr, err)
	}
	mmux := http.NewServeMux()
	mmux.Handle("GET /metrics", mx.Handler(cfg.MetricsToken, stack))
	msrv := &http.Server{Handler: mmux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
	if cfg.Pprof {
		metrics.Profiling(mmux, cfg.MetricsToken, stack)
		// A CPU profile or trace answers after the time it was asked
		// for (pprof refuses one longer than the write timeout): each
		// request's own deadline instead, 30 s past that time.
		msrv.WriteTimeout = 0
		msrv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			limit := 30 * time.Second
			if s, err := strconv.Atoi(r.URL.Query().Get("seconds")); err == nil && s > 0 {
				limit += time.Duration(min(s, 3600)) * time.Second
			}
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(limit))
			mmux.ServeHTTP(w, r)
		})
		slog.Warn("profiles served on the metrics listener at /debug/pprof/ (SYNC_PPROF); keep that listener private", "addr", mln.Addr().String())
	}
	go func() {
		if err := msrv.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	slog.Info("metrics listening", "addr", mln.Addr().String())
	return func() { _ = msrv.Close() }, nil
}

// metadataFetchMode says how client metadata documents are fetched, for
// the start-up log.
func metadataFetchMode(cfg *config) string {
	if !cfg.CIMD {
		return "off"
	}
	if cfg.OutboundProxy != nil {
		return "via " + cfg.OutboundProxy.Redacted()
	}
	return "direct"
}

// every runs fn now and then every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		fn(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// openDatabase connects to DATABASE_URL, or starts the embedded cluster
// when it is unset. The returned closeDB closes the pool and stops the
// cluster; explain adds to a command's error that the cluster it attached
// to was stopped under it.
//
// A server owns its embedded cluster: started while a previous server
// still drains, it waits for that one to stop its cluster (up to the
// previous one's drain, if its timeout is this one's, plus the cluster's
// stop), then starts it itself. A command that ends by itself (attach:
// migrate, invite, collaborate) uses a running server's cluster instead.
func openDatabase(ctx context.Context, cfg *config, attach bool) (db *store.DB, closeDB func(), explain func(error) error, err error) {
	explain = func(err error) error { return err }
	if cfg.DatabaseURL != "" {
		db, err := store.Open(ctx, cfg.DatabaseURL, store.Options{MaxConns: cfg.DBMaxConns})
		if err != nil {
			return nil, nil, nil, err
		}
		return db, db.Close, explain, nil
	}
	cluster, err := embedpg.Start(ctx, embedpg.Options{Dir: filepath.Join(cfg.DataDir, "postgres"), Attach: attach,
		OwnerWait: cfg.ShutdownIn + clusterStopIn + 15*time.Second})
	if err != nil {
		return nil, nil, nil, err
	}
	stopCluster := func() {
		sctx, cancel := context.WithTimeout(context.Background(), clusterStopIn)
		defer cancel()
		if err := cluster.Stop(sctx); err != nil {
			slog.Warn("embedded PostgreSQL did not stop cleanly", "err", err)
		}
	}
	db, err = store.Open(ctx, cluster.URL(), store.Options{MaxConns: cfg.DBMaxConns})
	if err != nil {
		stopCluster()
		return nil, nil, nil, cluster.Explain(err)
	}
	return db, func() { db.Close(); stopCluster() }, cluster.Explain, nil
}

// clusterStopIn bounds the embedded cluster's stop, after which it is
// killed.
const clusterStopIn = 30 * time.Second

// version is the build's module version, or its VCS revision.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return "rev-" + s.Value[:12]
		}
	}
	return "dev"
}

// serverProtocols are HTTP/1.1 and unencrypted HTTP/2 (h2c).
func serverProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}
