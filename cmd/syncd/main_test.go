package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		main() // this process is the second server of TestWaitAcrossProcesses
		return
	}
	os.Exit(pgtest.Main(m))
}

// start runs the server in the background and returns its base URL and a
// function that stops it and waits for a clean exit.
func start(t *testing.T, cfg *config) (string, func()) {
	t.Helper()
	base, stop, err := startErr(t, cfg)
	if err != nil {
		t.Fatalf("server did not start: %v", err)
	}
	return base, stop
}

// startOnFreePorts starts the server with the config mk makes from n
// free loopback ports (listeners the test names before the server binds
// them: its metrics listener, its own address when the public URL must
// name it). Another process can take a port in between (an outgoing
// connection's local port, on a machine running other tests): the server
// then cannot listen, and it is started again with other ports.
func startOnFreePorts(t *testing.T, n int, mk func(ports []string) *config) (base string, stop func(), ports []string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		ports = make([]string, n)
		for i := range ports {
			ports[i] = freePort(t)
		}
		base, stop, err := startErr(t, mk(ports))
		if err == nil {
			return base, stop, ports
		}
		if !errors.Is(err, syscall.EADDRINUSE) || attempt == 5 {
			t.Fatalf("server did not start: %v", err)
		}
		t.Logf("a port of %v was taken before the server could listen on it (%v): others", ports, err)
	}
}

// startWithMetrics is startOnFreePorts for a metrics listener: it returns
// the server's base URL, its stop and the metrics listener's address.
func startWithMetrics(t *testing.T, mk func(metricsAddr string) *config) (string, func(), string) {
	t.Helper()
	base, stop, ports := startOnFreePorts(t, 1, func(ports []string) *config { return mk("127.0.0.1:" + ports[0]) })
	return base, stop, "127.0.0.1:" + ports[0]
}

// startErr is start answering the server's failure to start.
func startErr(t *testing.T, cfg *config) (string, func(), error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, "serve", cfg, ready) }()
	select {
	case addr := <-ready:
		return "http://" + addr, func() {
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("run: %v", err)
			}
		}, nil
	case err := <-done:
		cancel()
		return "", nil, err
	case <-time.After(90 * time.Second):
		cancel()
		return "", nil, errors.New("not started in 90 s")
	}
}

