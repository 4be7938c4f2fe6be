package main

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/httpmw/proxytest"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// Attacks on the server's own endpoints that must fail.

// /metrics on the public listener is behind SYNC_METRICS_TOKEN: no token,
// a wrong one, another kind of credential (a room token) and a token in
// the query string are all refused, and the refusal says nothing of the
// metrics. The metrics listener requires the token too when it is set.
func TestAttackMetricsWithoutToken(t *testing.T) {
	base, stop, metricsAddr := startWithMetrics(t, func(metricsAddr string) *config {
		return testConfig(t, "-database-url", pgtest.URL(t), "-rate-limit", "-1", "-metrics-token", "s3cret-metrics", "-metrics-addr", metricsAddr)
	})
	defer stop()
	_, room := call(t, "POST", base+"/rooms", "", `{"id": "a"}`)
	roomTok, _ := room["token"].(string)
	for _, c := range []struct{ name, url, token string }{
		{"no token", base + "/metrics", ""},
		{"wrong token", base + "/metrics", "s3cret-metric"},
		{"room token", base + "/metrics", roomTok},
		{"token in the query", base + "/metrics?token=s3cret-metrics", ""},
		{"metrics listener, no token", "http://" + metricsAddr + "/metrics", ""},
		{"metrics listener, wrong token", "http://" + metricsAddr + "/metrics", "nope"},
	} {
		code, body := call(t, "GET", c.url, c.token, "")
		if code != http.StatusUnauthorized || body["error"] != "unauthorized" {
			t.Errorf("%s: %d %v, want 401 unauthorized", c.name, code, body)
		}
	}
	scrape(t, base+"/metrics", "s3cret-metrics")
	if m := scrape(t, "http://"+metricsAddr+"/metrics", "s3cret-metrics"); m["sync_db_pool_max"] < 2 {
		t.Errorf("metrics listener with the token: %v", m)
	}
}

