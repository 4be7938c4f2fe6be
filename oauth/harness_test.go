package oauth_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/descope/virtualwebauthn"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/oauth"
	"github.com/syncsubstrate/sync/oauth/oauthtest"
	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

type harness struct {
	svc  *substrate.Service
	t    *testing.T
	base string
	srv  *httptest.Server
	s    *oauth.Server
	db   *store.DB
	lob  *lobby.Lobby
	// scriptDelay, when set, holds back the pages' script (a loaded
	// machine, a slow network): a page is shown before its buttons work.
	scriptDelay *atomic.Int64
}

func newHarness(t *testing.T, opt oauth.Options) *harness {
	t.Helper()
	db := pgtest.New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://localhost:" + strings.Split(ln.Addr().String(), ":")[1]
	svc := substrate.New(db, substrate.Options{})
	t.Cleanup(svc.Close)
	lob := lobby.New(db, svc)
	opt.PublicURL = base
	opt.Rooms = lob
	if opt.RatePerSecond == 0 {
		opt.RatePerSecond = -1 // the tests come from one address
	}
	s, err := oauth.New(context.Background(), db, opt)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Routes(mux)
	delay := new(atomic.Int64)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := time.Duration(delay.Load()); d > 0 && strings.HasSuffix(r.URL.Path, ".js") {
			time.Sleep(d) // Stays: a deliberately slow upstream (scripts served late)
		}
		mux.ServeHTTP(w, r)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return &harness{t: t, base: base, srv: srv, s: s, db: db, lob: lob, svc: svc, scriptDelay: delay}
}

// browser is a cookie-keeping HTTP client that does not follow redirects,
// with a software passkey authenticator.
type browser struct {
	h    *harness
	c    *http.Client
	auth virtualwebauthn.Authenticator
	cred virtualwebauthn.Credential
	rp   virtualwebauthn.RelyingParty
}

func (h *harness) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{h: h, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		rp: virtualwebauthn.RelyingParty{ID: "localhost", Name: "sync", Origin: h.base}}
}

type reply struct {
	status int
	header http.Header
	body   string
}

func (r reply) json() map[string]any {
	var m map[string]any
	_ = json.Unmarshal([]byte(r.body), &m)
	return m
}

