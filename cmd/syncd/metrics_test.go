package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/oauth/oauthtest"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// scrape fetches url's metrics (with token, when given) and returns each
// sample's value by its series, e.g. `sync_invocations_total{outcome="ok"}`.
func scrape(t *testing.T, url, token string) map[string]float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		raw, _ := io.ReadAll(res.Body)
		t.Fatalf("GET %s: %d %s", url, res.StatusCode, raw)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// The metrics listener's counters move with real requests on every
// surface: REST routes by pattern, invocations by outcome, a wait open
// and its notification, MCP tools by name, the pool, CEL cost.
func TestMetricsMove(t *testing.T) {
	dbURL := pgtest.URL(t)
	base, stop, ports := startOnFreePorts(t, 2, func(ports []string) *config {
		return testConfig(t, "-addr", "127.0.0.1:"+ports[0], "-database-url", dbURL, "-rate-limit", "-1", "-signup", "open",
			"-public-url", "http://localhost:"+ports[0], "-metrics-addr", "127.0.0.1:"+ports[1])
	})
	defer stop()
	public, metricsURL := "http://localhost:"+ports[0], "http://127.0.0.1:"+ports[1]+"/metrics"

	before := scrape(t, metricsURL, "")
	if before[`sync_invocations_total{outcome="ok"}`] != 0 || before["sync_waits_open"] != 0 || before["sync_db_pool_max"] < 2 {
		t.Fatalf("fresh server: %v", before)
	}
	_, room := call(t, "POST", base+"/rooms", "", `{"id": "m"}`)
	tok, _ := room["token"].(string)
	if code, _ := call(t, "PUT", base+"/rooms/m/actions", tok, `{"id": "tick", "if": "true", "writes": [{"key": "n", "increment": 1}]}`); code != 200 && code != 201 {
		t.Fatalf("register: %d", code)
	}
	for range 3 {
		if code, _ := call(t, "POST", base+"/rooms/m/actions/tick/invoke", tok, `{}`); code != 200 {
			t.Fatalf("invoke: %d", code)
		}
	}
	if code, _ := call(t, "POST", base+"/rooms/m/actions/nope/invoke", tok, `{}`); code != 404 {
		t.Fatalf("unknown action: %d", code)
	}
	// A wait, open while we scrape, woken by a write.
	done := make(chan int, 1)
	go func() {
		code, _ := call(t, "GET", base+"/rooms/m/wait?timeout=20000&context=none&condition=state._shared.n%20%3E%203", tok, "")
		done <- code
	}()
	pgtest.Eventually(t, 10*time.Second, func() bool { return scrape(t, metricsURL, "")["sync_waits_open"] == 1 }, "the open wait to show in sync_waits_open")
	if code, _ := call(t, "POST", base+"/rooms/m/actions/tick/invoke", tok, `{}`); code != 200 {
		t.Fatalf("invoke: %d", code)
	}
	if code := <-done; code != 200 {
		t.Fatalf("wait: %d", code)
	}

	// MCP: two tools, one refused.
	alice := oauthtest.SignUp(t, public, "alice", "")
	at := alice.Token(t, "Metrics", nil)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(),
		&sdk.StreamableClientTransport{Endpoint: public + "/mcp", HTTPClient: &http.Client{Transport: oauthtest.Bearer{Token: at["access_token"].(string)}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, c := range []struct {
		tool string
		args map[string]any
	}{{"sync_create_room", map[string]any{"room": "mcp-room"}}, {"sync_lobby", nil}, {"sync_invoke_action", map[string]any{"action": "tick"}}} {
		if _, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: c.tool, Arguments: c.args}); err != nil {
			t.Fatalf("%s: %v", c.tool, err)
		}
	}

	after := scrape(t, metricsURL, "")
	want := map[string]float64{
		`sync_invocations_total{outcome="ok"}`:               4,
		`sync_invocations_total{outcome="action_not_found"}`: 1,
		`sync_http_request_duration_seconds_count{code="200",method="POST",route="/rooms/{room}/actions/{action}/invoke"}`: 4,
		`sync_http_request_duration_seconds_count{code="404",method="POST",route="/rooms/{room}/actions/{action}/invoke"}`: 1,
		`sync_http_request_duration_seconds_count{code="200",method="GET",route="/rooms/{room}/wait"}`:                     1,
		`sync_mcp_tool_duration_seconds_count{outcome="ok",tool="sync_create_room"}`:                                       1,
		`sync_mcp_tool_duration_seconds_count{outcome="ok",tool="sync_lobby"}`:                                             1,
		"sync_waits_open": 0,
	}
	for series, v := range want {
		if after[series] != v {
			t.Errorf("%s = %v, want %v", series, after[series], v)
		}
	}
	// The refused MCP invocation (not embodied) is counted under its code.
	refusedTool := false
	for series, v := range after {
		if strings.HasPrefix(series, `sync_mcp_tool_duration_seconds_count{outcome="`) && strings.Contains(series, `tool="sync_invoke_action"`) &&
			!strings.Contains(series, `outcome="ok"`) && v == 1 {
			refusedTool = true
		}
	}
	if !refusedTool {
		t.Error("the refused sync_invoke_action has no series with its error code")
	}
	for _, moved := range []string{"sync_notifications_received_total", "sync_cel_evaluations_total", "sync_cel_cost_total",
		"sync_db_pool_acquires_total", `sync_http_request_duration_seconds_count{code="201",method="POST",route="/rooms"}`} {
		if after[moved] <= before[moved] {
			t.Errorf("%s did not move: %v → %v", moved, before[moved], after[moved])
		}
	}
	// Without a token, the public listener has no /metrics.
	if code, _ := call(t, "GET", base+"/metrics", "", ""); code != 404 {
		t.Errorf("public /metrics without SYNC_METRICS_TOKEN: %d, want 404", code)
	}
}

