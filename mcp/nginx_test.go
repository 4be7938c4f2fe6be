package mcp_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/oauth/oauthtest"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate/httpmw/proxytest"
)

// readmeNginx is the nginx server block the README's deployment section
// shows (its first nginx code block), read from README.md so that the
// tests run what people copy.
func readmeNginx(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```nginx\n(.*?)```").FindSubmatch(raw)
	if m == nil {
		t.Fatal("README.md has no ```nginx block")
	}
	return string(m[1])
}

// directive matches one nginx directive line by name, whatever its value.
func directive(name string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^(\s*)` + regexp.QuoteMeta(name) + `\s[^;]*;`)
}

// nginxProxy runs Debian's nginx with the README's server block in front
// of the backend at addr, listening on a loopback port it returns. Only
// what a test machine must change is changed: the listener (plain HTTP on
// loopback; TLS is not what is tested) and the upstream address; edit
// changes the block further (a test's shorter timeout). The block's
// headers, timeouts and buffering are the README's.
func nginxProxy(t *testing.T, addr string, edit func(string) string) string {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		bin = "/usr/sbin/nginx"
		if _, err := os.Stat(bin); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal("nginx must be installed in CI (.ci/run installs it)")
			}
			t.Skip("nginx is not installed")
		}
	}
	readme := readmeNginx(t)
	for _, d := range []string{"listen", "proxy_pass"} {
		if !directive(d).MatchString(readme) {
			t.Fatalf("the README's nginx block has no %s directive:\n%s", d, readme)
		}
	}
	// nginx binds its port itself: proxytest.Start tries another when it
	// is taken between picking and binding.
	return proxytest.Start(t, "nginx", true, func(port string) (*exec.Cmd, string) {
		// TLS is the one thing a loopback test cannot have as documented
		// (certificates for the public name): its directives go.
		block := regexp.MustCompile(`(?m)^\s*ssl_\w+\s[^;]*;`).ReplaceAllString(readme, "")
		block = directive("listen").ReplaceAllString(block, "${1}listen 127.0.0.1:"+port+";")
		block = directive("proxy_pass").ReplaceAllString(block, "${1}proxy_pass http://"+addr+";")
		if edit != nil {
			block = edit(block)
		}
		dir := t.TempDir()
		conf := fmt.Sprintf(`daemon off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
%[2]s
}
`, dir, block)
		if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		return exec.Command(bin, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-e", filepath.Join(dir, "error.log")), filepath.Join(dir, "error.log")
	})
}

// behindNginx starts the test server behind nginxProxy: the server's
// listener is bound first (nothing can take it), nginx is started on a
// port of its own in front of it, then the server is served on that
// listener with nginx's address as its public URL.
func behindNginx(t *testing.T, o serverOpts, edit func(string) string) (srv *server, public string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := nginxProxy(t, ln.Addr().String(), edit)
	o.publicURL, o.ln = "http://localhost:"+port, ln
	return startServerOpts(t, pgtest.New(t), o), o.publicURL
}

// The TypeScript SDK client through Debian's nginx configured with the
// README's own snippet: OAuth discovery, registration, consent and token
// through the proxy, then the tools, then a refresh.
func TestTypeScriptClientThroughNginx(t *testing.T) {
	_, public := behindNginx(t, serverOpts{accessTTL: 3 * time.Second}, nil)
	t.Setenv("SYNC_TS_OUTLIVE_MS", "4000")
	// The person signs up and consents through the proxy too.
	alice := oauthtest.SignUpVia(t, public, "alice", "", http.DefaultTransport)
	got := runTSScript(t, alice, "ts-client.mjs", public+"/mcp")
	if got["note"] != "from typescript" || got["view"] != true || got["refresh"] != true {
		t.Fatalf("TypeScript client through nginx saw %v", got)
	}
}

// The listen stream (subscriptions/listen, the newest protocol revision's
// server-sent event stream) stays open through nginx with a read timeout
// shorter than its silences, because the server sends keep-alive comments
// more often than that; it says X-Accel-Buffering: no, so an nginx
// without the README's proxy_buffering off does not hold events back.
// Scaled down for speed: keep-alives every 300 ms against a 1.5 s read
// timeout (production: every 15 s, inside the 30 s some proxies use).
func TestListenStreamSurvivesProxyTimeout(t *testing.T) {
	srv, public := behindNginx(t, serverOpts{keepAlive: 300 * time.Millisecond}, func(b string) string {
		b = directive("proxy_read_timeout").ReplaceAllString(b, "")
		return regexp.MustCompile(`(?m)^(\s*)location [^{]*\{`).ReplaceAllString(b, "$0\n${1}    proxy_read_timeout 1500ms;")
	})
	alice := oauthtest.SignUpVia(t, public, "alice", "", http.DefaultTransport)
	token := mintToken(t, srv, alice, nil)["access_token"].(string)

	direct := openListen(t, srv.base, token)
	if got := direct.Header.Get("X-Accel-Buffering"); got != "no" || !strings.HasPrefix(direct.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("listen stream: Content-Type %q, X-Accel-Buffering %q", direct.Header.Get("Content-Type"), got)
	}
	direct.Body.Close()

	res := openListen(t, public, token)
	defer res.Body.Close()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	start := time.Now()
	acked, comments := false, 0
	// The stream's lines until 4.5 s have passed: the span the proxy must
	// keep it open through is what this checks.
	over := time.After(4500 * time.Millisecond)
	for listening := true; listening; {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the proxy closed the listen stream after %v (acknowledged %v, %d keep-alives)", time.Since(start).Round(time.Millisecond), acked, comments)
			}
			if strings.Contains(line, "notifications/subscriptions/acknowledged") {
				acked = true
			}
			if strings.HasPrefix(line, ":") {
				comments++
			}
		case <-over:
			listening = false
		}
	}
	if !acked || comments < 5 {
		t.Fatalf("through the proxy for 4.5 s: acknowledged %v, %d keep-alives", acked, comments)
	}
}

// openListen opens a subscriptions/listen stream (protocol 2026-07-28).
func openListen(t *testing.T, base, token string) *http.Response {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"listen-test","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		t.Fatalf("listen stream via %s: %d", base, res.StatusCode)
	}
	return res
}
