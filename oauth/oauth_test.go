package oauth_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/descope/virtualwebauthn"

	"github.com/syncsubstrate/sync/oauth"
	"github.com/syncsubstrate/sync/oauth/oauthtest"
	"github.com/syncsubstrate/sync/substrate"
)

func TestDiscovery(t *testing.T) {
	h := newHarness(t, oauth.Options{})
	b := h.browser()
	m := b.do("GET", "/.well-known/oauth-authorization-server", nil, nil).json()
	if m["issuer"] != h.base || m["registration_endpoint"] != h.base+"/register" || m["authorization_response_iss_parameter_supported"] != true {
		t.Fatalf("metadata %v", m)
	}
	if got := m["code_challenge_methods_supported"].([]any); len(got) != 1 || got[0] != "S256" {
		t.Fatalf("PKCE methods %v", got)
	}
	if !strings.Contains(strings.Join(anyStrings(m["token_endpoint_auth_methods_supported"]), " "), "none") {
		t.Fatalf("auth methods %v", m["token_endpoint_auth_methods_supported"])
	}
	for _, p := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
		prm := b.do("GET", p, nil, nil).json()
		if prm["resource"] != h.base+"/mcp" || anyStrings(prm["authorization_servers"])[0] != h.base {
			t.Fatalf("%s: %v", p, prm)
		}
	}
}

func anyStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// SYNC_REDIRECT_ALLOW's "prefix*" entries were matched as string prefixes,
// so "https://app.example.com*" also allowed https://app.example.com.evil.net.
// They match on origin, then path.
func TestAttackRedirectAllowPrefix(t *testing.T) {
	h := newHarness(t, oauth.Options{RedirectAllowList: []string{"https://app.example.com*", "https://ok.example/cb/*"}})
	b := h.browser()
	for u, want := range map[string]int{
		"https://app.example.com/cb":             201,
		"https://app.example.com":                201,
		"https://APP.example.com/x":              201,
		"https://app.example.com.evil.net/cb":    400,
		"https://app.example.com@evil.net/cb":    400,
		"https://app.example.com:8443/cb":        400,
		"http://app.example.com/cb":              400,
		"https://ok.example/cb/done":             201,
		"https://ok.example/cbevil":              400,
		"https://ok.example/cb/../../elsewhere/": 400,
	} {
		r := b.postJSON("/register", map[string]any{"redirect_uris": []string{u}, "client_name": "App", "token_endpoint_auth_method": "none"})
		if r.status != want {
			t.Errorf("%s: %d, want %d: %s", u, r.status, want, r.body)
		}
	}
}

func TestRegistrationPolicy(t *testing.T) {
	h := newHarness(t, oauth.Options{RedirectAllowList: []string{"https://app.example/cb"}})
	b := h.browser()
	good := []string{"https://claude.ai/api/mcp/auth_callback", "https://claude.com/api/mcp/auth_callback",
		"http://localhost:53682/callback", "http://127.0.0.1:9/cb", "http://[::1]:8/cb", "https://app.example/cb"}
	for _, u := range good {
		// Twice in a row, as Claude does: both must succeed.
		for i := 0; i < 2; i++ {
			if r := b.postJSON("/register", map[string]any{"redirect_uris": []string{u}, "client_name": "Claude", "token_endpoint_auth_method": "none"}); r.status != 201 {
				t.Fatalf("%s refused: %d %s", u, r.status, r.body)
			}
		}
	}
	bad := []string{"https://evil.example/cb", "http://claude.ai/api/mcp/auth_callback", "http://10.0.0.1/cb", "javascript:alert(1)", "https://app.example/cb2"}
	for _, u := range bad {
		r := b.postJSON("/register", map[string]any{"redirect_uris": []string{u}})
		if r.status != 400 || r.json()["error"] != "invalid_redirect_uri" {
			t.Errorf("%s accepted: %d %s", u, r.status, r.body)
		}
	}
	r := b.postJSON("/register", map[string]any{"redirect_uris": []string{good[0]}, "token_endpoint_auth_method": "client_secret_post"})
	if r.status != 201 || !strings.HasPrefix(r.json()["client_secret"].(string), "secret_") {
		t.Fatalf("confidential client: %s", r.body)
	}
}