// Every 429 of the shared rate limit is counted, under the budget it
// came from.
func TestMetricsRateLimitRefusals(t *testing.T) {
	base, stop, metricsAddr := startWithMetrics(t, func(metricsAddr string) *config {
		return testConfig(t, "-database-url", pgtest.URL(t), "-rate-limit", "1", "-metrics-addr", metricsAddr)
	})
	defer stop()
	refused := 0
	for range 10 {
		if code, _ := call(t, "GET", base+"/rooms/r/state", "", ""); code == http.StatusTooManyRequests {
			refused++
		}
	}
	m := scrape(t, "http://"+metricsAddr+"/metrics", "")
	if refused < 5 || m[`sync_rate_limit_refusals_total{budget="address"}`] != float64(refused) || m[`sync_rate_limit_refusals_total{budget="credential"}`] != 0 {
		t.Fatalf("%d refused; metrics: address %v, credential %v", refused,
			m[`sync_rate_limit_refusals_total{budget="address"}`], m[`sync_rate_limit_refusals_total{budget="credential"}`])
	}
}

// get returns url's status and body.
func get(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, raw
}

// With -pprof the metrics listener serves Go's profiles: a CPU profile
// (gzipped protobuf) taken while the server works, the index, and a
// profile longer than the listener's 30 s write timeout is not refused
// for it. Without -pprof the same paths are 404 there, and -pprof
// without a metrics listener does not start.
func TestPprofOnMetricsListener(t *testing.T) {
	url := pgtest.URL(t)
	for _, on := range []bool{true, false} {
		base, stop, metricsAddr := startWithMetrics(t, func(metricsAddr string) *config {
			args := []string{"-database-url", url, "-rate-limit", "-1", "-metrics-addr", metricsAddr}
			if on {
				args = append(args, "-pprof")
			}
			return testConfig(t, args...)
		})
		mbase := "http://" + metricsAddr
		if on {
			done := make(chan struct{})
			go func() { // something to profile
				defer close(done)
				for range 20 {
					call(t, "GET", base+"/healthz", "", "")
				}
			}()
			code, body := get(t, mbase+"/debug/pprof/profile?seconds=1", "")
			<-done
			if code != 200 || len(body) < 2 || body[0] != 0x1f || body[1] != 0x8b {
				t.Errorf("-pprof: CPU profile on the metrics listener: %d, %d bytes (want 200 and a gzipped profile)", code, len(body))
			}
			if code, body := get(t, mbase+"/debug/pprof/", ""); code != 200 || !strings.Contains(string(body), "goroutine") {
				t.Errorf("-pprof: index: %d %.200s", code, body)
			}
			if code, body := get(t, mbase+"/debug/pprof/goroutine?debug=1", ""); code != 200 || !strings.Contains(string(body), "goroutine profile") {
				t.Errorf("-pprof: goroutines: %d %.200s", code, body)
			}
		} else {
			for _, p := range []string{"/debug/pprof/", "/debug/pprof/profile?seconds=1", "/debug/pprof/goroutine", "/debug/pprof/cmdline"} {
				if code, _ := get(t, mbase+p, ""); code != 404 {
					t.Errorf("without -pprof: %s on the metrics listener: %d, want 404", p, code)
				}
			}
		}
		// The metrics are there either way.
		scrape(t, mbase+"/metrics", "")
		stop()
	}
	if _, err := parseConfig([]string{"-pprof"}); err == nil || !strings.Contains(err.Error(), "metrics-addr") {
		t.Errorf("-pprof without -metrics-addr: %v, want refused naming -metrics-addr", err)
	}
	if _, err := parseConfig([]string{"-pprof=maybe", "-metrics-addr", "127.0.0.1:0"}); err == nil {
		t.Error("-pprof=maybe accepted")
	}
}
