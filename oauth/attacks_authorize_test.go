package oauth_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/syncsubstrate/sync/oauth"
)

// GET /authorize is not rate limited, yet with a metadata-document
// client_id it makes the server fetch an attacker-chosen URL (up to 5 s
// each) and store a client row per distinct URL.
// GET /authorize fetched a client metadata document and stored a client
// per distinct URL, with no limit: one address could make the server fetch
// anything and grow the clients table.
func TestAttackAuthorizeIsRateLimited(t *testing.T) {
	var fetches atomic.Int64
	meta := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		id := "http://" + r.Host + r.URL.Path
		_ = json.NewEncoder(w).Encode(map[string]any{"client_id": id, "client_name": "x", "redirect_uris": []string{"http://127.0.0.1/cb"}})
	}))
	defer meta.Close()
	h := newHarness(t, oauth.Options{RatePerSecond: 1, AllowPrivateMetadataFetch: true})
	limited := 0
	const n = 40
	for i := 0; i < n; i++ {
		u := h.base + "/authorize?" + url.Values{"client_id": {fmt.Sprintf("%s/c%d", meta.URL, i)}, "response_type": {"code"},
			"redirect_uri": {"http://127.0.0.1/cb"}, "code_challenge": {"x"}, "code_challenge_method": {"S256"}}.Encode()
		res, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode == 429 {
			limited++
		}
	}
	var rows int
	_ = h.db.QueryRow(t.Context(), `SELECT count(*) FROM smcp_oauth_clients`).Scan(&rows)
	if limited == 0 {
		t.Errorf("HOLE: %d GET /authorize from one address at 1 rps: none limited; %d outbound fetches, %d client rows stored", n, fetches.Load(), rows)
	}
}

// The shared-rooms level comes only from the consent screen's choices:
// admin (owners grant it room by room) and made-up levels are refused,
// never stored in a token.
func TestAttackConsentSharedRoomsLevel(t *testing.T) {
	h := newHarness(t, oauth.Options{})
	alice := h.enrol("alice")
	c := h.register("none", "http://localhost/callback")
	alice.do("GET", h.authorizeURL(c, nil), nil, nil)
	for _, lvl := range []string{"admin", "owner", "write extra", "rooms:*:admin"} {
		r := alice.postForm(h.authorizeURL(c, nil), url.Values{"decision": {"allow"}, "shared_rooms": {lvl}}, nil)
		if r.status != 400 || r.header.Get("Location") != "" {
			t.Fatalf("shared_rooms=%q: %d %v", lvl, r.status, r.header)
		}
	}
}

// A stranger naming a metadata-document URL learned from the error page
// what its host resolved to ("refusing … non-public address 127.0.0.1",
// "no such host"): a free internal DNS oracle. The page now says only
// that the document could not be fetched; the details go to the log.
func TestAttackMetadataFetchErrorsRevealNothing(t *testing.T) {
	h := newHarness(t, oauth.Options{})
	b := h.browser()
	for _, id := range []string{"https://localhost:9/client.json", "https://127.0.0.1:9/c.json", "https://[::1]:9/c.json", "https://sync-test-host.invalid/c.json"} {
		r := b.do("GET", h.authorizeURL(client{id: id, redirect: "http://localhost:40005/callback", verifier: strings.Repeat("a", 50)}, nil), nil, nil)
		if r.status != 400 || !strings.Contains(r.body, "could not be fetched") {
			t.Fatalf("%s: %d %s", id, r.status, r.body)
		}
		for _, leak := range []string{"127.0.0.1", "::1", "non-public", "dial", "no such host", "refusing"} {
			if strings.Contains(r.body, leak) && !strings.Contains(id, leak) {
				t.Errorf("HOLE: the page for %s reveals %q:\n%s", id, leak, r.body)
			}
		}
	}
}

