package oauth_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/oauth"
)

// What Claude shows people depends on discovery: offline_access is among
// the supported scopes (both documents), the 401 challenge names the scope
// to ask for, and a state too short for fosite comes back to the client as
// a standard invalid_request saying what to change, with the issuer (RFC
// 9207), instead of fosite's invalid_state that clients do not explain.
func TestDiscoveryPolish(t *testing.T) {
	h := newHarness(t, oauth.Options{})
	for _, doc := range []string{"/.well-known/oauth-authorization-server", "/.well-known/oauth-protected-resource/mcp"} {
		res, err := http.Get(h.base + doc)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Scopes []string `json:"scopes_supported"`
		}
		_ = json.NewDecoder(res.Body).Decode(&m)
		res.Body.Close()
		if !slices.Contains(m.Scopes, "offline_access") {
			t.Errorf("%s scopes_supported %v lacks offline_access", doc, m.Scopes)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h.s.RequireBearer("", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	req, _ := http.NewRequest("POST", "/mcp", nil)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	if ch := rec.Header().Get("WWW-Authenticate"); rec.Code != 401 || !strings.Contains(ch, `scope="rooms:* create_rooms offline_access"`) || !strings.Contains(ch, "resource_metadata=") {
		t.Errorf("401 challenge %d %q", rec.Code, ch)
	}

	c := h.register("none", "http://localhost/callback")
	r := h.browser().do("GET", h.authorizeURL(c, url.Values{"state": {"abc"}}), nil, nil)
	loc, _ := url.Parse(r.header.Get("Location"))
	if r.status/100 != 3 || loc == nil || loc.Host != "localhost" {
		t.Fatalf("short state: %d %v %s", r.status, r.header, r.body)
	}
	q := loc.Query()
	if q.Get("error") != "invalid_request" || !strings.Contains(q.Get("error_description"), "at least 8 characters") || q.Get("state") != "abc" || q.Get("iss") != h.base {
		t.Fatalf("short state redirect: %s", loc)
	}
}
