package mcp_test

import (
	"context"
	"net"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// mintToken obtains a real grant through the pages (see oauthtest).
func mintToken(t testing.TB, _ *server, p *person, rooms map[string]string) map[string]any {
	t.Helper()
	return p.Token(t, "Conformance", rooms)
}

// The official MCP conformance suite against /mcp. The suite cannot sign
// in, so it talks to a test-only proxy that adds a valid bearer token (the
// server itself has no auth-disabled mode). CI installs Node 22 and the
// suite and sets SYNC_NODE and SYNC_CONFORMANCE.
func TestConformanceSuite(t *testing.T) {
	node, suite := os.Getenv("SYNC_NODE"), os.Getenv("SYNC_CONFORMANCE")
	if node == "" || suite == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("SYNC_NODE and SYNC_CONFORMANCE must be set in CI (.ci/run installs them)")
		}
		t.Skip("set SYNC_NODE (Node ≥ 22) and SYNC_CONFORMANCE (the suite's dist/index.js) to run the conformance suite")
	}
	proxyLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxyBase := "http://localhost:" + strings.Split(proxyLn.Addr().String(), ":")[1]
	srv := startServerWith(t, pgtest.New(t), []string{proxyBase})
	alice := signup(t, srv, "alice")
	token := mintToken(t, srv, alice, nil)["access_token"].(string)

	target, _ := url.Parse(srv.base)
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.Host = pr.In.Host // keep the client's Host: DNS-rebinding checks look at it
		pr.Out.Header.Set("Authorization", "Bearer "+token)
	}}
	proxy := httptest.NewUnstartedServer(rp)
	proxy.Listener.Close()
	proxy.Listener = proxyLn
	proxy.Start()
	defer proxy.Close()

	for _, scenario := range []string{"server-initialize", "ping", "tools-list", "dns-rebinding-protection"} {
		t.Run(scenario, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, node, suite, "server", "--url", proxyBase+"/mcp", "--scenario", scenario).CombinedOutput()
			if err != nil {
				t.Fatalf("conformance %s failed: %v\n%s", scenario, err, out)
			}
			t.Logf("%s", lastLines(string(out), 3))
		})
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