// The public listener never serves Go's profiles: not with -pprof on, not
// with the metrics token (which opens /metrics there), not under another
// method or a path spelled differently. With the metrics token set, the
// metrics listener's profiles need it too.
func TestAttackPprofNotOnPublicListener(t *testing.T) {
	base, stop, metricsAddr := startWithMetrics(t, func(metricsAddr string) *config {
		return testConfig(t, "-database-url", pgtest.URL(t), "-rate-limit", "-1", "-metrics-token", "s3cret-metrics", "-metrics-addr", metricsAddr, "-pprof")
	})
	defer stop()
	for _, p := range []string{"/debug/pprof/", "/debug/pprof", "/debug/pprof/profile?seconds=1", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=2",
		"/debug/pprof/cmdline", "/debug/pprof/symbol", "/debug/pprof/trace?seconds=1", "//debug/pprof/", "/debug/./pprof/", "/DEBUG/PPROF/"} {
		for _, tok := range []string{"", "s3cret-metrics"} {
			for _, m := range []string{"GET", "POST"} {
				req, _ := http.NewRequest(m, base+p, nil)
				if tok != "" {
					req.Header.Set("Authorization", "Bearer "+tok)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				raw := make([]byte, 512)
				n, _ := res.Body.Read(raw)
				res.Body.Close()
				// Whatever answers (404, a redirect, a page), it is not pprof.
				if res.StatusCode == 200 || strings.Contains(string(raw[:n]), "pprof") || strings.Contains(string(raw[:n]), "goroutine") ||
					n > 1 && raw[0] == 0x1f && raw[1] == 0x8b {
					t.Errorf("HOLE: public %s %s (token %q): %d %q", m, p, tok, res.StatusCode, raw[:min(n, 120)])
				}
			}
		}
	}
	if code, _ := call(t, "GET", "http://"+metricsAddr+"/debug/pprof/goroutine", "", ""); code != http.StatusUnauthorized {
		t.Errorf("metrics listener's profiles without the metrics token: %d, want 401", code)
	}
	req, _ := http.NewRequest("GET", "http://"+metricsAddr+"/debug/pprof/goroutine", nil)
	req.Header.Set("Authorization", "Bearer s3cret-metrics")
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 200 {
		t.Errorf("metrics listener's profiles with the token: %v %v", res, err)
	} else {
		res.Body.Close()
	}
}

// Clients cannot grow the metrics: random paths, methods, room ids and
// tool-like names add no series (labels come from route patterns and
// fixed sets), so a scrape's size is bounded whatever is sent.
func TestAttackMetricsCardinality(t *testing.T) {
	base, stop, metricsAddr := startWithMetrics(t, func(metricsAddr string) *config {
		return testConfig(t, "-database-url", pgtest.URL(t), "-rate-limit", "-1", "-metrics-addr", metricsAddr)
	})
	defer stop()
	series := func() int {
		n := 0
		for s := range scrape(t, "http://"+metricsAddr+"/metrics", "") {
			if strings.HasPrefix(s, "sync_") {
				n++
			}
		}
		return n
	}
	junk := func() {
		for range 20 {
			var b [6]byte
			_, _ = rand.Read(b[:])
			r := hex.EncodeToString(b[:])
			for _, m := range []string{"GET", "POST", "BREW" + r[:3], "DELETE"} {
				for _, p := range []string{"/" + r, "/rooms/" + r, "/rooms/" + r + "/" + r, "/rooms/" + r + "/actions/" + r + "/invoke",
					"/.well-known/" + r, "/mcp/" + r, "/static/" + r} {
					req, _ := http.NewRequest(m, base+p, nil)
					req.Header.Set("Authorization", "Bearer "+r)
					if res, err := http.DefaultClient.Do(req); err == nil {
						res.Body.Close()
					}
				}
			}
		}
	}
	junk() // the first round may add the fixed series of its routes and codes
	n := series()
	junk()
	junk()
	if m := series(); m != n {
		t.Fatalf("random requests grew the metrics from %d to %d series", n, m)
	}
	if n > 400 {
		t.Fatalf("%d series after junk requests: labels are not bounded", n)
	}
}

// Guessing the metrics token is rate limited like any request without a
// valid credential, on both listeners.
func TestAttackMetricsTokenGuessingLimited(t *testing.T) {
	base, stop, metricsAddr := startWithMetrics(t, func(metricsAddr string) *config {
		return testConfig(t, "-database-url", pgtest.URL(t), "-rate-limit", "1", "-metrics-token", "s3cret-metrics", "-metrics-addr", metricsAddr)
	})
	defer stop()
	for _, url := range []string{base + "/metrics", "http://" + metricsAddr + "/metrics"} {
		limited := 0
		for i := range 10 {
			code, _ := call(t, "GET", url, "guess-"+strconv.Itoa(i), "")
			if code == http.StatusTooManyRequests {
				limited++
			} else if code != http.StatusUnauthorized {
				t.Fatalf("%s guess %d: %d", url, i, code)
			}
		}
		if limited < 5 {
			t.Errorf("%s: only %d of 10 wrong tokens were rate limited", url, limited)
		}
	}
}

// Behind the README's nginx and Caddy snippets, a client that invents its
// address in every forwarding header it can think of is still one client:
// syncd believes only SYNC_CLIENT_IP_HEADER (X-Forwarded-For, which both
// snippets overwrite), so 80 quick /token requests with 80 invented
// addresses meet the per-address limit. Both proxies pass Forwarded on as
// the client sent it: believed, it gave every request a fresh budget.
func TestAttackForgedClientAddressThroughProxies(t *testing.T) {
	cfg := testConfig(t, "-database-url", pgtest.URL(t), "-trusted-proxies", "127.0.0.1,::1", "-access-log", "false")
	base, stop := start(t, cfg)
	defer stop()
	upstream := strings.TrimPrefix(base, "http://")
	for _, p := range []struct {
		name  string
		start func(testing.TB, string, proxytest.Options) string
	}{{"nginx", proxytest.Nginx}, {"caddy", proxytest.Caddy}} {
		t.Run(p.name, func(t *testing.T) {
			proxy := p.start(t, upstream, proxytest.Options{})
			limited, other := 0, map[int]int{}
			for i := range 80 {
				fake := fmt.Sprintf("198.51.%d.%d", i/250, 1+i%250)
				req, _ := http.NewRequest("POST", proxy+"/token", strings.NewReader("grant_type=authorization_code&code=nope&client_id=nobody&code_verifier=x"))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("Forwarded", "for="+fake)
				req.Header.Set("X-Forwarded-For", fake)
				for _, h := range []string{"X-Real-IP", "True-Client-IP", "CF-Connecting-IP", "X-Client-IP", "Client-IP", "Fastly-Client-IP", "X-Cluster-Client-IP"} {
					req.Header.Set(h, fake)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode == http.StatusTooManyRequests {
					limited++
				} else {
					other[res.StatusCode]++
				}
			}
			if limited < 20 {
				t.Fatalf("HOLE: through %s, 80 /token requests with 80 forged addresses met %d 429s (others %v): the forged address was believed", p.name, limited, other)
			}
		})
	}
}

// The loom's rules are registered by its package's init (issue 27): a
// binary that does not import substrate/loom would let room authority
// write the loom's scopes directly and show them to every reader. syncd
// imports it (main, and each adapter's loom endpoint); this keeps it so,
// on the server as it runs.
func TestAttackSyncdEnforcesTheLoomsScopes(t *testing.T) {
	base, stop := start(t, testConfig(t, "-database-url", pgtest.URL(t), "-rate-limit", "-1"))
	defer stop()
	_, room := call(t, "POST", base+"/rooms", "", `{"id": "loomreg"}`)
	roomTok, _ := room["token"].(string)
	for _, scope := range []string{"_loom", "_loom.doc"} {
		code, body := call(t, "PUT", base+"/rooms/loomreg/state", roomTok, `{"scope": "`+scope+`", "key": "forged", "value": 1}`)
		if code != http.StatusForbidden || body["error"] != "scope_denied" {
			t.Errorf("HOLE: room authority wrote %s directly: %d %v", scope, code, body)
		}
	}
}

// Go's profiles never hand out the process's command line: it holds what
// operators pass as flags (-database-url with its password, -create-token,
// -metrics-token), and a metrics listener without a token serves anyone
// who reaches it (a local process, a request forged through another
// service). With the metrics token the command line is not served either.
func TestAttackPprofNeverShowsTheCommandLine(t *testing.T) {
	dbURL := pgtest.URL(t)
	_, stop, metricsAddr := startWithMetrics(t, func(metricsAddr string) *config {
		return testConfig(t, "-database-url", dbURL, "-rate-limit", "-1", "-create-token", "s3cret-create", "-metrics-addr", metricsAddr, "-pprof")
	})
	defer stop()
	for _, p := range []string{"/debug/pprof/cmdline", "/debug/pprof/cmdline?debug=1", "/debug/pprof/cmdline/", "/debug/pprof/", "/debug/pprof/goroutine?debug=2"} {
		code, raw := get(t, "http://"+metricsAddr+p, "")
		// The test's flags go to cfg, not os.Args: the command line served
		// would be this test binary's, so its name stands for the flags.
		if body := string(raw); strings.Contains(body, os.Args[0]) || strings.Contains(body, "s3cret-create") || strings.Contains(body, dbURL) {
			t.Errorf("HOLE: %s on the metrics listener shows the command line: %d %.200s", p, code, body)
		}
	}
	// The profiles themselves are served.
	if code, body := get(t, "http://"+metricsAddr+"/debug/pprof/goroutine?debug=1", ""); code != 200 || !strings.Contains(string(body), "goroutine profile") {
		t.Errorf("goroutines on the metrics listener: %d %.200s", code, body)
	}
}

// Profiles show the server's memory and code paths, and a long one costs
// CPU: -pprof without the metrics token is refused at start on a metrics
// address other hosts can reach, and allowed on loopback (where syncd
// bench starts its servers) or with a token.
func TestAttackPprofReachableFromOtherHostsNeedsAToken(t *testing.T) {
	for _, tc := range []struct {
		addr, token string
		ok          bool
	}{
		{":9090", "", false},
		{"0.0.0.0:9090", "", false},
		{"[::]:9090", "", false},
		{"10.1.2.3:9090", "", false},
		{"metrics.internal:9090", "", false},
		{"0.0.0.0:9090", "s3cret-metrics", true},
		{"127.0.0.1:0", "", true},
		{"[::1]:0", "", true},
		{"localhost:0", "", true},
	} {
		args := []string{"-addr", "127.0.0.1:0", "-metrics-addr", tc.addr, "-pprof"}
		if tc.token != "" {
			args = append(args, "-metrics-token", tc.token)
		}
		_, err := parseConfig(args)
		if tc.ok && err != nil {
			t.Errorf("-pprof -metrics-addr %s (token %q): refused: %v", tc.addr, tc.token, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "-metrics-token")) {
			t.Errorf("-pprof -metrics-addr %s without a token: %v, want refused naming -metrics-token", tc.addr, err)
		}
	}
}

// syncd collaborate's chat key stayed readable in /proc/<pid>/environ
// (issue 41, 9), though the README said it left the environment:
// os.Unsetenv does not change the kernel's copy. The real process, given
// its keys in the environment, runs without them there (and still calls
// the chat endpoint with its key).
func TestAttackCollaborateKeyInProcEnviron(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/<pid>/environ is Linux's")
	}
	url := pgtest.URL(t)
	ctx := context.Background()
	db, err := store.Open(ctx, url, store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	svc := substrate.New(db, substrate.Options{Features: features()})
	t.Cleanup(svc.Close)
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "story"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	if _, err := svc.Join(ctx, admin, "story", substrate.JoinRequest{ID: "claude", Name: "Claude"}); err != nil {
		t.Fatal(err)
	}
	if _, err := loom.Of(svc).Run(ctx, admin, "story", "→ new tree \"t\" \"Once.\"\n→ permit claude loom_write"); err != nil {
		t.Fatal(err)
	}
	// The chat endpoint holds the collaborator's first call while the
	// test reads its environment: it is running, past reading its keys.
	auth := make(chan string, 1)
	release := make(chan struct{})
	chat := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case auth <- r.Header.Get("Authorization"):
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": []map[string]any{{"message": map[string]string{"content": "→ stop"}}}})
	}))
	t.Cleanup(chat.Close)
	t.Cleanup(func() { close(release) })
	const chatKey, genKey = "sk-env-7f3a9c1e-SENTINEL", "gen-env-2b8d4e6f-SENTINEL"
	cmd := exec.Command(os.Args[0], "collaborate", "-database-url", url, "-room", "story", "-agent", "claude",
		"-chat-url", chat.URL, "-chat-model", "m", "-max-time", "60s")
	cmd.Env = append(os.Environ(), childEnv+"=1", "SYNC_COLLAB_CHAT_KEY="+chatKey, "SYNC_LOOM_GENERATOR_KEY="+genKey)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	select {
	case a := <-auth:
		if a != "Bearer "+chatKey {
			t.Fatalf("the chat endpoint got authorization %q, want the key from the environment", a)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the collaborator never called the chat endpoint")
	}
	for _, f := range []string{"environ", "cmdline"} {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", cmd.Process.Pid, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), "SENTINEL") {
			t.Fatalf("HOLE: a key of syncd collaborate is readable in /proc/%d/%s", cmd.Process.Pid, f)
		}
	}
}

