package mcp_test

import (
	"context"
	"net"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
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

	// Every scenario of the suite is either run or named here with why it
	// does not apply; a suite upgrade that adds one fails until it is
	// placed.
	listed, err := exec.Command(node, suite, "list", "--server").CombinedOutput()
	if err != nil {
		t.Fatalf("conformance list: %v\n%s", err, listed)
	}
	var unplaced []string
	for _, m := range regexp.MustCompile(`(?m)^\s*- ([a-z0-9-]+)`).FindAllStringSubmatch(string(listed), -1) {
		if !slices.Contains(applies, m[1]) && notApplicable[m[1]] == "" {
			unplaced = append(unplaced, m[1])
		}
	}
	if len(unplaced) > 0 || len(applies)+len(notApplicable) < 32 {
		t.Fatalf("conformance scenarios neither run nor marked not applicable: %v\n%s", unplaced, listed)
	}
	for _, scenario := range applies {
		t.Run(scenario, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, node, suite, "server", "--url", proxyBase+"/mcp", "--scenario", scenario).CombinedOutput()
			if err != nil {
				t.Fatalf("conformance %s failed: %v\n%s", scenario, err, out)
			}
			summary := regexp.MustCompile(`Passed: \d+/\d+, \d+ failed, \d+ warnings`).FindString(string(out))
			if summary == "" || !strings.Contains(summary, " 0 failed") {
				t.Fatalf("conformance %s: no clean summary:\n%s", scenario, out)
			}
			t.Logf("%s: %s", scenario, summary)
		})
	}
}

// applies are the suite's server scenarios that test what sync serves.
// The two SSE scenarios pass with a warning: a stateless server issues no
// session id, so they have nothing to resume.
var applies = []string{"server-initialize", "logging-set-level", "ping", "tools-list", "server-sse-polling",
	"server-sse-multiple-streams", "resources-list", "prompts-list", "dns-rebinding-protection"}

// notApplicable are the scenarios that call the suite's own fixture
// tools, resources and prompts (test_simple_text, test://static-text, …)
// or capabilities sync does not declare.
var notApplicable = map[string]string{}

func init() {
	for _, s := range strings.Fields(`tools-call-simple-text tools-call-image tools-call-audio tools-call-embedded-resource
		tools-call-mixed-content tools-call-with-logging tools-call-error tools-call-with-progress json-schema-2020-12
		resources-read-text resources-read-binary resources-templates-read prompts-get-simple prompts-get-with-args
		prompts-get-embedded-resource prompts-get-with-image`) {
		notApplicable[s] = "the suite's fixture tools, resources or prompts"
	}
	for _, s := range strings.Fields(`tools-call-sampling tools-call-elicitation elicitation-sep1034-defaults elicitation-sep1330-enums`) {
		notApplicable[s] = "a stateless server cannot ask the client (sampling, elicitation)"
	}
	notApplicable["completion-complete"] = "no completions capability (sync's one prompt, loom, takes no arguments; no resource templates)"
	notApplicable["resources-subscribe"] = "no resources to subscribe to"
	notApplicable["resources-unsubscribe"] = "no resources to subscribe to"
}