func (b *browser) do(method, path string, body io.Reader, hdr map[string]string) reply {
	b.h.t.Helper()
	u := path
	if strings.HasPrefix(path, "/") {
		u = b.h.base + path
	}
	req, _ := http.NewRequest(method, u, body)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := b.c.Do(req)
	if err != nil {
		b.h.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return reply{res.StatusCode, res.Header, string(raw)}
}

func (b *browser) postJSON(path string, v any) reply {
	var buf []byte
	switch x := v.(type) {
	case string:
		buf = []byte(x)
	default:
		buf, _ = json.Marshal(v)
	}
	return b.do("POST", path, bytes.NewReader(buf), map[string]string{"Content-Type": "application/json"})
}

func (b *browser) postForm(path string, form url.Values, hdr map[string]string) reply {
	if hdr == nil {
		hdr = map[string]string{}
	}
	hdr["Content-Type"] = "application/x-www-form-urlencoded"
	return b.do("POST", path, strings.NewReader(form.Encode()), hdr)
}

// signup makes an account through the real endpoints with the software
// authenticator, and leaves the browser signed in.
func (b *browser) signup(username, invite string) reply {
	b.h.t.Helper()
	r := b.postJSON("/webauthn/signup/begin", map[string]string{"username": username, "invite": invite})
	if r.status != 200 {
		return r
	}
	opts, err := virtualwebauthn.ParseAttestationOptions(r.body)
	if err != nil {
		b.h.t.Fatal(err)
	}
	b.auth = virtualwebauthn.NewAuthenticatorWithOptions(virtualwebauthn.AuthenticatorOptions{UserHandle: []byte(opts.UserID)})
	b.cred = oauthtest.NewCredential()
	att := virtualwebauthn.CreateAttestationResponse(b.rp, b.auth, b.cred, *opts)
	b.auth.AddCredential(b.cred)
	return b.postJSON("/webauthn/signup/finish", att)
}

// assertion answers a login ceremony; rp may differ from the browser's to
// simulate another origin.
func (b *browser) assertion(rp virtualwebauthn.RelyingParty) string {
	b.h.t.Helper()
	r := b.postJSON("/webauthn/login/begin", nil)
	if r.status != 200 {
		b.h.t.Fatalf("login begin: %d %s", r.status, r.body)
	}
	opts, err := virtualwebauthn.ParseAssertionOptions(r.body)
	if err != nil {
		b.h.t.Fatal(err)
	}
	return virtualwebauthn.CreateAssertionResponse(rp, b.auth, b.cred, *opts)
}

func (b *browser) signin() reply {
	return b.postJSON("/webauthn/login/finish", b.assertion(b.rp))
}

// enrol returns a signed-in browser for a fresh account.
func (h *harness) enrol(username string) *browser {
	h.t.Helper()
	link, err := h.s.EnsureEnrolment(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	tok := ""
	if link != "" {
		tok = strings.SplitN(link, "invite=", 2)[1]
	} else {
		l, err := h.s.InviteURL(context.Background(), "")
		if err != nil {
			h.t.Fatal(err)
		}
		tok = strings.SplitN(l, "invite=", 2)[1]
	}
	b := h.browser()
	if r := b.signup(username, tok); r.status != 200 {
		h.t.Fatalf("signup: %d %s", r.status, r.body)
	}
	return b
}

// client is an OAuth client as an MCP client would be.
type client struct {
	id, secret, redirect string
	verifier             string
}

func (h *harness) register(authMethod, redirect string) client {
	h.t.Helper()
	b := h.browser()
	r := b.postJSON("/register", map[string]any{"redirect_uris": []string{redirect}, "client_name": "Test Client", "token_endpoint_auth_method": authMethod})
	if r.status != 201 {
		h.t.Fatalf("register: %d %s", r.status, r.body)
	}
	m := r.json()
	c := client{id: m["client_id"].(string), redirect: redirect, verifier: strings.Repeat("v", 50)}
	if s, ok := m["client_secret"].(string); ok {
		c.secret = s
	}
	return c
}

func challenge(verifier string) string {
	h := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

func (h *harness) authorizeURL(c client, extra url.Values) string {
	q := url.Values{"response_type": {"code"}, "client_id": {c.id}, "redirect_uri": {c.redirect}, "state": {"state-12345678"},
		"code_challenge": {challenge(c.verifier)}, "code_challenge_method": {"S256"}, "resource": {h.base + "/mcp"}}
	for k, v := range extra {
		if len(v) == 0 || v[0] == "" {
			q.Del(k)
		} else {
			q[k] = v
		}
	}
	return "/authorize?" + q.Encode()
}

// consent drives the consent screen: GET shows it, POST allows the given
// rooms at their levels. It returns the redirect location.
func (b *browser) consent(authURL string, rooms map[string]string, createRooms bool) *url.URL {
	b.h.t.Helper()
	r := b.do("GET", authURL, nil, nil)
	if r.status != 200 {
		b.h.t.Fatalf("consent page: %d %s %v", r.status, r.body, r.header)
	}
	form := url.Values{"decision": {"allow"}}
	for id, level := range rooms {
		form.Add("room", id)
		form.Set("level_"+id, level)
	}
	if createRooms {
		form.Set("create_rooms", "on")
	}
	r = b.postForm(authURL, form, nil)
	if r.status != 303 && r.status != 302 {
		b.h.t.Fatalf("consent post: %d %s", r.status, r.body)
	}
	u, err := url.Parse(r.header.Get("Location"))
	if err != nil {
		b.h.t.Fatal(err)
	}
	return u
}

func (h *harness) token(c client, form url.Values) reply {
	h.t.Helper()
	form.Set("client_id", c.id)
	if c.secret != "" {
		form.Set("client_secret", c.secret)
	}
	return h.browser().postForm("/token", form, nil)
}

func (h *harness) exchange(c client, code string) reply {
	return h.token(c, url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {c.redirect},
		"code_verifier": {c.verifier}, "resource": {h.base + "/mcp"}})
}
