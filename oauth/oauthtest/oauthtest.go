// Package oauthtest drives sync's sign-up and consent pages the way a
// person with a browser would, using a software passkey authenticator, so
// tests can obtain real OAuth grants without a browser.
package oauthtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/descope/virtualwebauthn"
)

// Person is a user with a cookie-keeping browser and a software passkey,
// signed in to the server at Base.
type Person struct {
	Name string
	Base string
	c    *http.Client
	// Transport carries every request the person makes (default
	// http.DefaultTransport): tests reaching the server through a proxy
	// under a public name set it.
	Transport http.RoundTripper
}

// SignUp creates an account through the real WebAuthn endpoints (the
// server must allow open sign-up, or invite must be a valid invite token).
func SignUp(t testing.TB, base, name, invite string) *Person {
	t.Helper()
	return SignUpVia(t, base, name, invite, nil)
}

// SignUpVia is SignUp with every request sent through tr (nil: the default
// transport).
func SignUpVia(t testing.TB, base, name, invite string, tr http.RoundTripper) *Person {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	p := &Person{Name: name, Base: base, Transport: tr,
		c: &http.Client{Jar: jar, Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	body := p.post(t, "/webauthn/signup/begin", fmt.Sprintf(`{"username": %q, "invite": %q}`, name, invite))
	opts, err := virtualwebauthn.ParseAttestationOptions(body)
	if err != nil {
		t.Fatalf("sign-up: %v %s", err, body)
	}
	a := virtualwebauthn.NewAuthenticatorWithOptions(virtualwebauthn.AuthenticatorOptions{UserHandle: []byte(opts.UserID)})
	cred := NewCredential()
	u, _ := url.Parse(base)
	rp := virtualwebauthn.RelyingParty{ID: u.Hostname(), Name: "sync", Origin: base}
	p.post(t, "/webauthn/signup/finish", virtualwebauthn.CreateAttestationResponse(rp, a, cred, *opts))
	return p
}

// NewCredential returns a software passkey whose public key encodes at
// full length. virtualwebauthn writes the key's coordinates with
// big.Int.Bytes, which drops leading zero bytes (about 1 key in 128), and
// a verifier rightly rejects such a key: tests would fail at random.
func NewCredential() virtualwebauthn.Credential {
	for {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		pub, err := k.PublicKey.ECDH()
		if err != nil {
			panic(err)
		}
		if b := pub.Bytes(); b[1] == 0 || b[33] == 0 { // uncompressed: 0x04 ‖ X ‖ Y
			continue
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			panic(err)
		}
		return virtualwebauthn.NewCredentialWithImportedKey(virtualwebauthn.KeyTypeEC2, der)
	}
}

func (p *Person) post(t testing.TB, path, body string) string {
	t.Helper()
	res, err := p.c.Post(p.Base+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 400 {
		t.Fatalf("POST %s: %d %s", path, res.StatusCode, raw)
	}
	return string(raw)
}

// Result is what an authorization redirect carried.
type Result struct{ Code, State, Iss string }

// SharedRooms is the key of Consent's rooms map that sets the consent
// screen's "new rooms shared with me" level instead of a room's (no room
// id has a "*").
const SharedRooms = "*shared_rooms"

// Consent opens an authorize URL in the person's browser and allows the
// given rooms (id → level) and room creation, as on the consent page.
func (p *Person) Consent(ctx context.Context, authorizeURL string, rooms map[string]string) (*Result, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, authorizeURL, nil)
	res, err := p.c.Do(req)
	if err != nil {
		return nil, err
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		return nil, fmt.Errorf("consent page: %d %s", res.StatusCode, page)
	}
	form := url.Values{"decision": {"allow"}, "create_rooms": {"on"}}
	for id, level := range rooms {
		if id == SharedRooms {
			form.Set("shared_rooms", level)
			continue
		}
		form.Add("room", id)
		form.Set("level_"+id, level)
	}
	u, _ := url.Parse(authorizeURL)
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, p.Base+u.RequestURI(), strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err = p.c.Do(req)
	if err != nil {
		return nil, err
	}
	res.Body.Close()
	loc, err := url.Parse(res.Header.Get("Location"))
	if err != nil || loc.Query().Get("code") == "" {
		return nil, fmt.Errorf("consent did not redirect with a code: %d %v", res.StatusCode, res.Header)
	}
	q := loc.Query()
	return &Result{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
}

// Token runs the whole code flow by hand (dynamic registration as a
// public client, PKCE S256 with the MCP resource, consent, exchange) and
// returns the token response, plus "client_id".
func (p *Person) Token(t testing.TB, clientName string, rooms map[string]string) map[string]any {
	t.Helper()
	const redirect = "http://localhost:9/callback"
	reg, _ := json.Marshal(map[string]any{"redirect_uris": []string{redirect}, "client_name": clientName, "token_endpoint_auth_method": "none"})
	plain := &http.Client{Transport: p.Transport}
	res, err := plain.Post(p.Base+"/register", "application/json", strings.NewReader(string(reg)))
	if err != nil {
		t.Fatal(err)
	}
	var client map[string]any
	_ = json.NewDecoder(res.Body).Decode(&client)
	res.Body.Close()
	id, _ := client["client_id"].(string)
	verifier := strings.Repeat("v", 48)
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{"response_type": {"code"}, "client_id": {id}, "redirect_uri": {redirect}, "state": {"oauthtest-state"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"}, "resource": {p.Base + "/mcp"}}
	got, err := p.Consent(context.Background(), p.Base+"/authorize?"+q.Encode(), rooms)
	if err != nil {
		t.Fatal(err)
	}
	res, err = plain.PostForm(p.Base+"/token", url.Values{"grant_type": {"authorization_code"}, "code": {got.Code},
		"redirect_uri": {redirect}, "client_id": {id}, "code_verifier": {verifier}, "resource": {p.Base + "/mcp"}})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var tok map[string]any
	_ = json.NewDecoder(res.Body).Decode(&tok)
	if tok["access_token"] == nil {
		t.Fatalf("no token: %v", tok)
	}
	tok["client_id"] = id
	return tok
}

// Bearer is an http.RoundTripper that adds a bearer token.
type Bearer struct {
	Token string
	Base  http.RoundTripper // default http.DefaultTransport
}

func (b Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.Token)
	if b.Base == nil {
		return http.DefaultTransport.RoundTrip(r)
	}
	return b.Base.RoundTrip(r)
}