// With an outbound proxy, the proxy resolves names out of the connect-time
// check's sight: syncd resolves and checks the document's host itself and
// never asks the proxy for a non-public one. IPv6 forms that embed an
// IPv4 address (IPv4-compatible ::a.b.c.d, SIIT ::ffff:0:a.b.c.d, Teredo)
// or are not the public internet (discard 100::/64, documentation) passed
// the check as "global unicast" before IPv6 was limited to 2000::/3 minus
// its special ranges: a proxy, or a host with a sit tunnel, may carry
// ::127.0.0.1 to the loopback.
func TestAttackMetadataProxyStillRefusesPrivate(t *testing.T) {
	proxy := newConnectProxy(t)
	pu, _ := url.Parse(proxy.srv.URL)
	h := newHarness(t, oauth.Options{MetadataProxy: pu})
	b := h.browser()
	for _, id := range []string{"https://localhost:9/client.json", "https://127.0.0.1:9/c.json", "https://[::ffff:10.0.0.1]:9/c.json", "https://100.64.0.1/c.json",
		"https://[::7f00:1]:9/c.json", "https://[::a00:1]/c.json", "https://[::ffff:0:7f00:1]:9/c.json", "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/c.json",
		"https://[100::1]/c.json", "https://[2001:db8::1]/c.json", "https://[3fff::1]/c.json", "https://[5f00::1]/c.json"} {
		r := b.do("GET", h.authorizeURL(client{id: id, redirect: "http://localhost:40006/callback", verifier: strings.Repeat("b", 50)}, nil), nil, nil)
		if r.status != 400 {
			t.Fatalf("%s: %d %s", id, r.status, r.body)
		}
	}
	if got := proxy.targets(); len(got) != 0 {
		t.Fatalf("HOLE: the proxy was asked to connect to %v", got)
	}
}

