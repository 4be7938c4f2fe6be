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

// option is one row of the configuration: a flag, the environment
// variable that is its default, and how its text sets the config. The
// table below is the whole of what syncd reads; parseConfig walks it.
type option struct {
	flag  string // the flag's name; empty: environment only (secrets)
	env   string // the environment variable read when the flag is absent
	def   func() string
	usage string
	// boolFlag makes a bare -flag mean true (only for flags that were
	// always boolean, so that `-access-log false` keeps its meaning).
	boolFlag bool
	set      func(c *config, v string) error
}

// fixed is a default that does not depend on the machine.
func fixed(v string) func() string { return func() string { return v } }

// text sets a string field as given.
func text(field func(*config) *string) func(*config, string) error {
	return func(c *config, v string) error { *field(c) = v; return nil }
}

// truth sets a boolean field from true or false; what names it in errors.
func truth(what string, field func(*config) *bool) func(*config, string) error {
	return func(c *config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%s %q is not true or false", what, v)
		}
		*field(c) = b
		return nil
	}
}

// positive sets an int field from a positive whole number.
func positive(what string, field func(*config) *int) func(*config, string) error {
	return func(c *config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("%s %q is not a positive integer", what, v)
		}
		*field(c) = n
		return nil
	}
}

var options = []option{
	{flag: "addr", env: "SYNC_ADDR", def: fixed("127.0.0.1:8080"), usage: "listen address", set: text(func(c *config) *string { return &c.Addr })},
	{flag: "public-url", env: "SYNC_PUBLIC_URL", def: fixed(""), usage: "externally visible base URL; default http://<addr>", set: text(func(c *config) *string { return &c.PublicURL })},
	{flag: "database-url", env: "DATABASE_URL", def: fixed(""), usage: "PostgreSQL URL; empty starts the embedded cluster", set: text(func(c *config) *string { return &c.DatabaseURL })},
	{flag: "data-dir", env: "SYNC_DATA_DIR", def: defaultDataDir, usage: "data directory for the embedded cluster", set: text(func(c *config) *string { return &c.DataDir })},
	{flag: "create-token", env: "SYNC_CREATE_TOKEN", def: fixed(""), usage: "bearer token required to create rooms over REST; empty = open", set: text(func(c *config) *string { return &c.CreateToken })},
	{flag: "rate-limit", env: "SYNC_RATE_LIMIT", def: fixed("100"), usage: "requests per second per credential; negative disables", set: func(c *config, v string) (err error) {
		if c.RateLimit, err = strconv.ParseFloat(v, 64); err != nil {
			return fmt.Errorf("rate limit %q: %w", v, err)
		}
		return nil
	}},
	{flag: "max-body-bytes", env: "SYNC_MAX_BODY_BYTES", def: fixed("1048576"), usage: "request body limit", set: func(c *config, v string) (err error) {
		if c.MaxBody, err = strconv.ParseInt(v, 10, 64); err != nil || c.MaxBody <= 0 {
			return fmt.Errorf("max body bytes %q is not a positive integer", v)
		}
		return nil
	}},
	{flag: "max-value-bytes", env: "SYNC_MAX_VALUE_BYTES", def: fixed("65536"), usage: "state value limit", set: positive("max value bytes", func(c *config) *int { return &c.MaxValue })},
	{flag: "max-value-depth", env: "SYNC_MAX_VALUE_DEPTH", def: fixed("64"), usage: "how deeply one value's arrays and objects may nest", set: positive("max value depth", func(c *config) *int { return &c.MaxValueDepth })},
	{flag: "db-max-conns", env: "SYNC_DB_MAX_CONNS", def: fixed(strconv.Itoa(store.DefaultMaxConns)), usage: "database connection pool size", set: func(c *config, v string) error {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 2 {
			return fmt.Errorf("database max connections %q must be a whole number of at least 2", v)
		}
		c.DBMaxConns = int32(n)
		return nil
	}},
	{flag: "trusted-proxies", env: "SYNC_TRUSTED_PROXIES", def: fixed(""), usage: "reverse proxies whose client address header is believed: addresses or CIDR prefixes, comma-separated", set: func(c *config, v string) (err error) {
		c.TrustedProxies, err = httpmw.ParseProxies(v)
		return err
	}},
	{flag: "client-ip-header", env: "SYNC_CLIENT_IP_HEADER", def: fixed("X-Forwarded-For"), usage: "the one header trusted proxies overwrite with the client address: X-Forwarded-For, X-Real-IP or Forwarded", set: func(c *config, v string) error {
		c.ClientIPHeader = v
		return httpmw.ValidClientIPHeader(v)
	}},
	{flag: "cimd", env: "SYNC_CIMD", def: fixed("on"), usage: "accept client ID metadata documents: on or off; off makes clients register dynamically", set: func(c *config, v string) error {
		switch strings.ToLower(v) {
		case "on", "true", "1":
			c.CIMD = true
		case "off", "false", "0":
			c.CIMD = false
		default:
			return fmt.Errorf("cimd %q is not on or off", v)
		}
		return nil
	}},
	{flag: "outbound-proxy", env: "SYNC_OUTBOUND_PROXY", def: func() string { return firstEnv("HTTPS_PROXY", "https_proxy") }, usage: "proxy for fetching client metadata documents, http://host:port or https://host:port (default HTTPS_PROXY)", set: setOutboundProxy},
	{flag: "access-log", env: "SYNC_ACCESS_LOG", def: fixed("true"), usage: "log one line per request: true or false", set: truth("access log", func(c *config) *bool { return &c.AccessLog })},
	{flag: "group-commit", env: "SYNC_GROUP_COMMIT", def: fixed("true"), usage: "invocations queued for a busy room share one transaction: true or false", set: truth("group commit", func(c *config) *bool { return &c.GroupCommit })},
	{flag: "wait-recheck", env: "SYNC_WAIT_RECHECK", def: fixed("5s"), usage: "safety-net re-check period of waits", set: func(c *config, v string) (err error) {
		if c.WaitRecheck, err = time.ParseDuration(v); err != nil || c.WaitRecheck < 100*time.Millisecond {
			return fmt.Errorf("wait recheck %q is not a duration of at least 100ms", v)
		}
		return nil
	}},
	{flag: "wait-now-recheck", env: "SYNC_WAIT_NOW_RECHECK", def: fixed("1s"), usage: "re-check period of waits that depend on now in a way no moment can be solved for", set: func(c *config, v string) (err error) {
		if c.WaitNowRecheck, err = time.ParseDuration(v); err != nil || c.WaitNowRecheck < 100*time.Millisecond || c.WaitNowRecheck > time.Minute {
			return fmt.Errorf("wait now recheck %q is not a duration from 100ms to 1m such as 1s", v)
		}
		return nil
	}},
	// Each expression evaluation counts at least 100, so a budget below
	// that could never afford one: refused rather than silently useless.
	{flag: "room-cost-per-second", env: "SYNC_ROOM_COST_PER_SECOND", def: fixed("2000000"), usage: "each room's expression budget (cel-go cost) per second; negative turns it off", set: func(c *config, v string) (err error) {
		if c.RoomCostPerSecond, err = strconv.Atoi(v); err != nil || (c.RoomCostPerSecond >= 0 && c.RoomCostPerSecond < 100) {
			return fmt.Errorf("room cost per second %q is not a whole number of at least 100 (or negative, to turn the budget off)", v)
		}
		return nil
	}},
	// A gate reused longer than a minute would keep `now < deadline`
	// open (or shut) that long past its deadline.
	{flag: "gate-quantum", env: "SYNC_GATE_QUANTUM", def: fixed("1s"), usage: "how long a time-dependent entry gate's result is reused per reader; 0 evaluates at every read", set: func(c *config, v string) (err error) {
		if c.GateQuantum, err = time.ParseDuration(v); err != nil || c.GateQuantum < 0 || c.GateQuantum > time.Minute {
			return fmt.Errorf("gate quantum %q is not a duration from 0 to 1m such as 1s or 250ms (0: evaluate at every read)", v)
		}
		if c.GateQuantum == 0 {
			c.GateQuantum = -1
		}
		return nil
	}},
	{flag: "action-cost-per-read", env: "SYNC_ACTION_COST_PER_READ", def: fixed("1000000"), usage: "cel-go cost of all of a room's actions' availability in one read", set: func(c *config, v string) (err error) {
		if c.ActionCostPerRead, err = strconv.Atoi(v); err != nil || c.ActionCostPerRead < 100 {
			return fmt.Errorf("action cost per read %q is not a whole number of at least 100", v)
		}
		return nil
	}},
	{flag: "shutdown-timeout", env: "SYNC_SHUTDOWN_TIMEOUT", def: fixed("15s"), usage: "graceful shutdown limit", set: func(c *config, v string) (err error) {
		if c.ShutdownIn, err = time.ParseDuration(v); err != nil {
			return fmt.Errorf("shutdown timeout %q: %w", v, err)
		}
		return nil
	}},
	{flag: "log-format", env: "SYNC_LOG_FORMAT", def: fixed("text"), usage: "log format, text or json", set: func(c *config, v string) error {
		if c.LogFormat = v; v != "text" && v != "json" {
			return errors.New("log format must be text or json")
		}
		return nil
	}},
	{flag: "signup", env: "SYNC_SIGNUP", def: fixed("invite"), usage: "who may create an account: invite, open or closed", set: text(func(c *config) *string { return &c.Signup })},
	{flag: "redirect-allow", env: "SYNC_REDIRECT_ALLOW", def: fixed(""), usage: "extra allowed OAuth redirect URIs, comma-separated; a trailing * allows a prefix", set: func(c *config, v string) error { c.RedirectAllow = splitList(v); return nil }},
	{flag: "mcp-origins", env: "SYNC_MCP_ORIGINS", def: fixed(""), usage: "browser origins, besides the public URL's, allowed to call /mcp, comma-separated", set: func(c *config, v string) error { c.MCPOrigins = splitList(v); return nil }},
	{flag: "loom-generator-url", env: "SYNC_LOOM_GENERATOR_URL", def: fixed(""), usage: "OpenAI-compatible completions endpoint for loom continuations; empty queues requests in the room", set: func(c *config, v string) error {
		if c.LoomGeneratorURL = v; v != "" {
			if u, err := url.Parse(v); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
				return fmt.Errorf("loom generator URL %q is not an http(s) URL (e.g. http://127.0.0.1:8000/v1/completions)", v)
			}
		}
		return nil
	}},
	{flag: "loom-generator-model", env: "SYNC_LOOM_GENERATOR_MODEL", def: fixed("base"), usage: "model name sent to the loom generator", set: text(func(c *config) *string { return &c.LoomGeneratorModel })},
	// Environment only, so the secret does not appear in the process list.
	{env: "SYNC_LOOM_GENERATOR_KEY", def: fixed(""), set: text(func(c *config) *string { return &c.LoomGeneratorKey })},
	{flag: "search-language", env: "SYNC_SEARCH_LANGUAGE", def: fixed("english"), usage: "language search stems words in: simple or one PostgreSQL stems, e.g. german; a change indexes every room again at start-up", set: text(func(c *config) *string { return &c.SearchLanguage })},
	{flag: "metrics-addr", env: "SYNC_METRICS_ADDR", def: fixed(""), usage: "separate listen address for Prometheus /metrics; empty = none", set: text(func(c *config) *string { return &c.MetricsAddr })},
	{flag: "metrics-token", env: "SYNC_METRICS_TOKEN", def: fixed(""), usage: "bearer token /metrics requires; when set, the public listener serves /metrics with it", set: text(func(c *config) *string { return &c.MetricsToken })},
	{flag: "pprof", env: "SYNC_PPROF", def: fixed("false"), boolFlag: true, usage: "serve Go's profiles at /debug/pprof/ on the metrics listener; needs -metrics-addr", set: func(c *config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("SYNC_PPROF %q is not true or false", v)
		}
		c.Pprof = b
		return nil
	}},
}

