package oauth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/syncsubstrate/sync/oauth"
)

// docServer serves one client metadata document listing uris; down makes
// it answer 503, status (when set) with that status.
type docServer struct {
	srv     *httptest.Server
	id      string
	down    atomic.Bool
	status  atomic.Int32
	fetches atomic.Int32
}

func newDocServer(t *testing.T, tlsServer bool, uris ...string) *docServer {
	d := &docServer{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.fetches.Add(1)
		if d.down.Load() {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return
		}
		if st := d.status.Load(); st != 0 {
			http.Error(w, http.StatusText(int(st)), int(st))
			return
		}
		w.Header().Set("Cache-Control", "max-age=3600")
		_ = json.NewEncoder(w).Encode(map[string]any{"client_id": d.id, "client_name": "Claude", "redirect_uris": uris, "token_endpoint_auth_method": "none"})
	})
	if tlsServer {
		d.srv = httptest.NewTLSServer(h)
	} else {
		d.srv = httptest.NewServer(h)
	}
	t.Cleanup(d.srv.Close)
	d.id = d.srv.URL + "/oauth/client.json"
	return d
}

// A document listing a redirect URI this server does not allow beside
// ones it does is a working client: each request's redirect URI is
// checked on its own, and the disallowed one is refused (never redirected
// to) with a page that says so.
func TestMetadataDocumentRedirectCheckedPerRequest(t *testing.T) {
	d := newDocServer(t, false, "https://app.example.net/cb", "http://localhost/callback")
	h := newHarness(t, oauth.Options{AllowPrivateMetadataFetch: true})
	alice := h.enrol("alice")
	h.room("r", h.userID("alice"), "owner")
	good := client{id: d.id, redirect: "http://localhost:40001/callback", verifier: strings.Repeat("v", 50)}
	loc := alice.consent(h.authorizeURL(good, nil), map[string]string{"r": "read"}, false)
	if tok := h.exchange(good, loc.Query().Get("code")); tok.status != 200 {
		t.Fatalf("allowed redirect of a document listing a disallowed one: %d %s", tok.status, tok.body)
	}
	bad := good
	bad.redirect = "https://app.example.net/cb"
	r := alice.do("GET", h.authorizeURL(bad, nil), nil, nil)
	if r.status != 400 || r.header.Get("Location") != "" || !strings.Contains(r.body, "does not allow") {
		t.Fatalf("disallowed redirect listed in the document: %d %v %s", r.status, r.header, r.body)
	}
}

// When the document cannot be fetched again, the last good copy keeps
// the client working, at /authorize and at refresh; the failure is logged.
// A client never seen before gets the generic message only.
func TestMetadataDocumentStaleIfError(t *testing.T) {
	d := newDocServer(t, false, "http://localhost/callback")
	var logs syncBuffer
	h := newHarness(t, oauth.Options{AllowPrivateMetadataFetch: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	alice := h.enrol("alice")
	h.room("r", h.userID("alice"), "owner")
	c := client{id: d.id, redirect: "http://localhost:40002/callback", verifier: strings.Repeat("s", 50)}
	loc := alice.consent(h.authorizeURL(c, nil), map[string]string{"r": "read"}, false)
	tok := h.exchange(c, loc.Query().Get("code")).json()

	d.down.Store(true)
	if _, err := h.db.Exec(context.Background(), `UPDATE smcp_oauth_clients SET metadata = jsonb_set(metadata, '{cimd_expires}', to_jsonb(now() - interval '1 hour'))`); err != nil {
		t.Fatal(err)
	}
	h.s.ForgetClients()
	before := d.fetches.Load()
	r := h.token(c, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok["refresh_token"].(string)}})
	if r.status != 200 {
		t.Fatalf("refresh while the document's host is down: %d %s", r.status, r.body)
	}
	if d.fetches.Load() == before {
		t.Fatal("the expired document was not fetched again")
	}
	// The failure postpones the next attempt: requests meanwhile do not
	// each wait for the document's host.
	h.s.ForgetClients()
	failed := d.fetches.Load()
	if r := alice.do("GET", h.authorizeURL(c, nil), nil, nil); r.status != 200 || d.fetches.Load() != failed {
		t.Fatalf("authorize right after a failed fetch: %d, %d more fetches %s", r.status, d.fetches.Load()-failed, r.body)
	}
	if _, err := h.db.Exec(context.Background(), `UPDATE smcp_oauth_clients SET metadata = jsonb_set(metadata, '{cimd_expires}', to_jsonb(now() - interval '1 second'))`); err != nil {
		t.Fatal(err)
	}
	h.s.ForgetClients()
	if r := alice.do("GET", h.authorizeURL(c, nil), nil, nil); r.status != 200 || d.fetches.Load() == failed {
		t.Fatalf("authorize while the document's host is down, retry due: %d %s", r.status, r.body)
	}
	if !strings.Contains(logs.String(), "using the last good one") || !strings.Contains(logs.String(), "503") {
		t.Fatalf("the failed fetch was not logged:\n%s", logs.String())
	}
	fresh := client{id: d.srv.URL + "/other.json", redirect: c.redirect, verifier: c.verifier}
	r = alice.do("GET", h.authorizeURL(fresh, nil), nil, nil)
	if r.status != 400 || !strings.Contains(r.body, "could not be fetched") || strings.Contains(r.body, "503") {
		t.Fatalf("unknown client while its host is down: %d %s", r.status, r.body)
	}
}