// The plugin and the skill name the server's configured public URL, never
// one a request brings: a forged Host or X-Forwarded-Host cannot make the
// server hand Claude Code a plugin whose MCP server is the attacker's.
// They are read-only: no other method writes or reaches them.
func TestAttackPluginNamesOnlyThePublicURL(t *testing.T) {
	base, stop := start(t, testConfig(t, "-database-url", pgtest.URL(t), "-rate-limit", "-1", "-public-url", "https://sync.example.org"))
	defer stop()
	for _, p := range []string{"/SKILL.md", "/claude/marketplace.json", "/claude/sync-plugin.zip"} {
		req, _ := http.NewRequest("GET", base+p, nil)
		req.Host = "evil.example"
		req.Header.Set("X-Forwarded-Host", "evil.example")
		req.Header.Set("X-Forwarded-Proto", "http")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("GET %s: %d", p, res.StatusCode)
		}
		if p == "/claude/sync-plugin.zip" {
			zr, err := zip.NewReader(bytes.NewReader(body), int64(len(body)))
			if err != nil {
				t.Fatal(err)
			}
			f, err := zr.Open(".mcp.json")
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(f)
		}
		if bytes.Contains(body, []byte("evil.example")) {
			t.Errorf("HOLE: %s names the request's host", p)
		}
		if !bytes.Contains(body, []byte("https://sync.example.org")) {
			t.Errorf("%s does not name the public URL: %.200s", p, body)
		}
		for _, m := range []string{"POST", "PUT", "DELETE"} {
			if code, _ := call(t, m, base+p, "", "{}"); code != http.StatusMethodNotAllowed && code != http.StatusNotFound {
				t.Errorf("%s %s: %d, want 404 or 405", m, p, code)
			}
		}
	}
}