// The last good copy of a metadata document stands in while its host
// fails, but it must not keep a document alive that its publisher
// withdrew (the host answers 404 or 410), nor one syncd has not managed to
// fetch for over a week (whoever keeps syncd from the host would keep a
// changed document, a removed redirect URI, in force): the client is
// refused, at refresh and at /authorize, until a fetch succeeds again.
// Seen failing with every failed fetch served from the stored copy.
func TestAttackMetadataDocumentWithdrawnNotServedStale(t *testing.T) {
	d := newDocServer(t, false, "http://localhost/callback")
	h := newHarness(t, oauth.Options{AllowPrivateMetadataFetch: true})
	alice := h.enrol("alice")
	h.room("r", h.userID("alice"), "owner")
	c := client{id: d.id, redirect: "http://localhost:40007/callback", verifier: strings.Repeat("w", 50)}
	expire := func(fetchedAgo string) {
		t.Helper()
		if _, err := h.db.Exec(context.Background(), `UPDATE smcp_oauth_clients SET metadata = metadata
			|| jsonb_build_object('cimd_expires', now() - interval '1 second', 'cimd_fetched', now() - $1::interval)`, fetchedAgo); err != nil {
			t.Fatal(err)
		}
		h.s.ForgetClients()
	}
	refresh := func(rt string) reply {
		return h.token(c, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}})
	}
	for _, tc := range []struct {
		name       string
		status     int
		down       bool
		fetchedAgo string
	}{{"withdrawn (404)", 404, false, "1 minute"}, {"withdrawn (410)", 410, false, "1 minute"}, {"host down for 8 days", 0, true, "8 days"}} {
		d.status.Store(0)
		d.down.Store(false)
		expire("1 minute")
		loc := alice.consent(h.authorizeURL(c, nil), map[string]string{"r": "read"}, false)
		rt := h.exchange(c, loc.Query().Get("code")).json()["refresh_token"].(string)
		d.status.Store(int32(tc.status))
		d.down.Store(tc.down)
		expire(tc.fetchedAgo)
		if r := refresh(rt); r.status == 200 {
			t.Fatalf("HOLE (%s): the stored copy of the document still serves a refresh: %s", tc.name, r.body)
		}
		fetches := d.fetches.Load()
		h.s.ForgetClients()
		if r := alice.do("GET", h.authorizeURL(c, nil), nil, nil); r.status != 400 || !strings.Contains(r.body, "could not be fetched") {
			t.Fatalf("HOLE (%s): /authorize with the stored copy: %d %s", tc.name, r.status, r.body)
		}
		if d.fetches.Load() != fetches {
			t.Fatalf("%s: fetched again at once instead of after the retry wait", tc.name)
		}
		// Back: the next fetch serves again.
		d.status.Store(0)
		d.down.Store(false)
		expire("1 minute")
		if r := alice.do("GET", h.authorizeURL(c, nil), nil, nil); r.status != 200 {
			t.Fatalf("%s: the document is back but the client is still refused: %d %s", tc.name, r.status, r.body)
		}
	}
	// A copy stored before fetch times were kept still stands in for a
	// host that is down (it was fetched at most 24 h before it expired).
	loc := alice.consent(h.authorizeURL(c, nil), map[string]string{"r": "read"}, false)
	rt := h.exchange(c, loc.Query().Get("code")).json()["refresh_token"].(string)
	d.down.Store(true)
	if _, err := h.db.Exec(context.Background(), `UPDATE smcp_oauth_clients SET metadata = (metadata - 'cimd_fetched')
		|| jsonb_build_object('cimd_expires', now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	h.s.ForgetClients()
	if r := refresh(rt); r.status != 200 {
		t.Fatalf("a copy stored before fetch times were kept, host down: %d %s", r.status, r.body)
	}
}

// The built-in copies of Claude's documents stand in for their own exact
// client id URLs only: an id that merely resembles one is an attacker's
// document like any other, and with its host unreachable it is refused.
func TestAttackBuiltinMetadataDocumentExactIDOnly(t *testing.T) {
	h := newHarness(t, oauth.Options{})
	h.s.SendMetadataFetchesTo(deadAddr(t), nil)
	b := h.browser()
	for _, id := range []string{claudeCodeID + "/", claudeCodeID + "?v=2", claudeCodeID + "%20", "https://claude.ai.example.net/oauth/claude-code-client-metadata",
		"https://Claude.ai/oauth/claude-code-client-metadata", "https://claude.ai:443/oauth/claude-code-client-metadata", "http://claude.ai/oauth/claude-code-client-metadata",
		"https://claude.ai/oauth/Claude-Code-Client-Metadata", "https://claude.ai/oauth/../oauth/claude-code-client-metadata", "https://claude.com/oauth/mcp-oauth-client-metadata"} {
		r := b.do("GET", h.authorizeURL(client{id: id, redirect: "http://127.0.0.1:53682/callback", verifier: strings.Repeat("x", 50)}, nil), nil, nil)
		if r.status != 400 || !strings.Contains(r.body, "Unknown application") {
			t.Fatalf("HOLE: %s was served from a built-in copy: %d %s", id, r.status, r.body)
		}
	}
}

// A built-in copy allows the redirect URIs its document lists and no
// more: Claude Code's may not send the code to Claude.ai's callback, nor
// Claude.ai's to a loopback address, though the server's policy allows
// both.
func TestAttackBuiltinMetadataDocumentNoWiderRedirects(t *testing.T) {
	h := newHarness(t, oauth.Options{})
	h.s.SendMetadataFetchesTo(deadAddr(t), nil)
	alice := h.enrol("alice")
	for _, c := range []client{{id: claudeCodeID, redirect: "https://claude.ai/api/mcp/auth_callback"}, {id: claudeCodeID, redirect: "http://127.0.0.1:53682/other"},
		{id: claudeAIID, redirect: "http://localhost:41234/callback"}, {id: claudeAIID, redirect: "https://claude.ai/api/mcp/auth_callback/x"}} {
		c.verifier = strings.Repeat("y", 50)
		r := alice.do("GET", h.authorizeURL(c, nil), nil, nil)
		if r.status == 200 || r.header.Get("Location") != "" {
			t.Fatalf("HOLE: %s with redirect %s from the built-in copy: %d %v %s", c.id, c.redirect, r.status, r.header, r.body)
		}
	}
}

// A document actually fetched wins over the built-in copy: it replaces
// the built-in one as soon as a fetch succeeds, and while later fetches
// fail its stored copy (here narrower: 127.0.0.1 only) is what serves,
// not the built-in one. Seen failing with the built-in copy tried first.
func TestAttackFetchedMetadataDocumentBeatsBuiltin(t *testing.T) {
	var narrow atomic.Bool
	docs := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		uris := []string{"http://localhost/callback", "http://127.0.0.1/callback"}
		if narrow.Load() {
			uris = uris[1:]
		}
		w.Header().Set("Cache-Control", "max-age=3600")
		_ = json.NewEncoder(w).Encode(map[string]any{"client_id": claudeCodeID, "client_name": "Claude Code (fetched)", "redirect_uris": uris, "token_endpoint_auth_method": "none"})
	}))
	defer docs.Close()
	h := newHarness(t, oauth.Options{})
	dead := deadAddr(t)
	h.s.SendMetadataFetchesTo(dead, nil)
	alice := h.enrol("alice")
	lo := client{id: claudeCodeID, redirect: "http://localhost:41234/callback", verifier: strings.Repeat("z", 50)}
	ip := lo
	ip.redirect = "http://127.0.0.1:53682/callback"
	expire := func() {
		t.Helper()
		if _, err := h.db.Exec(context.Background(), `UPDATE smcp_oauth_clients SET metadata = jsonb_set(metadata, '{cimd_expires}', to_jsonb(now() - interval '1 second'))`); err != nil {
			t.Fatal(err)
		}
		h.s.ForgetClients()
	}
	if r := alice.do("GET", h.authorizeURL(lo, nil), nil, nil); r.status != 200 || strings.Contains(r.body, "(fetched)") {
		t.Fatalf("built-in copy while claude.ai is unreachable: %d %s", r.status, r.body)
	}
	// claude.ai answers again, now listing only 127.0.0.1.
	narrow.Store(true)
	h.s.SendMetadataFetchesTo(strings.TrimPrefix(docs.URL, "https://"), &tls.Config{InsecureSkipVerify: true})
	expire()
	if r := alice.do("GET", h.authorizeURL(ip, nil), nil, nil); r.status != 200 || !strings.Contains(r.body, "(fetched)") {
		t.Fatalf("the fetched document did not replace the built-in copy: %d %s", r.status, r.body)
	}
	// Unreachable again: the stored fetched copy serves, not the built-in.
	h.s.SendMetadataFetchesTo(dead, nil)
	expire()
	if r := alice.do("GET", h.authorizeURL(ip, nil), nil, nil); r.status != 200 || !strings.Contains(r.body, "(fetched)") {
		t.Fatalf("stored fetched copy while claude.ai is unreachable: %d %s", r.status, r.body)
	}
	if r := alice.do("GET", h.authorizeURL(lo, nil), nil, nil); r.status == 200 || r.header.Get("Location") != "" {
		t.Fatalf("HOLE: the built-in copy widened the fetched document's redirect URIs: %d %s", r.status, r.body)
	}
	// Even once the fetched copy is too old to stand in, the built-in one
	// allows only what the fetched one listed.
	if _, err := h.db.Exec(context.Background(), `UPDATE smcp_oauth_clients SET metadata = metadata || jsonb_build_object('cimd_fetched', now() - interval '8 days')`); err != nil {
		t.Fatal(err)
	}
	expire()
	if r := alice.do("GET", h.authorizeURL(lo, nil), nil, nil); r.status == 200 || r.header.Get("Location") != "" {
		t.Fatalf("HOLE: the built-in copy widened an old fetched document's redirect URIs: %d %s", r.status, r.body)
	}
	if r := alice.do("GET", h.authorizeURL(ip, nil), nil, nil); r.status != 200 {
		t.Fatalf("built-in copy within an old fetched document: %d %s", r.status, r.body)
	}
}

// claude.ai answering that the document is withdrawn (404, 410) or
// serving one that is not valid is an answer, not an outage: the built-in
// copy does not override it, whether or not it was serving before.
func TestAttackBuiltinMetadataDocumentDoesNotOverrideAnswer(t *testing.T) {
	var answer atomic.Value
	docs := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch a := answer.Load().(string); a {
		case "404", "410":
			http.Error(w, "gone", map[string]int{"404": 404, "410": 410}[a])
		default:
			_, _ = w.Write([]byte(`{"client_id": "` + claudeCodeID + `", "client_name": "Claude Code", "redirect_uris": []}`))
		}
	}))
	defer docs.Close()
	h := newHarness(t, oauth.Options{})
	dead := deadAddr(t)
	alice := h.enrol("alice")
	c := client{id: claudeCodeID, redirect: "http://127.0.0.1:53682/callback", verifier: strings.Repeat("q", 50)}
	for _, a := range []string{"404", "410", "invalid"} {
		if _, err := h.db.Exec(context.Background(), `DELETE FROM smcp_oauth_clients`); err != nil {
			t.Fatal(err)
		}
		h.s.ForgetClients()
		answer.Store(a)
		h.s.SendMetadataFetchesTo(strings.TrimPrefix(docs.URL, "https://"), &tls.Config{InsecureSkipVerify: true})
		if r := alice.do("GET", h.authorizeURL(c, nil), nil, nil); r.status != 400 {
			t.Fatalf("HOLE: claude.ai answering %s, nothing stored: the built-in copy served: %d %s", a, r.status, r.body)
		}
		// Served from the built-in copy first, then the host answers.
		if _, err := h.db.Exec(context.Background(), `DELETE FROM smcp_oauth_clients`); err != nil {
			t.Fatal(err)
		}
		h.s.ForgetClients()
		h.s.SendMetadataFetchesTo(dead, nil)
		if r := alice.do("GET", h.authorizeURL(c, nil), nil, nil); r.status != 200 {
			t.Fatalf("built-in copy while claude.ai is unreachable: %d %s", r.status, r.body)
		}
		h.s.SendMetadataFetchesTo(strings.TrimPrefix(docs.URL, "https://"), &tls.Config{InsecureSkipVerify: true})
		if _, err := h.db.Exec(context.Background(), `UPDATE smcp_oauth_clients SET metadata = jsonb_set(metadata, '{cimd_expires}', to_jsonb(now() - interval '1 second'))`); err != nil {
			t.Fatal(err)
		}
		h.s.ForgetClients()
		if r := alice.do("GET", h.authorizeURL(c, nil), nil, nil); r.status != 400 {
			t.Fatalf("HOLE: claude.ai answering %s after the built-in copy served: still served: %d %s", a, r.status, r.body)
		}
	}
}
