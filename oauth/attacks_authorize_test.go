package oauth_test

import (
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
// never asks the proxy for a non-public one.
func TestAttackMetadataProxyStillRefusesPrivate(t *testing.T) {
	proxy := newConnectProxy(t)
	pu, _ := url.Parse(proxy.srv.URL)
	h := newHarness(t, oauth.Options{MetadataProxy: pu})
	b := h.browser()
	for _, id := range []string{"https://localhost:9/client.json", "https://127.0.0.1:9/c.json", "https://[::ffff:10.0.0.1]:9/c.json", "https://100.64.0.1/c.json"} {
		r := b.do("GET", h.authorizeURL(client{id: id, redirect: "http://localhost:40006/callback", verifier: strings.Repeat("b", 50)}, nil), nil, nil)
		if r.status != 400 {
			t.Fatalf("%s: %d %s", id, r.status, r.body)
		}
	}
	if got := proxy.targets(); len(got) != 0 {
		t.Fatalf("HOLE: the proxy was asked to connect to %v", got)
	}
}
