package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate/httpmw"
)

// config is the server's configuration: every field has a flag and an
// environment variable (the flag wins), listed in the README.
type config struct {
	Addr          string        // SYNC_ADDR, -addr: listen address. Default 127.0.0.1:8080.
	PublicURL     string        // SYNC_PUBLIC_URL, -public-url: external base URL. Default http://<addr>.
	DatabaseURL   string        // DATABASE_URL, -database-url: use this server instead of the embedded one.
	DataDir       string        // SYNC_DATA_DIR, -data-dir: embedded cluster and local data.
	CreateToken   string        // SYNC_CREATE_TOKEN, -create-token: bearer token POST /rooms requires; empty = open.
	RateLimit     float64       // SYNC_RATE_LIMIT, -rate-limit: requests/s per credential; negative disables. Default 100.
	MaxBody       int64         // SYNC_MAX_BODY_BYTES, -max-body-bytes: request body cap. Default 1 MiB.
	MaxValue      int           // SYNC_MAX_VALUE_BYTES, -max-value-bytes: one state value cap. Default 64 KiB.
	MaxValueDepth int           // SYNC_MAX_VALUE_DEPTH, -max-value-depth: how deeply one value may nest. Default 64.
	ShutdownIn    time.Duration // SYNC_SHUTDOWN_TIMEOUT, -shutdown-timeout: drain time. Default 15 s.
	LogFormat     string        // SYNC_LOG_FORMAT, -log-format: text or json. Default text.
	Signup        string        // SYNC_SIGNUP, -signup: invite, open or closed. Default invite.
	RedirectAllow []string      // SYNC_REDIRECT_ALLOW, -redirect-allow: extra OAuth redirect URIs, comma-separated.
	MCPOrigins    []string      // SYNC_MCP_ORIGINS, -mcp-origins: browser origins besides the public URL's that may call /mcp.
	DBMaxConns    int32         // SYNC_DB_MAX_CONNS, -db-max-conns: database connection pool size. Default 16 (store.DefaultMaxConns).
	// SYNC_TRUSTED_PROXIES, -trusted-proxies: addresses and CIDR prefixes
	// whose ClientIPHeader names the client. Default none.
	TrustedProxies []netip.Prefix
	// SYNC_CLIENT_IP_HEADER, -client-ip-header: the one header a trusted
	// proxy overwrites with the client's address. Default X-Forwarded-For;
	// Forwarded only when chosen.
	ClientIPHeader string
	// SYNC_CIMD, -cimd: on (default) or off. Off: client ID metadata
	// documents are not advertised nor fetched; clients register
	// dynamically.
	CIMD bool
	// SYNC_OUTBOUND_PROXY, -outbound-proxy: the HTTP(S) proxy client
	// metadata documents are fetched through. Default: HTTPS_PROXY (or
	// https_proxy) when set, else direct.
	OutboundProxy *url.URL
	AccessLog     bool // SYNC_ACCESS_LOG, -access-log: one log line per request. Default true.
	// GroupCommit (SYNC_GROUP_COMMIT, -group-commit): invocations that
	// arrive for a room while its transaction is open share the next
	// one. Default true.
	GroupCommit bool
	// SYNC_WAIT_RECHECK, -wait-recheck: how often a wait re-evaluates its
	// condition when no notification came (a safety net). Default 5 s.
	WaitRecheck time.Duration
	// SYNC_WAIT_NOW_RECHECK, -wait-now-recheck: how often a wait whose
	// condition depends on now in a way no moment can be solved for
	// re-checks it (substrate WaitOptions.NowRecheck). Default 1 s.
	WaitNowRecheck time.Duration
	// SYNC_LOOM_GENERATOR_URL, -loom-generator-url: an OpenAI-compatible
	// completions endpoint (…/v1/completions) that → continue calls. Empty
	// (the default): continue queues a generation request in the room for
	// an external agent or person to fulfil.
	LoomGeneratorURL string
	// SYNC_LOOM_GENERATOR_MODEL, -loom-generator-model: the "model" sent
	// to the generator. Default "base".
	LoomGeneratorModel string
	// SearchLanguage is the language search stems words in (issue 31).
	SearchLanguage string
	// SYNC_LOOM_GENERATOR_KEY: bearer token for the generator. Environment
	// only, so the secret does not appear in the process list.
	LoomGeneratorKey string
	// SYNC_ROOM_COST_PER_SECOND, -room-cost-per-second: each room's
	// budget of expression work per second (substrate
	// Limits.RoomCostPerSecond). Default 2,000,000; negative turns it off.
	RoomCostPerSecond int
	// SYNC_GATE_QUANTUM, -gate-quantum: how long a time-dependent entry
	// gate's result is reused per reader (substrate Limits.GateQuantum).
	// Default 1 s, at most 1 minute; 0 evaluates them at every read (stored as -1, since
	// the substrate's zero means its default).
	GateQuantum time.Duration
	// SYNC_ACTION_COST_PER_READ, -action-cost-per-read: the cost of all of
	// a room's actions' availability in one read (substrate
	// Limits.ActionCostPerRead). Default 1,000,000.
	ActionCostPerRead int
	// SYNC_METRICS_ADDR, -metrics-addr: a separate listener serving
	// Prometheus metrics at /metrics. Default empty: none.
	MetricsAddr string
	// SYNC_METRICS_TOKEN, -metrics-token: a bearer token that /metrics
	// requires; when set, the public listener serves /metrics too (with
	// it), and the metrics listener requires it as well. Default empty.
	MetricsToken string
	// SYNC_PPROF, -pprof: serve Go's profiles (net/http/pprof) at
	// /debug/pprof/ on the metrics listener, behind the metrics token
	// when there is one. Default false; refused without -metrics-addr,
	// or on a metrics address other hosts reach without -metrics-token,
	// and never on the public listener.
	Pprof bool
}

