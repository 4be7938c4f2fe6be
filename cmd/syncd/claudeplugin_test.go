package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/syncsubstrate/sync/mcp/claudetest"
	"github.com/syncsubstrate/sync/mcp/plugin"
	"github.com/syncsubstrate/sync/oauth/oauthtest"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// publicHost is the test's public host name: Claude Code installs a
// plugin archive only over HTTPS from a host that is not loopback, so the
// server is reached as a deployment is, by name through TLS.
const publicHost = "sync.test"

// testTLS is a certificate authority of the test's and a certificate for
// publicHost it signed.
type testTLS struct {
	caPEM []byte
	cert  tls.Certificate
	spki  string // base64 SHA-256 of the certificate's public key, for Chromium
}

func newTestTLS(t *testing.T) *testTLS {
	t.Helper()
	now := time.Now()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sync test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: publicHost}, DNSNames: []string{publicHost},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	spki, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	sum := sha256.Sum256(spki)
	return &testTLS{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		cert: tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key}, spki: base64.StdEncoding.EncodeToString(sum[:])}
}

// tlsFront terminates TLS for publicHost on a loopback port and proxies to
// the server at upstream, as a deployment's proxy does.
func tlsFront(t *testing.T, c *testTLS, upstream string) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{c.cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(upstream)
	rp := &httputil.ReverseProxy{FlushInterval: -1, Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host
	}}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// connectProxy is an HTTPS proxy for Claude Code that reaches publicHost
// at front and refuses every other host: the test's stand-in for DNS,
// and a guard that nothing leaves the machine.
func connectProxy(t *testing.T, front string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect || r.Host != publicHost+":443" {
			t.Logf("proxy refused %s %s", r.Method, r.Host)
			http.Error(w, "only "+publicHost, http.StatusForbidden)
			return
		}
		up, err := net.Dial("tcp", front)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			up.Close()
			return
		}
		_, _ = conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
		go func() { _, _ = io.Copy(up, conn); up.Close() }()
		_, _ = io.Copy(conn, up)
		conn.Close()
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// A user adds their sync server to a fresh Claude Code with the one
// command the README gives, and gets the MCP server (this server's
// public URL) and the skill together: the skill is offered to the model,
// loads when the model asks for it, and the session works in a room.
func TestClaudeCodeInstallsThePlugin(t *testing.T) {
	cc := newClaudeCode(t)
	certs := newTestTLS(t)
	dbURL := pgtest.URL(t)
	if err := run(context.Background(), "migrate", testConfig(t, "-database-url", dbURL), nil); err != nil {
		t.Fatal(err)
	}
	public := "https://" + publicHost
	base, stop := start(t, testConfig(t, "-database-url", dbURL, "-rate-limit", "-1", "-signup", "open", "-public-url", public,
		"-cimd", "off", "-outbound-proxy", refusingProxy(t)))
	t.Cleanup(stop)
	front := tlsFront(t, certs, base)
	caFile := filepath.Join(cc.home, "ca.pem")
	if err := os.WriteFile(caFile, certs.caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cc.env = append(cc.env, "HTTPS_PROXY="+connectProxy(t, front), "NO_PROXY=127.0.0.1,localhost", "NODE_EXTRA_CA_CERTS="+caFile)
	cc.server = "plugin:sync:sync"
	browser := oauthtest.Chromium(t, 4*time.Minute,
		chromedp.Flag("host-resolver-rules", "MAP "+publicHost+":443 "+front),
		chromedp.Flag("ignore-certificate-errors-spki-list", certs.spki))
	aliceSignsUp(t, browser, public)

	// The README's command, as the server states it.
	bundle, err := plugin.New(public)
	if err != nil {
		t.Fatal(err)
	}
	install := strings.Fields(bundle.InstallCommand())
	if install[0] != "claude" {
		t.Fatalf("install command %q", bundle.InstallCommand())
	}
	t.Logf("%s\n%s", bundle.InstallCommand(), cc.run(install[1:]...))
	if out := cc.run("mcp", "list"); !strings.Contains(out, "plugin:sync:sync: "+public+"/mcp (HTTP)") {
		t.Fatalf("claude mcp list after installing the plugin:\n%s", out)
	}
	t.Logf("claude plugin details:\n%s", cc.run("plugin", "details", plugin.Name+"@"+bundle.Marketplace()))

	cc.signIn(browser)
	skill := string(plugin.Skill(public))
	_, description, _ := strings.Cut(skill, "\ndescription: ")
	description, _, _ = strings.Cut(description, "\n")
	const tool = "mcp__plugin_sync_sync__"
	cc.model.SetScript(
		claudetest.Step{Calls: []claudetest.Call{{Name: "Skill", Input: map[string]any{"skill": "sync:sync"}}}},
		claudetest.Step{Calls: []claudetest.Call{{Name: "ToolSearch", Input: map[string]any{"query": "select:" + tool + "sync_lobby," + tool + "sync_create_room," + tool + "sync_help"}}}},
		claudetest.Step{Calls: []claudetest.Call{{Name: tool + "sync_lobby", Input: map[string]any{}}}},
		claudetest.Step{Calls: []claudetest.Call{{Name: tool + "sync_create_room", Input: map[string]any{"room": "plans"}}}},
		claudetest.Step{Calls: []claudetest.Call{{Name: tool + "sync_help", Input: map[string]any{"key": "skill"}}}},
		claudetest.Step{Text: "Ready."},
	)
	cc.run("-p", "Work in sync.", "--allowedTools", "mcp__plugin_sync_sync", "ToolSearch", "Skill", "--output-format", "stream-json", "--verbose")

	// Offered: the skill's name and description are in what the model is
	// sent before it asks for anything.
	reqs := cc.model.Requests()
	var first string
	for _, r := range reqs {
		if r.Main {
			first = bodyText(r)
			break
		}
	}
	if !strings.Contains(first, "sync:sync") || !strings.Contains(first, jsonText(description)) {
		t.Fatalf("the first request to the model does not offer the skill (%q):\n%.3000s", description, first)
	}
	// Loaded: the request answering the Skill call (step 1), before any
	// sync tool ran (sync_help's answer carries the same text), brings the
	// skill's body; the one before it did not.
	body := jsonText("Claim before you work.")
	loaded := false
	for _, r := range reqs {
		if r.Main && r.Step == 1 && strings.Contains(bodyText(r), body) {
			loaded = true
		}
	}
	if !loaded || strings.Contains(first, body) {
		t.Fatalf("the skill's text reached the model on the Skill call: %v; before it: %v; tool results: %v", loaded, strings.Contains(first, body), cc.model.ToolResults())
	}
	// Working: the plugin's server answered as alice, with the room made.
	var lobby, created, help string
	for _, r := range cc.model.ToolResults() {
		text := r.Text
		switch r.Call.Name {
		case tool + "sync_lobby":
			lobby = text
		case tool + "sync_create_room":
			created = text
		case tool + "sync_help":
			help = text
		}
		if r.IsError {
			t.Errorf("%s failed: %s", r.Call.Name, text)
		}
	}
	if !strings.Contains(lobby, "alice") || !strings.Contains(created, "plans") || !strings.Contains(help, jsonText(public+"/SKILL.md")) {
		t.Fatalf("the session through the plugin's server:\nlobby %s\ncreate %s\nhelp %.300s", lobby, created, help)
	}
}

// jsonText is s as it appears inside a JSON string.
func jsonText(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

func bodyText(r claudetest.Request) string {
	b, _ := json.Marshal(r.Body)
	return string(b)
}