func testConfig(t *testing.T, extra ...string) *config {
	t.Helper()
	cfg, err := parseConfig(append([]string{"-addr", "127.0.0.1:0"}, extra...))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func call(t *testing.T, method, url, token, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		// Errorf, not Fatal: call also runs on the waiter's goroutine.
		t.Errorf("%s %s: %v", method, url, err)
		return 0, nil
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return res.StatusCode, out
}

// With no DATABASE_URL the server runs its own cluster; data written before
// a stop is there after the next start.
func TestEmbeddedRestartKeepsData(t *testing.T) {
	dir, err := os.MkdirTemp("", "syncd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// As root the cluster runs as the postgres account, which must be able
	// to enter the directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", "")
	cfg := testConfig(t, "-data-dir", dir)

	base, stop := start(t, cfg)
	if code, _ := call(t, "GET", base+"/readyz", "", ""); code != 200 {
		t.Fatalf("readyz %d", code)
	}
	code, room := call(t, "POST", base+"/rooms", "", `{"id":"persist"}`)
	if code != 201 {
		t.Fatalf("create room %d %v", code, room)
	}
	tok := room["token"].(string)
	if code, _ := call(t, "PUT", base+"/rooms/persist/state", tok, `{"scope":"_shared","key":"k","value":"kept"}`); code != 200 {
		t.Fatalf("write %d", code)
	}
	stop()

	base, stop = start(t, cfg)
	defer stop()
	code, got := call(t, "GET", base+"/rooms/persist/state?scope=_shared&key=k", tok, "")
	if code != 200 || got["value"] != "kept" {
		t.Fatalf("after restart: %d %v", code, got)
	}
}

func TestHealthAndMigrateWithDatabaseURL(t *testing.T) {
	url := pgtest.URL(t)
	cfg := testConfig(t, "-database-url", url)
	if err := run(context.Background(), "migrate", cfg, nil); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	base, stop := start(t, cfg)
	defer stop()
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _ := call(t, "GET", base+p, "", ""); code != 200 {
			t.Fatalf("%s: %d", p, code)
		}
	}
	if _, got := call(t, "GET", base+"/readyz", "", ""); got["pool"] == nil || got["pool"].(map[string]any)["max_conns"] != float64(16) {
		t.Fatalf("readyz does not report the pool: %v", got)
	}
	// The icon serverInfo names and the favicon are served, and /mcp/ is
	// /mcp (both ask for a token); nothing under it is.
	for path, want := range map[string]string{"/favicon.ico": "image/x-icon", "/icon.png": "image/png"} {
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != want || len(body) < 100 {
			t.Errorf("%s: %d %q, %d bytes", path, res.StatusCode, res.Header.Get("Content-Type"), len(body))
		}
	}
	for path, want := range map[string]int{"/mcp": 401, "/mcp/": 401, "/mcp/x": 404} {
		if code, _ := call(t, "POST", base+path, "", `{"jsonrpc":"2.0","id":1,"method":"ping"}`); code != want {
			t.Errorf("POST %s: %d, want %d", path, code, want)
		}
	}
}

func TestConfigFromEnvAndFlags(t *testing.T) {
	t.Setenv("HTTPS_PROXY", "")
	t.Setenv("https_proxy", "")
	t.Setenv("SYNC_ADDR", "127.0.0.1:9999")
	t.Setenv("SYNC_RATE_LIMIT", "7")
	cfg, err := parseConfig([]string{"-rate-limit", "9"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:9999" || cfg.RateLimit != 9 || cfg.PublicURL != "http://localhost:9999" {
		t.Fatalf("config %+v", cfg)
	}
	if _, err := parseConfig([]string{"-max-body-bytes", "lots"}); err == nil {
		t.Fatal("bad number accepted")
	}
	if cfg.WaitNowRecheck != time.Second {
		t.Fatalf("wait now recheck %v, want 1s by default", cfg.WaitNowRecheck)
	}
	t.Setenv("SYNC_WAIT_NOW_RECHECK", "250ms")
	if cfg, err := parseConfig(nil); err != nil || cfg.WaitNowRecheck != 250*time.Millisecond {
		t.Fatalf("SYNC_WAIT_NOW_RECHECK=250ms: %v %+v", err, cfg)
	}
	for _, bad := range []string{"10ms", "2m", "soon"} {
		if _, err := parseConfig([]string{"-wait-now-recheck", bad}); err == nil {
			t.Fatalf("-wait-now-recheck %s accepted", bad)
		}
	}
	if _, err := parseConfig([]string{"-public-url", "http://10.1.2.3:8080"}); err == nil {
		t.Fatal("an IP public URL was accepted (passkeys cannot use it)")
	}
	// Sub-path deployments are refused at start-up (README, "Deploying
	// behind a proxy"): discovery would otherwise fail after sign-in.
	for _, u := range []string{"https://example.org/sync", "https://example.org/sync/", "https://example.org/?x=1"} {
		if _, err := parseConfig([]string{"-public-url", u}); err == nil || !strings.Contains(err.Error(), "root of its own host") && !strings.Contains(err.Error(), "path") {
			t.Fatalf("public URL %q: %v, want a refusal", u, err)
		}
	}
	if cfg, err := parseConfig([]string{"-public-url", "https://example.org/"}); err != nil || cfg.PublicURL != "https://example.org" {
		t.Fatalf("root URL with a slash: %v %+v", err, cfg)
	}
	cfg, err = parseConfig([]string{"-trusted-proxies", "10.0.0.0/8, ::1", "-db-max-conns", "40"})
	if err != nil || len(cfg.TrustedProxies) != 2 || cfg.DBMaxConns != 40 || !cfg.AccessLog || cfg.ClientIPHeader != "X-Forwarded-For" {
		t.Fatalf("proxies and pool: %v %+v", err, cfg)
	}
	if cfg.OutboundProxy != nil || !cfg.CIMD {
		t.Fatalf("outbound proxy and documents by default: %v %v", cfg.OutboundProxy, cfg.CIMD)
	}
	t.Setenv("HTTPS_PROXY", "http://egress.internal:3128")
	if cfg, err := parseConfig([]string{"-cimd", "off"}); err != nil || cfg.CIMD || cfg.OutboundProxy == nil || cfg.OutboundProxy.Host != "egress.internal:3128" {
		t.Fatalf("cimd off, HTTPS_PROXY: %v %+v", err, cfg)
	}
	// Without a scheme, as HTTPS_PROXY is often set for other tools:
	// an HTTP proxy, not a refusal to start.
	t.Setenv("HTTPS_PROXY", "egress.internal:3128")
	if cfg, err := parseConfig(nil); err != nil || cfg.OutboundProxy == nil || cfg.OutboundProxy.String() != "http://egress.internal:3128" {
		t.Fatalf("HTTPS_PROXY without a scheme: %v %+v", err, cfg)
	}
	if cfg, err := parseConfig([]string{"-outbound-proxy", "user:pw@proxy:3128"}); err != nil || cfg.OutboundProxy.String() != "http://user:pw@proxy:3128" {
		t.Fatalf("-outbound-proxy without a scheme: %v %+v", err, cfg)
	}
	t.Setenv("SYNC_OUTBOUND_PROXY", "https://proxy.example:8443")
	if cfg, err := parseConfig(nil); err != nil || cfg.OutboundProxy.String() != "https://proxy.example:8443" {
		t.Fatalf("SYNC_OUTBOUND_PROXY over HTTPS_PROXY: %v %+v", err, cfg)
	}
	t.Setenv("SYNC_CLIENT_IP_HEADER", "Forwarded")
	if cfg, err := parseConfig(nil); err != nil || cfg.ClientIPHeader != "Forwarded" {
		t.Fatalf("client address header from the environment: %v %+v", err, cfg)
	}
	for _, bad := range [][]string{{"-trusted-proxies", "proxy.local"}, {"-client-ip-header", "X-Forwarded" + " For"}, {"-client-ip-header", "Host"}, {"-cimd", "maybe"}, {"-outbound-proxy", "socks5://proxy:1080"}, {"-outbound-proxy", "proxy:3128/path"}, {"-db-max-conns", "1"}, {"-access-log", "sometimes"}} {
		if _, err := parseConfig(bad); err == nil {
			t.Fatalf("%v accepted", bad)
		}
	}
	if cfg, _ := parseConfig(nil); cfg.DBMaxConns != 16 {
		t.Fatalf("default pool size %d", cfg.DBMaxConns)
	}
}

// Every surface answers with nosniff, no-referrer and a request id; HSTS
// only when the public URL is https.
func TestSecurityHeaders(t *testing.T) {
	url := pgtest.URL(t)
	for _, public := range []string{"", "https://sync.example.org"} {
		args := []string{"-database-url", url}
		if public != "" {
			args = append(args, "-public-url", public)
		}
		base, stop := start(t, testConfig(t, args...))
		for _, path := range []string{"/readyz", "/signin", "/rooms", "/mcp", "/.well-known/oauth-authorization-server"} {
			res, err := http.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			h := res.Header
			if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" || h.Get("X-Request-Id") == "" {
				t.Errorf("%s%s: headers %v", public, path, h)
			}
			if hsts := h.Get("Strict-Transport-Security"); (public != "") != (hsts != "") {
				t.Errorf("public URL %q, %s: Strict-Transport-Security %q", public, path, hsts)
			}
		}
		stop()
	}
}

// SYNC_LOOM_GENERATOR_* reach the loom: → continue calls the configured
// completions endpoint with the key and model from the environment.
func TestLoomGeneratorFromEnvironment(t *testing.T) {
	var mu sync.Mutex
	var auth string
	var got map[string]any
	gen := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		auth = r.Header.Get("Authorization")
		_ = json.NewDecoder(r.Body).Decode(&got)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"text":" and the wind came in"}]}`))
	}))
	defer gen.Close()
	t.Setenv("SYNC_LOOM_GENERATOR_URL", gen.URL+"/v1/completions")
	t.Setenv("SYNC_LOOM_GENERATOR_MODEL", "tiny-base")
	t.Setenv("SYNC_LOOM_GENERATOR_KEY", "gen-secret")
	base, stop := start(t, testConfig(t, "-database-url", pgtest.URL(t)))
	defer stop()

	code, room := call(t, "POST", base+"/rooms", "", `{"id":"woven"}`)
	if code != 201 {
		t.Fatalf("create room %d %v", code, room)
	}
	tok := room["token"].(string)
	loom := func(cmds string) string {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"commands": cmds})
		code, res := call(t, "POST", base+"/rooms/woven/loom", tok, string(body))
		if code != 200 {
			t.Fatalf("%s: %d %v", cmds, code, res)
		}
		text, _ := res["text"].(string)
		return text
	}
	loom(`→ new tree "t" "The door was open"`)
	if text := loom("→ continue from 1"); !strings.Contains(text, "continuation") {
		t.Fatalf("continue did not generate: %s", text)
	}
	mu.Lock()
	defer mu.Unlock()
	if auth != "Bearer gen-secret" || got["model"] != "tiny-base" || got["prompt"] != "The door was open" {
		t.Fatalf("generator called with auth %q, body %v", auth, got)
	}
	if text := loom("→ list 1 continuations"); !strings.Contains(text, "and the wind came in") {
		t.Fatalf("the continuation is not in the tree: %s", text)
	}
	if _, err := parseConfig([]string{"-loom-generator-url", "localhost:8000"}); err == nil {
		t.Fatal("a generator URL without a scheme was accepted")
	}
}

// The expression budgets set for syncd reach the service: a room's help
// reports the configured values, and bad values stop it starting.
func TestExpressionLimitsReachTheService(t *testing.T) {
	t.Setenv("SYNC_ROOM_COST_PER_SECOND", "123456")
	t.Setenv("SYNC_GATE_QUANTUM", "7s")
	base, stop := start(t, testConfig(t, "-database-url", pgtest.URL(t), "-action-cost-per-read", "54321", "-wait-now-recheck", "3s"))
	defer stop()
	code, room := call(t, "POST", base+"/rooms", "", `{"id":"budgets"}`)
	if code != 201 {
		t.Fatalf("create room %d %v", code, room)
	}
	code, help := call(t, "GET", base+"/rooms/budgets/help?key=expressions", room["token"].(string), "")
	content, _ := help["content"].(map[string]any)
	limits, _ := content["limits"].(map[string]any)
	if code != 200 || limits == nil {
		t.Fatalf("help %d %v", code, help)
	}
	for key, want := range map[string]string{"room_cost_per_second": "123456 ", "gate_quantum": "7s:", "actions_cost_per_read": "54321 "} {
		if got, _ := limits[key].(string); !strings.HasPrefix(got, want) {
			t.Errorf("help limit %s = %q, want the configured %q", key, got, want)
		}
	}
	vars, _ := content["variables"].(map[string]any)
	if now, _ := vars["now"].(string); !strings.Contains(now, "re-checks every 3s") {
		t.Errorf("help variable now = %q, want the configured re-check of waits on now (3s)", now)
	}

	t.Setenv("SYNC_ROOM_COST_PER_SECOND", "")
	t.Setenv("SYNC_GATE_QUANTUM", "")
	os.Unsetenv("SYNC_ROOM_COST_PER_SECOND")
	os.Unsetenv("SYNC_GATE_QUANTUM")
	cfg, err := parseConfig(nil)
	if err != nil || cfg.RoomCostPerSecond != 2_000_000 || cfg.GateQuantum != time.Second || cfg.ActionCostPerRead != 1_000_000 {
		t.Fatalf("defaults: %v %+v", err, cfg)
	}
	cfg, err = parseConfig([]string{"-room-cost-per-second", "-1", "-gate-quantum", "0"})
	if err != nil || cfg.RoomCostPerSecond != -1 || cfg.GateQuantum != -1 {
		t.Fatalf("budget off and no gate reuse: %v %+v", err, cfg)
	}
	for _, bad := range [][]string{{"-room-cost-per-second", "lots"}, {"-room-cost-per-second", "0"}, {"-gate-quantum", "5"}, {"-gate-quantum", "-1s"}, {"-gate-quantum", "2m"}, {"-action-cost-per-read", "99"}, {"-action-cost-per-read", "-1"}} {
		if _, err := parseConfig(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