// defaultDataDir is per user: $XDG_DATA_HOME/sync or ~/.local/share/sync.
// As root, PostgreSQL runs as the postgres account, which cannot enter
// /root, so root's default is /var/lib/syncd.
func defaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/syncd"
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "sync")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "sync")
	}
	return filepath.Join(os.TempDir(), "sync-"+strconv.Itoa(os.Getuid()))
}

func parseConfig(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("syncd", flag.ContinueOnError)
	env := func(name, def string) string {
		if v, ok := os.LookupEnv(name); ok {
			return v
		}
		return def
	}
	fs.StringVar(&c.Addr, "addr", env("SYNC_ADDR", "127.0.0.1:8080"), "listen address (SYNC_ADDR)")
	fs.StringVar(&c.PublicURL, "public-url", env("SYNC_PUBLIC_URL", ""), "externally visible base URL (SYNC_PUBLIC_URL); default http://<addr>")
	fs.StringVar(&c.DatabaseURL, "database-url", env("DATABASE_URL", ""), "PostgreSQL URL (DATABASE_URL); empty starts the embedded cluster")
	fs.StringVar(&c.DataDir, "data-dir", env("SYNC_DATA_DIR", defaultDataDir()), "data directory for the embedded cluster (SYNC_DATA_DIR)")
	fs.StringVar(&c.CreateToken, "create-token", env("SYNC_CREATE_TOKEN", ""), "bearer token required to create rooms over REST (SYNC_CREATE_TOKEN); empty = open")
	rate := fs.String("rate-limit", env("SYNC_RATE_LIMIT", "100"), "requests per second per credential; negative disables (SYNC_RATE_LIMIT)")
	maxBody := fs.String("max-body-bytes", env("SYNC_MAX_BODY_BYTES", "1048576"), "request body limit (SYNC_MAX_BODY_BYTES)")
	maxValue := fs.String("max-value-bytes", env("SYNC_MAX_VALUE_BYTES", "65536"), "state value limit (SYNC_MAX_VALUE_BYTES)")
	maxValueDepth := fs.String("max-value-depth", env("SYNC_MAX_VALUE_DEPTH", "64"), "how deeply one value's arrays and objects may nest (SYNC_MAX_VALUE_DEPTH)")
	shutdown := fs.String("shutdown-timeout", env("SYNC_SHUTDOWN_TIMEOUT", "15s"), "graceful shutdown limit (SYNC_SHUTDOWN_TIMEOUT)")
	fs.StringVar(&c.LogFormat, "log-format", env("SYNC_LOG_FORMAT", "text"), "log format, text or json (SYNC_LOG_FORMAT)")
	fs.StringVar(&c.Signup, "signup", env("SYNC_SIGNUP", "invite"), "who may create an account: invite, open or closed (SYNC_SIGNUP)")
	redirects := fs.String("redirect-allow", env("SYNC_REDIRECT_ALLOW", ""), "extra allowed OAuth redirect URIs, comma-separated; a trailing * allows a prefix (SYNC_REDIRECT_ALLOW)")
	origins := fs.String("mcp-origins", env("SYNC_MCP_ORIGINS", ""), "browser origins, besides the public URL's, allowed to call /mcp, comma-separated (SYNC_MCP_ORIGINS)")
	dbConns := fs.String("db-max-conns", env("SYNC_DB_MAX_CONNS", strconv.Itoa(store.DefaultMaxConns)), "database connection pool size (SYNC_DB_MAX_CONNS)")
	proxies := fs.String("trusted-proxies", env("SYNC_TRUSTED_PROXIES", ""), "reverse proxies whose client address header is believed: addresses or CIDR prefixes, comma-separated (SYNC_TRUSTED_PROXIES)")
	fs.StringVar(&c.ClientIPHeader, "client-ip-header", env("SYNC_CLIENT_IP_HEADER", "X-Forwarded-For"), "the one header trusted proxies overwrite with the client address: X-Forwarded-For, X-Real-IP or Forwarded (SYNC_CLIENT_IP_HEADER)")
	cimd := fs.String("cimd", env("SYNC_CIMD", "on"), "accept client ID metadata documents: on or off (SYNC_CIMD); off makes clients register dynamically")
	outboundProxy := fs.String("outbound-proxy", env("SYNC_OUTBOUND_PROXY", firstEnv("HTTPS_PROXY", "https_proxy")), "proxy for fetching client metadata documents, http://host:port or https://host:port (SYNC_OUTBOUND_PROXY; default HTTPS_PROXY)")
	accessLog := fs.String("access-log", env("SYNC_ACCESS_LOG", "true"), "log one line per request: true or false (SYNC_ACCESS_LOG)")
	groupCommit := fs.String("group-commit", env("SYNC_GROUP_COMMIT", "true"), "invocations queued for a busy room share one transaction: true or false (SYNC_GROUP_COMMIT)")
	recheck := fs.String("wait-recheck", env("SYNC_WAIT_RECHECK", "5s"), "safety-net re-check period of waits (SYNC_WAIT_RECHECK)")
	nowRecheck := fs.String("wait-now-recheck", env("SYNC_WAIT_NOW_RECHECK", "1s"), "re-check period of waits that depend on now in a way no moment can be solved for (SYNC_WAIT_NOW_RECHECK)")
	fs.StringVar(&c.LoomGeneratorURL, "loom-generator-url", env("SYNC_LOOM_GENERATOR_URL", ""), "OpenAI-compatible completions endpoint for loom continuations (SYNC_LOOM_GENERATOR_URL); empty queues requests in the room")
	fs.StringVar(&c.SearchLanguage, "search-language", env("SYNC_SEARCH_LANGUAGE", "english"), "language search stems words in: simple or one PostgreSQL stems, e.g. german (SYNC_SEARCH_LANGUAGE); a change indexes every room again at start-up")
	fs.StringVar(&c.LoomGeneratorModel, "loom-generator-model", env("SYNC_LOOM_GENERATOR_MODEL", "base"), "model name sent to the loom generator (SYNC_LOOM_GENERATOR_MODEL)")
	c.LoomGeneratorKey = os.Getenv("SYNC_LOOM_GENERATOR_KEY")
	roomCost := fs.String("room-cost-per-second", env("SYNC_ROOM_COST_PER_SECOND", "2000000"), "each room's expression budget (cel-go cost) per second; negative turns it off (SYNC_ROOM_COST_PER_SECOND)")
	gateQuantum := fs.String("gate-quantum", env("SYNC_GATE_QUANTUM", "1s"), "how long a time-dependent entry gate's result is reused per reader; 0 evaluates at every read (SYNC_GATE_QUANTUM)")
	actionCost := fs.String("action-cost-per-read", env("SYNC_ACTION_COST_PER_READ", "1000000"), "cel-go cost of all of a room's actions' availability in one read (SYNC_ACTION_COST_PER_READ)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", env("SYNC_METRICS_ADDR", ""), "separate listen address for Prometheus /metrics (SYNC_METRICS_ADDR); empty = none")
	fs.StringVar(&c.MetricsToken, "metrics-token", env("SYNC_METRICS_TOKEN", ""), "bearer token /metrics requires; when set, the public listener serves /metrics with it (SYNC_METRICS_TOKEN)")
	// A boolean flag, so that a bare -pprof turns it on.
	pprofEnv := env("SYNC_PPROF", "false")
	pprofDefault, pprofErr := strconv.ParseBool(pprofEnv)
	fs.BoolVar(&c.Pprof, "pprof", pprofDefault, "serve Go's profiles at /debug/pprof/ on the metrics listener (SYNC_PPROF); needs -metrics-addr")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if pprofErr != nil {
		return nil, fmt.Errorf("SYNC_PPROF %q is not true or false", pprofEnv)
	}
	var err error
	if c.RateLimit, err = strconv.ParseFloat(*rate, 64); err != nil {
		return nil, fmt.Errorf("rate limit %q: %w", *rate, err)
	}
	if c.MaxBody, err = strconv.ParseInt(*maxBody, 10, 64); err != nil || c.MaxBody <= 0 {
		return nil, fmt.Errorf("max body bytes %q is not a positive integer", *maxBody)
	}
	if c.MaxValue, err = strconv.Atoi(*maxValue); err != nil || c.MaxValue <= 0 {
		return nil, fmt.Errorf("max value bytes %q is not a positive integer", *maxValue)
	}
	if c.MaxValueDepth, err = strconv.Atoi(*maxValueDepth); err != nil || c.MaxValueDepth <= 0 {
		return nil, fmt.Errorf("max value depth %q is not a positive integer", *maxValueDepth)
	}
	if n, err := strconv.ParseInt(*dbConns, 10, 32); err != nil || n < 2 {
		return nil, fmt.Errorf("database max connections %q must be a whole number of at least 2", *dbConns)
	} else {
		c.DBMaxConns = int32(n)
	}
	if c.TrustedProxies, err = httpmw.ParseProxies(*proxies); err != nil {
		return nil, err
	}
	if err := httpmw.ValidClientIPHeader(c.ClientIPHeader); err != nil {
		return nil, err
	}
	switch strings.ToLower(*cimd) {
	case "on", "true", "1":
		c.CIMD = true
	case "off", "false", "0":
	default:
		return nil, fmt.Errorf("cimd %q is not on or off", *cimd)
	}
	if *outboundProxy != "" {
		raw := *outboundProxy
		// host:port alone means an HTTP proxy, as curl and Go's own
		// HTTPS_PROXY reading take it: the variable is often set that
		// way for other tools, and refusing it would stop syncd starting.
		if !strings.Contains(raw, "://") {
			raw = "http://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("outbound proxy %q is not a proxy URL such as http://proxy.internal:3128", *outboundProxy)
		}
		c.OutboundProxy = u
	}
	if c.AccessLog, err = strconv.ParseBool(*accessLog); err != nil {
		return nil, fmt.Errorf("access log %q is not true or false", *accessLog)
	}
	if c.GroupCommit, err = strconv.ParseBool(*groupCommit); err != nil {
		return nil, fmt.Errorf("group commit %q is not true or false", *groupCommit)
	}
	if c.WaitRecheck, err = time.ParseDuration(*recheck); err != nil || c.WaitRecheck < 100*time.Millisecond {
		return nil, fmt.Errorf("wait recheck %q is not a duration of at least 100ms", *recheck)
	}
	if c.WaitNowRecheck, err = time.ParseDuration(*nowRecheck); err != nil || c.WaitNowRecheck < 100*time.Millisecond || c.WaitNowRecheck > time.Minute {
		return nil, fmt.Errorf("wait now recheck %q is not a duration from 100ms to 1m such as 1s", *nowRecheck)
	}
	// Each expression evaluation counts at least 100, so a budget below
	// that could never afford one: refused rather than silently useless.
	if c.RoomCostPerSecond, err = strconv.Atoi(*roomCost); err != nil || (c.RoomCostPerSecond >= 0 && c.RoomCostPerSecond < 100) {
		return nil, fmt.Errorf("room cost per second %q is not a whole number of at least 100 (or negative, to turn the budget off)", *roomCost)
	}
	// A gate reused longer than a minute would keep `now < deadline`
	// open (or shut) that long past its deadline.
	if c.GateQuantum, err = time.ParseDuration(*gateQuantum); err != nil || c.GateQuantum < 0 || c.GateQuantum > time.Minute {
		return nil, fmt.Errorf("gate quantum %q is not a duration from 0 to 1m such as 1s or 250ms (0: evaluate at every read)", *gateQuantum)
	} else if c.GateQuantum == 0 {
		c.GateQuantum = -1
	}
	if c.ActionCostPerRead, err = strconv.Atoi(*actionCost); err != nil || c.ActionCostPerRead < 100 {
		return nil, fmt.Errorf("action cost per read %q is not a whole number of at least 100", *actionCost)
	}
	if c.ShutdownIn, err = time.ParseDuration(*shutdown); err != nil {
		return nil, fmt.Errorf("shutdown timeout %q: %w", *shutdown, err)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return nil, errors.New("log format must be text or json")
	}
	if c.MetricsAddr != "" {
		host, _, err := net.SplitHostPort(c.MetricsAddr)
		if err != nil {
			return nil, fmt.Errorf("metrics address %q: %w", c.MetricsAddr, err)
		}
		// A profile shows the server's memory and code paths, and a long
		// one costs CPU: from other hosts only with the metrics token.
		if c.Pprof && c.MetricsToken == "" && !loopbackHost(host) {
			return nil, fmt.Errorf("pprof on metrics address %q, reachable from other hosts, needs a token: set -metrics-token (SYNC_METRICS_TOKEN), or listen on loopback, e.g. 127.0.0.1:9090", c.MetricsAddr)
		}
	} else if c.Pprof {
		// The profiles are only ever served on the metrics listener.
		return nil, errors.New("pprof needs a metrics listener: set -metrics-addr (SYNC_METRICS_ADDR), e.g. 127.0.0.1:9090")
	}
	c.RedirectAllow = splitList(*redirects)
	c.MCPOrigins = splitList(*origins)
	if c.PublicURL == "" {
		// Passkeys need a host name, not an IP address: a loopback or
		// wildcard listener is reached as localhost.
		host, port, err := net.SplitHostPort(c.Addr)
		if err != nil {
			return nil, fmt.Errorf("listen address %q: %w", c.Addr, err)
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && (ip.IsLoopback() || ip.IsUnspecified())) {
			host = "localhost"
		}
		c.PublicURL = "http://" + net.JoinHostPort(host, port)
	}
	if u, err := url.Parse(c.PublicURL); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("public URL %q is not an http(s) URL", c.PublicURL)
	} else if net.ParseIP(strings.Trim(u.Hostname(), "[]")) != nil {
		return nil, fmt.Errorf("public URL %q uses an IP address; passkeys need a host name (use http://localhost:PORT locally)", c.PublicURL)
	} else if strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" {
		// OAuth discovery (RFC 8414, RFC 9728) and passkeys are per host:
		// a sub-path would need the proxy to route well-known documents
		// at the host's root as well. Refused rather than half working.
		return nil, fmt.Errorf("public URL %q has a path; sync must be served at the root of its own host name (e.g. https://sync.example.org, behind a proxy that forwards every path)", c.PublicURL)
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	if c.LoomGeneratorURL != "" {
		if u, err := url.Parse(c.LoomGeneratorURL); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("loom generator URL %q is not an http(s) URL (e.g. http://127.0.0.1:8000/v1/completions)", c.LoomGeneratorURL)
		}
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return c, nil
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// loopbackHost reports whether a listener on host is reachable from this
// machine only (an empty host listens on every interface).
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