// flagText is a flag that keeps its text for its row to parse after all
// flags are read; a boolean one may stand bare.
type flagText struct {
	v        *string
	boolFlag bool
}

func (f flagText) String() string {
	if f.v == nil {
		return ""
	}
	return *f.v
}
func (f flagText) Set(v string) error { *f.v = v; return nil }
func (f flagText) IsBoolFlag() bool   { return f.boolFlag }

func parseConfig(args []string) (*config, error) {
	fs := flag.NewFlagSet("syncd", flag.ContinueOnError)
	values := make([]string, len(options))
	for i, o := range options {
		values[i] = o.def()
		if v, ok := os.LookupEnv(o.env); ok {
			values[i] = v
		}
		if o.flag == "" {
			continue
		}
		// The environment's text is checked as the flag's would be,
		// except that a boolean flag's default must itself be a boolean
		// for the flag package: that one is checked by its row below.
		fs.Var(flagText{v: &values[i], boolFlag: o.boolFlag}, o.flag, o.usage+" ("+o.env+")")
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	c := &config{}
	for i, o := range options {
		if err := o.set(c, values[i]); err != nil {
			return nil, err
		}
	}
	if err := c.checkMetrics(); err != nil {
		return nil, err
	}
	if err := c.settlePublicURL(); err != nil {
		return nil, err
	}
	return c, nil
}

// setOutboundProxy reads the proxy client metadata documents are fetched
// through. host:port alone means an HTTP proxy, as curl and Go's own
// HTTPS_PROXY reading take it: the variable is often set that way for
// other tools, and refusing it would stop syncd starting.
func setOutboundProxy(c *config, v string) error {
	if v == "" {
		return nil
	}
	raw := v
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("outbound proxy %q is not a proxy URL such as http://proxy.internal:3128", v)
	}
	c.OutboundProxy = u
	return nil
}