// SYNC_CIMD=off: documents are not advertised, none is fetched, and
// clients register dynamically.
func TestMetadataDocumentsOff(t *testing.T) {
	d := newDocServer(t, false, "http://localhost/callback")
	h := newHarness(t, oauth.Options{AllowPrivateMetadataFetch: true, DisableMetadataDocuments: true})
	res, err := http.Get(h.base + "/.well-known/oauth-authorization-server")
	if err != nil {
		t.Fatal(err)
	}
	var meta map[string]any
	_ = json.NewDecoder(res.Body).Decode(&meta)
	res.Body.Close()
	if _, ok := meta["client_id_metadata_document_supported"]; ok || meta["registration_endpoint"] == nil {
		t.Fatalf("metadata with documents off: %v", meta)
	}
	alice := h.enrol("alice")
	r := alice.do("GET", h.authorizeURL(client{id: d.id, redirect: "http://localhost:40003/callback", verifier: strings.Repeat("o", 50)}, nil), nil, nil)
	if r.status != 400 || !strings.Contains(r.body, "does not accept client metadata documents") || d.fetches.Load() != 0 {
		t.Fatalf("document client with documents off: %d (%d fetches) %s", r.status, d.fetches.Load(), r.body)
	}
	if c := h.register("none", "http://localhost/callback"); c.id == "" {
		t.Fatal("dynamic registration with documents off")
	}
}

// Through the operator's proxy: documents are fetched via CONNECT to the
// address syncd resolved and checked, not to a name the proxy resolves.
func TestMetadataDocumentThroughProxy(t *testing.T) {
	d := newDocServer(t, true, "http://localhost/callback")
	proxy := newConnectProxy(t)
	roots := d.srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	pu, _ := url.Parse(proxy.srv.URL)
	pu.User = url.UserPassword("sync", "egress-pass")
	h := newHarness(t, oauth.Options{AllowPrivateMetadataFetch: true, MetadataFetchRoots: roots, MetadataProxy: pu})
	alice := h.enrol("alice")
	h.room("r", h.userID("alice"), "owner")
	c := client{id: d.id, redirect: "http://localhost:40004/callback", verifier: strings.Repeat("p", 50)}
	loc := alice.consent(h.authorizeURL(c, nil), map[string]string{"r": "read"}, false)
	if tok := h.exchange(c, loc.Query().Get("code")); tok.status != 200 {
		t.Fatalf("exchange: %d %s", tok.status, tok.body)
	}
	if got := proxy.targets(); len(got) != 1 || got[0] != strings.TrimPrefix(d.srv.URL, "https://") {
		t.Fatalf("proxy saw CONNECT %v, want one to %s", got, d.srv.URL)
	}
	if proxy.auth != "Basic c3luYzplZ3Jlc3MtcGFzcw==" {
		t.Fatalf("proxy credentials %q", proxy.auth)
	}
}

// connectProxy is a minimal HTTPS (CONNECT) forward proxy that records
// the targets it was asked for.
type connectProxy struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string
	auth string // the last Proxy-Authorization
}