// userID looks a user up by name.
func (h *harness) userID(name string) string {
	var id string
	if err := h.db.QueryRow(context.Background(), `SELECT id FROM smcp_users WHERE username = $1`, name).Scan(&id); err != nil {
		h.t.Fatal(err)
	}
	return id
}

func (h *harness) room(id, owner, access string) {
	h.t.Helper()
	if _, err := h.db.Exec(context.Background(), `INSERT INTO rooms (id, token_hash, view_token_hash) VALUES ($1, $2, $3)`,
		id, []byte("t-"+id), []byte("v-"+id)); err != nil {
		h.t.Fatal(err)
	}
	if err := h.lob.AddMember(context.Background(), owner, id, access, "", ""); err != nil {
		h.t.Fatal(err)
	}
}

func TestAuthorizationCodeFlow(t *testing.T) {
	// Generous enough that a loaded 2-core machine stays within it.
	h := newHarness(t, oauth.Options{})
	alice := h.enrol("alice")
	uid := h.userID("alice")
	h.room("plans", uid, "owner")
	h.room("watch", uid, "observer")
	// Registered without a port; used with one (RFC 8252 loopback).
	c := h.register("none", "http://localhost/callback")
	c.redirect = "http://localhost:43123/callback"

	loc := alice.consent(h.authorizeURL(c, nil), map[string]string{"plans": "write", "watch": "read"}, true)
	q := loc.Query()
	if loc.Host != "localhost:43123" || q.Get("code") == "" || q.Get("state") != "state-12345678" || q.Get("iss") != h.base {
		t.Fatalf("redirect %s", loc)
	}
	tok := h.exchange(c, q.Get("code"))
	m := tok.json()
	if tok.status != 200 || m["refresh_token"] == nil || m["token_type"] != "bearer" || m["expires_in"] == nil {
		t.Fatalf("token response: %d %s", tok.status, tok.body)
	}
	if !strings.Contains(tok.header.Get("Cache-Control"), "no-store") {
		t.Fatalf("token response cache control %q", tok.header.Get("Cache-Control"))
	}
	scope := strings.Fields(m["scope"].(string))
	if strings.Join(sorted(scope), " ") != "create_rooms rooms:plans:write rooms:watch:read" {
		t.Fatalf("scope %v", scope)
	}
	info, err := h.s.Verify(context.Background(), m["access_token"].(string))
	if err != nil || info.UserID != uid || info.ClientID != c.id || info.GrantID == "" {
		t.Fatalf("verify: %+v %v", info, err)
	}

	// Refresh rotates; the grant id survives.
	refresh := func(rt string) (reply, map[string]any) {
		r := h.token(c, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}})
		return r, r.json()
	}
	first := m["refresh_token"].(string)
	r1, m1 := refresh(first)
	if r1.status != 200 || m1["refresh_token"] == first {
		t.Fatalf("refresh: %d %s", r1.status, r1.body)
	}
	info2, err := h.s.Verify(context.Background(), m1["access_token"].(string))
	if err != nil || info2.GrantID != info.GrantID {
		t.Fatalf("grant id changed on refresh: %v vs %v (%v)", info2, info, err)
	}
	// The previous refresh token keeps working, however long after, until
	// its successor is used: a client that lost the response (or a second
	// process of it) replays it and stays connected.
	if _, err := h.db.Exec(context.Background(), `UPDATE smcp_oauth_tokens SET rotated_at = now() - interval '1 day' WHERE kind = 'refresh' AND rotated_at IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	r2, m2 := refresh(first)
	if r2.status != 200 {
		t.Fatalf("replay of the previous refresh token before its successor was used: %d %s", r2.status, r2.body)
	}
	// Using a successor ends the previous token's grace…
	if r, _ := refresh(m1["refresh_token"].(string)); r.status != 200 {
		t.Fatalf("refresh with the successor: %d %s", r.status, r.body)
	}
	// …and its reuse then revokes the whole grant, which the account page
	// explains.
	if r3, m3 := refresh(first); r3.status != 400 || m3["error"] != "invalid_grant" {
		t.Fatalf("reuse after the successor was used: %d %s", r3.status, r3.body)
	}
	if _, err := h.s.Verify(context.Background(), m2["access_token"].(string)); !errors.Is(err, oauth.ErrInvalidToken) {
		t.Fatalf("grant not revoked after refresh reuse: %v", err)
	}
	if page := alice.do("GET", "/account", nil, nil).body; !strings.Contains(page, "Ended connections") || !strings.Contains(page, "previous refresh token was used again") {
		t.Fatalf("the account page does not say why the connection ended:\n%s", page)
	}

	// A returning client sees its previous choices pre-selected.
	page := alice.do("GET", h.authorizeURL(c, nil), nil, nil).body
	if !strings.Contains(page, `value="plans" checked`) || strings.Contains(page, `value="watch" checked`) == false {
		t.Fatalf("previous choices not pre-selected")
	}
	// The observer role caps the level.
	form := url.Values{"decision": {"allow"}, "room": {"watch"}, "level_watch": {"write"}}
	if r := alice.postForm(h.authorizeURL(c, nil), form, nil); r.status != 400 {
		t.Fatalf("observer granted write: %d", r.status)
	}
	// A client without state still works with PKCE; no state comes back.
	loc = alice.consent(h.authorizeURL(c, url.Values{"state": {""}}), map[string]string{"plans": "read"}, false)
	if loc.Query().Get("code") == "" || loc.Query().Has("state") {
		t.Fatalf("stateless authorize: %s", loc)
	}
	// Revocation (RFC 7009) ends a token at once.
	tok = h.exchange(c, loc.Query().Get("code"))
	at := tok.json()["access_token"].(string)
	if r := h.browser().postForm("/revoke", url.Values{"token": {at}, "client_id": {c.id}}, nil); r.status != 200 {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if _, err := h.s.Verify(context.Background(), at); err == nil {
		t.Fatal("revoked token still verifies")
	}
	// The account page says who ended each connection.
	loc = alice.consent(h.authorizeURL(c, nil), map[string]string{"plans": "read"}, false)
	mine, err := h.s.Verify(context.Background(), h.exchange(c, loc.Query().Get("code")).json()["access_token"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if r := alice.postForm("/account/revoke", url.Values{"grant": {mine.GrantID}}, nil); r.status/100 != 3 {
		t.Fatalf("revoke on the account page: %d %s", r.status, r.body)
	}
	page = alice.do("GET", "/account", nil, nil).body
	for _, why := range []string{"the application revoked it", "you revoked it on this page", "previous refresh token was used again"} {
		if !strings.Contains(page, why) {
			t.Errorf("the account page does not say %q", why)
		}
	}
}

func sorted(xs []string) []string {
	out := append([]string{}, xs...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// Attacks that must fail.
func TestAttacks(t *testing.T) {
	// Codes live 3 s here: every other case exchanges its code well
	// within that on a loaded machine; "expired code" waits it out.
	h := newHarness(t, oauth.Options{AuthorizeCodeTTL: 3 * time.Second})
	alice := h.enrol("alice")
	h.room("r", h.userID("alice"), "owner")
	c := h.register("none", "http://127.0.0.1:5000/cb")
	conf := h.register("client_secret_post", "http://127.0.0.1:5000/cb")

	errorOf := func(r reply) string {
		if loc := r.header.Get("Location"); loc != "" {
			u, _ := url.Parse(loc)
			return u.Query().Get("error")
		}
		return r.json()["error"].(string)
	}
	// /signin?next=%2F%09%2Fevil.example landed on http://evil.example/:
	// browsers drop the tab. next must be a same-origin path.
	t.Run("open redirect after sign-in", func(t *testing.T) {
		anon := h.browser()
		for next, want := range map[string]string{
			"/\t/evil.example":           "/account",
			"/\n/evil.example":           "/account",
			"/\\evil.example":            "/account",
			"//evil.example":             "/account",
			"https://evil.example/":      "/account",
			"/%09/evil.example":          "/%09/evil.example", // stays a path once decoded by the browser
			"javascript:alert(1)":        "/account",
			"/authorize?client_id=x&a=b": "/authorize?client_id=x&amp;a=b",
			"/account":                   "/account",
		} {
			r := anon.do("GET", "/signin?next="+url.QueryEscape(next), nil, nil)
			if got := between(r.body, `data-next="`, `"`); got != want {
				t.Errorf("next %q rendered as %q, want %q", next, got, want)
			}
		}
	})
	t.Run("missing PKCE", func(t *testing.T) {
		r := alice.do("GET", h.authorizeURL(c, url.Values{"code_challenge": {""}, "code_challenge_method": {""}}), nil, nil)
		if errorOf(r) != "invalid_request" {
			t.Fatalf("%d %v %s", r.status, r.header, r.body)
		}
	})
	t.Run("plain PKCE", func(t *testing.T) {
		r := alice.do("GET", h.authorizeURL(c, url.Values{"code_challenge_method": {"plain"}}), nil, nil)
		if errorOf(r) != "invalid_request" {
			t.Fatalf("%d %v", r.status, r.header)
		}
	})
	t.Run("wrong verifier", func(t *testing.T) {
		code := alice.consent(h.authorizeURL(c, nil), map[string]string{"r": "read"}, false).Query().Get("code")
		bad := c
		bad.verifier = strings.Repeat("x", 50)
		if r := h.exchange(bad, code); r.status != 400 || r.json()["error"] != "invalid_grant" {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
	t.Run("code reuse revokes the grant", func(t *testing.T) {
		code := alice.consent(h.authorizeURL(c, nil), map[string]string{"r": "read"}, false).Query().Get("code")
		first := h.exchange(c, code)
		if first.status != 200 {
			t.Fatalf("first exchange %s", first.body)
		}
		if r := h.exchange(c, code); r.status != 400 || r.json()["error"] != "invalid_grant" {
			t.Fatalf("reuse: %d %s", r.status, r.body)
		}
		if _, err := h.s.Verify(context.Background(), first.json()["access_token"].(string)); err == nil {
			t.Fatal("token from a reused code still valid")
		}
	})
	t.Run("unregistered redirect", func(t *testing.T) {
		r := alice.do("GET", h.authorizeURL(c, url.Values{"redirect_uri": {"https://evil.example/cb"}}), nil, nil)
		if r.status < 400 || strings.Contains(r.header.Get("Location"), "evil.example") {
			t.Fatalf("%d %v", r.status, r.header)
		}
	})
	t.Run("unknown client", func(t *testing.T) {
		ghost := c
		ghost.id = "client_nope"
		if r := alice.do("GET", h.authorizeURL(ghost, nil), nil, nil); r.status != 400 {
			t.Fatalf("authorize: %d", r.status)
		}
		if r := h.exchange(ghost, "whatever"); r.status != 401 || r.json()["error"] != "invalid_client" {
			t.Fatalf("token: %d %s", r.status, r.body)
		}
	})
	t.Run("wrong client secret", func(t *testing.T) {
		code := alice.consent(h.authorizeURL(conf, nil), map[string]string{"r": "read"}, false).Query().Get("code")
		bad := conf
		bad.secret = "secret_wrong"
		if r := h.exchange(bad, code); r.status != 401 || r.json()["error"] != "invalid_client" {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if r := h.exchange(conf, code); r.status != 200 {
			t.Fatalf("right secret: %d %s", r.status, r.body)
		}
	})
	t.Run("expired code", func(t *testing.T) {
		code := alice.consent(h.authorizeURL(c, nil), map[string]string{"r": "read"}, false).Query().Get("code")
		time.Sleep(3200 * time.Millisecond) // Stays: the code's lifetime passing on the real clock is what this checks
		if r := h.exchange(c, code); r.status != 400 || r.json()["error"] != "invalid_grant" {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
	t.Run("wrong resource", func(t *testing.T) {
		r := alice.do("GET", h.authorizeURL(c, url.Values{"resource": {"https://elsewhere.example/mcp"}}), nil, nil)
		if errorOf(r) != "invalid_target" {
			t.Fatalf("%d %v", r.status, r.header)
		}
	})
	t.Run("token for another audience", func(t *testing.T) {
		code := alice.consent(h.authorizeURL(c, nil), map[string]string{"r": "read"}, false).Query().Get("code")
		at := h.exchange(c, code).json()["access_token"].(string)
		other, err := oauth.New(context.Background(), h.db, oauth.Options{PublicURL: "https://other.example", Rooms: h.lob})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Verify(context.Background(), at); !errors.Is(err, oauth.ErrWrongAudience) {
			t.Fatalf("token accepted by another resource: %v", err)
		}
	})
	t.Run("cross-site consent post", func(t *testing.T) {
		form := url.Values{"decision": {"allow"}, "room": {"r"}, "level_r": {"admin"}}
		r := alice.postForm(h.authorizeURL(c, nil), form, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"})
		if r.status != 403 || r.header.Get("Location") != "" {
			t.Fatalf("%d %v", r.status, r.header)
		}
	})
	t.Run("replayed assertion", func(t *testing.T) {
		b := alice
		assertion := b.assertion(b.rp)
		if r := b.postJSON("/webauthn/login/finish", assertion); r.status != 200 {
			t.Fatalf("first sign-in %d %s", r.status, r.body)
		}
		if r := b.postJSON("/webauthn/login/finish", assertion); r.status == 200 {
			t.Fatal("replayed assertion accepted (same ceremony)")
		}
		b.postJSON("/webauthn/login/begin", nil) // a new ceremony, old answer
		if r := b.postJSON("/webauthn/login/finish", assertion); r.status == 200 {
			t.Fatal("replayed assertion accepted (new ceremony)")
		}
	})
	t.Run("assertion from another origin", func(t *testing.T) {
		evil := virtualwebauthn.RelyingParty{ID: "localhost", Name: "sync", Origin: "http://evil.example"}
		if r := alice.postJSON("/webauthn/login/finish", alice.assertion(evil)); r.status != 401 {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
	t.Run("enrolment link reused", func(t *testing.T) {
		link, err := h.s.InviteURL(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		tok := strings.SplitN(link, "invite=", 2)[1]
		if r := h.browser().signup("bob", tok); r.status != 200 {
			t.Fatalf("first use: %d %s", r.status, r.body)
		}
		if r := h.browser().signup("carol", tok); r.status != 403 {
			t.Fatalf("second use: %d %s", r.status, r.body)
		}
	})
	t.Run("signed-in sign-in works", func(t *testing.T) {
		if r := alice.signin(); r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
}

// A recovery code adds a new passkey once; the old passkey keeps working;
// the last passkey cannot be removed.
func TestRecoveryAndPasskeys(t *testing.T) {
	h := newHarness(t, oauth.Options{})
	alice := h.browser()
	link, _ := h.s.EnsureEnrolment(context.Background())
	r := alice.signup("alice", strings.SplitN(link, "invite=", 2)[1])
	codes := anyStrings(r.json()["recovery_codes"])
	if len(codes) != 10 {
		t.Fatalf("codes %v", codes)
	}
	// Removing the only passkey is refused.
	var id string
	if err := h.db.QueryRow(context.Background(), `SELECT encode(id, 'base64') FROM smcp_credentials`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if r := alice.postForm("/account/passkeys/delete", url.Values{"id": {strings.TrimRight(strings.NewReplacer("+", "-", "/", "_").Replace(id), "=")}}, nil); r.status != 409 {
		t.Fatalf("last passkey removed: %d", r.status)
	}

	// A new device: recover with a code, through the real endpoints.
	lost := h.browser()
	recoverWith := func(code string) reply {
		r := lost.postJSON("/webauthn/recover/begin", map[string]string{"username": "alice", "code": code})
		if r.status != 200 {
			return r
		}
		opts, err := virtualwebauthn.ParseAttestationOptions(r.body)
		if err != nil {
			t.Fatal(err)
		}
		lost.auth = virtualwebauthn.NewAuthenticatorWithOptions(virtualwebauthn.AuthenticatorOptions{UserHandle: []byte(opts.UserID)})
		lost.cred = oauthtest.NewCredential()
		att := virtualwebauthn.CreateAttestationResponse(lost.rp, lost.auth, lost.cred, *opts)
		lost.auth.AddCredential(lost.cred)
		return lost.postJSON("/webauthn/add/finish", att)
	}
	if r := recoverWith("nope-nope"); r.status != 401 {
		t.Fatalf("bad code: %d %s", r.status, r.body)
	}
	if r := recoverWith(codes[0]); r.status != 200 {
		t.Fatalf("recovery: %d %s", r.status, r.body)
	}
	if r := recoverWith(codes[0]); r.status != 401 {
		t.Fatalf("code used twice: %d %s", r.status, r.body)
	}
	// Both passkeys sign in.
	if r := lost.signin(); r.status != 200 {
		t.Fatalf("new passkey: %d %s", r.status, r.body)
	}
	if r := alice.signin(); r.status != 200 {
		t.Fatalf("old passkey: %d %s", r.status, r.body)
	}
	if page := alice.do("GET", "/account", nil, nil).body; strings.Count(page, `action="/account/passkeys/delete"`) != 2 {
		t.Fatal("account page does not list two passkeys")
	}
}

// The account page's room actions: create, claim with a room token, share
// with a role, leave, delete.
func TestAccountRooms(t *testing.T) {
	h := newHarness(t, oauth.Options{})
	alice := h.enrol("alice")
	bobTok, _ := h.s.InviteURL(context.Background(), "")
	bob := h.browser()
	if r := bob.signup("bob", strings.SplitN(bobTok, "invite=", 2)[1]); r.status != 200 {
		t.Fatalf("bob: %s", r.body)
	}
	ok := func(r reply) {
		t.Helper()
		if r.status != 303 {
			t.Fatalf("room action: %d %s", r.status, r.body)
		}
	}
	ok(alice.postForm("/account/rooms/create", url.Values{"room": {"garden"}, "label": {"The garden"}}, nil))
	if page := alice.do("GET", "/account", nil, nil).body; !strings.Contains(page, "The garden") || !strings.Contains(page, "you are owner") {
		t.Fatal("created room not listed as owned")
	}
	// Claim a room made over REST with its token; a wrong token fails.
	made, err := h.svc.CreateRoom(context.Background(), substrate.CreateRoomRequest{ID: "rest-room"})
	if err != nil {
		t.Fatal(err)
	}
	if r := alice.postForm("/account/rooms/claim", url.Values{"room": {"rest-room"}, "token": {"room_wrong"}}, nil); r.status != 403 {
		t.Fatalf("claim with a wrong token: %d", r.status)
	}
	ok(alice.postForm("/account/rooms/claim", url.Values{"room": {"rest-room"}, "token": {made.Token}}, nil))
	// Claiming may replace the pasted room token: the new one is shown
	// once, the old one is dead.
	rotated, err := h.svc.CreateRoom(context.Background(), substrate.CreateRoomRequest{ID: "leaked-room"})
	if err != nil {
		t.Fatal(err)
	}
	if page := alice.do("GET", "/account", nil, nil).body; !strings.Contains(page, `name="rotate"`) {
		t.Fatal("the claim form offers no rotation")
	}
	r := alice.postForm("/account/rooms/claim", url.Values{"room": {"leaked-room"}, "token": {rotated.Token}, "rotate": {"1"}}, nil)
	if r.status != 303 {
		t.Fatalf("claim with rotation: %d %s", r.status, r.body)
	}
	if r = alice.do("GET", r.header.Get("Location"), nil, nil); r.status != 200 || !strings.Contains(r.body, `id="room-token">room_`) || strings.Contains(r.body, rotated.Token) {
		t.Fatalf("claim with rotation: %d %s", r.status, r.body)
	}
	if _, err := h.svc.AuthenticateIn(context.Background(), "leaked-room", rotated.Token); err == nil {
		t.Fatal("the pasted room token still works after a rotating claim")
	}
	// Her first room is her default; "Make default" moves it, only to a
	// room of hers.
	isDefault := func(room string) bool {
		var d bool
		_ = h.db.QueryRow(context.Background(), `SELECT is_default FROM smcp_user_rooms WHERE user_id = $1 AND room_id = $2`, h.userID("alice"), room).Scan(&d)
		return d
	}
	if !isDefault("garden") || isDefault("rest-room") || !strings.Contains(alice.do("GET", "/account", nil, nil).body, "your default room") {
		t.Fatal("the first room is not the default")
	}
	ok(alice.postForm("/account/rooms/default", url.Values{"room": {"rest-room"}}, nil))
	if isDefault("garden") || !isDefault("rest-room") {
		t.Fatal("make default did not move the default")
	}
	if r := bob.postForm("/account/rooms/default", url.Values{"room": {"garden"}}, nil); r.status != 404 {
		t.Fatalf("default on a room not yours: %d", r.status)
	}
	// Share with bob; bob cannot share or delete it; bob leaves.
	ok(alice.postForm("/account/rooms/share", url.Values{"room": {"garden"}, "username": {"bob"}, "access": {"observer"}}, nil))
	if page := bob.do("GET", "/account", nil, nil).body; !strings.Contains(page, "you are observer") {
		t.Fatal("shared room not on bob's page")
	}
	if r := bob.postForm("/account/rooms/delete", url.Values{"room": {"garden"}, "confirm": {"garden"}}, nil); r.status != 403 {
		t.Fatalf("observer deleted the room: %d", r.status)
	}
	if r := alice.postForm("/account/rooms/leave", url.Values{"room": {"garden"}}, nil); r.status != 409 || !strings.Contains(r.body, "keeps an owner") {
		t.Fatalf("last owner left: %d", r.status)
	}
	ok(bob.postForm("/account/rooms/leave", url.Values{"room": {"garden"}}, nil))
	ok(alice.postForm("/account/rooms/delete", url.Values{"room": {"garden"}, "confirm": {"garden"}}, nil))
	var n int
	_ = h.db.QueryRow(context.Background(), `SELECT count(*) FROM rooms WHERE id = 'garden'`).Scan(&n)
	if n != 0 {
		t.Fatal("deleted room still exists")
	}
}

// A client identified by a metadata document URL (how Claude prefers to
// connect): fetched, checked, cached; and never fetched from a private
// address unless the operator allowed it.
func TestClientMetadataDocument(t *testing.T) {
	var docURL string
	var fetches atomic.Int32 // the document server's handler runs on its own goroutines
	doc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Header().Set("Cache-Control", "max-age=3600")
		_ = json.NewEncoder(w).Encode(map[string]any{"client_id": docURL, "client_name": "Claude Code",
			"redirect_uris": []string{"http://localhost/callback", "http://127.0.0.1/callback"}, "token_endpoint_auth_method": "none"})
	}))
	defer doc.Close()
	docURL = doc.URL + "/oauth/client.json"

	h := newHarness(t, oauth.Options{AllowPrivateMetadataFetch: true})
	alice := h.enrol("alice")
	h.room("r", h.userID("alice"), "owner")
	c := client{id: docURL, redirect: "http://127.0.0.1:61234/callback", verifier: strings.Repeat("w", 50)}
	loc := alice.consent(h.authorizeURL(c, nil), map[string]string{"r": "write"}, false)
	tok := h.exchange(c, loc.Query().Get("code"))
	if tok.status != 200 || tok.json()["scope"] != "rooms:r:write" {
		t.Fatalf("exchange: %d %s", tok.status, tok.body)
	}
	if n := fetches.Load(); n != 1 {
		t.Fatalf("document fetched %d times, want 1 (cached)", n)
	}
	// A document that lies about its client_id is refused.
	lying := client{id: doc.URL + "/other.json", redirect: c.redirect, verifier: c.verifier}
	if r := alice.do("GET", h.authorizeURL(lying, nil), nil, nil); r.status != 400 {
		t.Fatalf("mismatched client_id accepted: %d", r.status)
	}

	// Without the operator's permission, loopback and private addresses
	// are never fetched (SSRF guard).
	strict := newHarness(t, oauth.Options{})
	bob := strict.enrol("bob")
	r := bob.do("GET", strict.authorizeURL(client{id: docURL, redirect: c.redirect, verifier: c.verifier}, nil), nil, nil)
	if r.status != 400 || !strings.Contains(r.body, "metadata") {
		t.Fatalf("private metadata URL fetched: %d %s", r.status, r.body)
	}
}

// Unauthenticated endpoints are rate limited per address.
func TestRateLimit(t *testing.T) {
	h := newHarness(t, oauth.Options{RatePerSecond: 1})
	b := h.browser()
	limited := false
	for i := 0; i < 10 && !limited; i++ {
		r := b.postJSON("/register", map[string]any{"redirect_uris": []string{"http://localhost/cb"}, "token_endpoint_auth_method": "none"})
		limited = r.status == 429 && r.header.Get("Retry-After") != "" && r.json()["error"] == "rate_limited"
	}
	if !limited {
		t.Fatal("10 registrations at 1/s (burst 3) were never limited")
	}
}

// Every endpoint a stranger can call without an account is limited per
// address: registration, the token and revocation endpoints, and the
// passkey ceremonies of sign-up, sign-in and recovery (each one costs a
// database round trip or a challenge kept server-side).
func TestRateLimitPerEndpoint(t *testing.T) {
	h := newHarness(t, oauth.Options{RatePerSecond: 1})
	same := map[string]string{"Origin": h.base, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}
	for _, path := range []string{"/register", "/token", "/revoke", "/webauthn/signup/begin", "/webauthn/login/begin", "/webauthn/recover/begin"} {
		// The budget is the address's, shared by the endpoints: one that is
		// not limited would never answer 429, however spent it is.
		t.Run(path, func(t *testing.T) {
			b := h.browser()
			limited := false
			for i := 0; i < 10 && !limited; i++ {
				var r reply
				if path == "/token" || path == "/revoke" {
					r = b.postForm(path, url.Values{"grant_type": {"authorization_code"}, "token": {"x"}}, nil)
				} else {
					r = b.do("POST", path, strings.NewReader(`{}`), same)
				}
				limited = r.status == 429 && r.header.Get("Retry-After") != ""
			}
			if !limited {
				t.Fatalf("10 requests to %s at 1/s were never limited", path)
			}
		})
	}
}

// between returns the text of s between the first open and the next close.
func between(s, open, close string) string {
	_, rest, ok := strings.Cut(s, open)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, close)
	return v
}

// The account page at issue 42 (bug 10): it has the site's header (skip
// link, nav) as the lobby has; an invite link is shown in the answer to
// its form, never put in the page's URL (browser history, access logs);
// sharing offers participant first, as the lobby does; Delete is not a
// button like Leave: it is red, behind a confirmation the server checks.
func TestAccountPageHeaderInviteShareAndDelete(t *testing.T) {
	h := newHarness(t, oauth.Options{})
	alice := h.enrol("alice")
	page := alice.do("GET", "/account", nil, nil).body
	for _, want := range []string{`<a class="skip" href="#main">Skip to content</a>`, `<nav aria-label="Site"><a href="/">Lobby</a>`, `<main id="main"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the account page lacks %q", want)
		}
	}
	r := alice.postForm("/account/invite", url.Values{}, nil)
	if strings.Contains(r.header.Get("Location"), "invite") {
		t.Errorf("HOLE: the invite secret goes into a URL: Location %s", r.header.Get("Location"))
	}
	if r.status != 200 || !strings.Contains(r.body, "/signup?invite=") {
		t.Errorf("the invite form's answer does not show the link: %d", r.status)
	}
	if r := alice.postForm("/account/rooms/create", url.Values{"room": {"garden"}}, nil); r.status != 303 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	page = alice.do("GET", "/account", nil, nil).body
	if !strings.Contains(page, `<select id="access-garden" name="access"><option selected>participant</option>`) {
		t.Error("sharing does not offer participant first")
	}
	for _, want := range []string{`<details class="danger"><summary>Delete…</summary>`, `name="confirm" value="garden" required`, `<button class="danger">Delete room garden</button>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the delete form lacks %q", want)
		}
	}
	// Without the box ticked, nothing is deleted.
	if r := alice.postForm("/account/rooms/delete", url.Values{"room": {"garden"}}, nil); r.status != 400 {
		t.Errorf("an unconfirmed delete: %d", r.status)
	}
	var n int
	_ = h.db.QueryRow(context.Background(), `SELECT count(*) FROM rooms WHERE id = 'garden'`).Scan(&n)
	if n != 1 {
		t.Fatal("an unconfirmed delete deleted the room")
	}
}