// checkMetrics holds the metrics listener and the profiles together: a
// profile shows the server's memory and code paths, and a long one costs
// CPU, so from other hosts only with the metrics token, and never on the
// public listener.
func (c *config) checkMetrics() error {
	if c.MetricsAddr == "" {
		if c.Pprof {
			return errors.New("pprof needs a metrics listener: set -metrics-addr (SYNC_METRICS_ADDR), e.g. 127.0.0.1:9090")
		}
		return nil
	}
	host, _, err := net.SplitHostPort(c.MetricsAddr)
	if err != nil {
		return fmt.Errorf("metrics address %q: %w", c.MetricsAddr, err)
	}
	if c.Pprof && c.MetricsToken == "" && !loopbackHost(host) {
		return fmt.Errorf("pprof on metrics address %q, reachable from other hosts, needs a token: set -metrics-token (SYNC_METRICS_TOKEN), or listen on loopback, e.g. 127.0.0.1:9090", c.MetricsAddr)
	}
	return nil
}

// settlePublicURL defaults the public URL from the listen address and
// refuses one passkeys or OAuth discovery cannot work under.
func (c *config) settlePublicURL() error {
	if c.PublicURL == "" {
		// Passkeys need a host name, not an IP address: a loopback or
		// wildcard listener is reached as localhost.
		host, port, err := net.SplitHostPort(c.Addr)
		if err != nil {
			return fmt.Errorf("listen address %q: %w", c.Addr, err)
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && (ip.IsLoopback() || ip.IsUnspecified())) {
			host = "localhost"
		}
		c.PublicURL = "http://" + net.JoinHostPort(host, port)
	}
	u, err := url.Parse(c.PublicURL)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https"):
		return fmt.Errorf("public URL %q is not an http(s) URL", c.PublicURL)
	case net.ParseIP(strings.Trim(u.Hostname(), "[]")) != nil:
		return fmt.Errorf("public URL %q uses an IP address; passkeys need a host name (use http://localhost:PORT locally)", c.PublicURL)
	case strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "":
		// OAuth discovery (RFC 8414, RFC 9728) and passkeys are per host:
		// a sub-path would need the proxy to route well-known documents
		// at the host's root as well. Refused rather than half working.
		return fmt.Errorf("public URL %q has a path; sync must be served at the root of its own host name (e.g. https://sync.example.org, behind a proxy that forwards every path)", c.PublicURL)
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	return nil
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