func newConnectProxy(t *testing.T) *connectProxy {
	p := &connectProxy{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		p.mu.Lock()
		p.seen = append(p.seen, r.Host)
		p.auth = r.Header.Get("Proxy-Authorization")
		p.mu.Unlock()
		up, err := net.Dial("tcp", r.Host)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			up.Close()
			return
		}
		_, _ = conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
		go func() { _, _ = io.Copy(up, buf); up.Close() }()
		_, _ = io.Copy(conn, up)
		conn.Close()
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *connectProxy) targets() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const (
	claudeCodeID = "https://claude.ai/oauth/claude-code-client-metadata"
	claudeAIID   = "https://claude.ai/oauth/mcp-oauth-client-metadata"
)

// deadAddr is a loopback address with nothing listening: a fetch sent
// there fails at once, as on a server without egress.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A server that cannot fetch Claude's documents (no egress, or claude.ai
// down) with nothing stored signs Claude Code in from the built-in copy:
// the whole flow, consent to token to refresh, and the log says why.
// Seen failing before the built-in copies: 400 "Unknown application … the
// client metadata document could not be fetched; retry later".
func TestBuiltinMetadataDocumentWithoutEgress(t *testing.T) {
	var logs syncBuffer
	h := newHarness(t, oauth.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	h.s.SendMetadataFetchesTo(deadAddr(t), nil)
	alice := h.enrol("alice")
	h.room("r", h.userID("alice"), "owner")
	// Claude Code's callback is on a random port; its document lists it
	// portless.
	for _, redirect := range []string{"http://127.0.0.1:53682/callback", "http://localhost:41234/callback"} {
		c := client{id: claudeCodeID, redirect: redirect, verifier: strings.Repeat("c", 50)}
		loc := alice.consent(h.authorizeURL(c, nil), map[string]string{"r": "read"}, false)
		tok := h.exchange(c, loc.Query().Get("code"))
		if tok.status != 200 {
			t.Fatalf("%s: token: %d %s", redirect, tok.status, tok.body)
		}
		if _, err := h.db.Exec(context.Background(), `UPDATE smcp_oauth_clients SET metadata = jsonb_set(metadata, '{cimd_expires}', to_jsonb(now() - interval '1 second'))`); err != nil {
			t.Fatal(err)
		}
		h.s.ForgetClients()
		if r := h.token(c, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.json()["refresh_token"].(string)}}); r.status != 200 {
			t.Fatalf("%s: refresh from the built-in copy: %d %s", redirect, r.status, r.body)
		}
	}
	r := alice.do("GET", h.authorizeURL(client{id: claudeAIID, redirect: "https://claude.ai/api/mcp/auth_callback", verifier: strings.Repeat("d", 50)}, nil), nil, nil)
	if r.status != 200 || !strings.Contains(r.body, "Claude") {
		t.Fatalf("Claude.ai from the built-in copy: %d %s", r.status, r.body)
	}
	if !strings.Contains(logs.String(), "built-in copy") || !strings.Contains(logs.String(), claudeCodeID) {
		t.Fatalf("the fallback to the built-in copy was not logged:\n%s", logs.String())
	}
}

// A client id this server does not accept (a dynamic registration from
// before SYNC_CIMD changed, or a metadata-document id after SYNC_CIMD=off)
// gets a page that says what to do: Claude keeps sending the id it once
// used until the server is removed and added again. The log names the
// setting that decides it. Seen failing before: "Go back and connect it
// again", which Claude answers with the same id.
func TestUnknownApplicationSaysRemoveAndAdd(t *testing.T) {
	for _, tc := range []struct {
		name string
		off  bool
		id   string
	}{{"stale dynamic registration", false, "3f1c9a0e-stale-registration"}, {"document id with documents off", true, claudeCodeID}} {
		var logs syncBuffer
		h := newHarness(t, oauth.Options{DisableMetadataDocuments: tc.off, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		h.s.SendMetadataFetchesTo(deadAddr(t), nil)
		b := h.browser()
		r := b.do("GET", h.authorizeURL(client{id: tc.id, redirect: "http://127.0.0.1:53682/callback", verifier: strings.Repeat("u", 50)}, nil), nil, nil)
		if r.status != 400 || !strings.Contains(r.body, "Unknown application") || !strings.Contains(r.body, "remove this server") ||
			!strings.Contains(r.body, "add it again") {
			t.Fatalf("%s: %d %s", tc.name, r.status, r.body)
		}
		if !strings.Contains(logs.String(), "SYNC_CIMD") || !strings.Contains(logs.String(), tc.id) {
			t.Fatalf("%s: the log does not name the setting:\n%s", tc.name, logs.String())
		}
	}
}
