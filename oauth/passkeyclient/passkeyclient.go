// Package passkeyclient is a person at a browser, scripted: it signs up
// on a sync server with a software passkey through the real WebAuthn
// endpoints, keeps the session cookie, and obtains OAuth grants through
// dynamic client registration, PKCE (S256, with the MCP resource), the
// consent page and the token endpoint. Nothing in it bypasses the server:
// it makes the requests a browser and an MCP client would.
//
// Tests use it through oauth/oauthtest; `syncd bench` uses it to drive the
// MCP endpoint and the live room pages the way people do.
package passkeyclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"

	"github.com/descope/virtualwebauthn"
)

// Person is a user with a cookie-keeping browser and a software passkey,
// signed in to the server at Base.
type Person struct {
	Name string
	Base string
	// Transport carries every request the person makes (default
	// http.DefaultTransport): callers reaching the server through a proxy
	// under a public name set it.
	Transport http.RoundTripper
	c         *http.Client
}

// SignUp creates an account named name through the real WebAuthn
// endpoints of the server whose public URL is base, with every request
// sent through tr (nil: the default transport). The server must allow
// open sign-up, or invite must be a valid invite token (`syncd invite`).
func SignUp(ctx context.Context, base, name, invite string, tr http.RoundTripper) (*Person, error) {
	jar, _ := cookiejar.New(nil)
	p := &Person{Name: name, Base: base, Transport: tr,
		c: &http.Client{Jar: jar, Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	begin, _ := json.Marshal(map[string]string{"username": name, "invite": invite})
	body, err := p.post(ctx, "/webauthn/signup/begin", string(begin))
	if err != nil {
		return nil, fmt.Errorf("sign-up: %w", err)
	}
	opts, err := virtualwebauthn.ParseAttestationOptions(body)
	if err != nil {
		return nil, fmt.Errorf("sign-up: %v %s", err, body)
	}
	a := virtualwebauthn.NewAuthenticatorWithOptions(virtualwebauthn.AuthenticatorOptions{UserHandle: []byte(opts.UserID)})
	cred, err := NewCredential()
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	rp := virtualwebauthn.RelyingParty{ID: u.Hostname(), Name: "sync", Origin: base}
	if _, err := p.post(ctx, "/webauthn/signup/finish", virtualwebauthn.CreateAttestationResponse(rp, a, cred, *opts)); err != nil {
		return nil, fmt.Errorf("sign-up: %w", err)
	}
	return p, nil
}

// NewCredential returns a software passkey whose public key encodes at
// full length. virtualwebauthn writes the key's coordinates with
// big.Int.Bytes, which drops leading zero bytes (about 1 key in 128), and
// a verifier rightly rejects such a key: sign-ups would fail at random.
func NewCredential() (virtualwebauthn.Credential, error) {
	for {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return virtualwebauthn.Credential{}, err
		}
		pub, err := k.PublicKey.ECDH()
		if err != nil {
			return virtualwebauthn.Credential{}, err
		}
		if b := pub.Bytes(); b[1] == 0 || b[33] == 0 { // uncompressed: 0x04 ‖ X ‖ Y
			continue
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return virtualwebauthn.Credential{}, err
		}
		return virtualwebauthn.NewCredentialWithImportedKey(virtualwebauthn.KeyTypeEC2, der), nil
	}
}

// Client is the person's browser: it sends the session cookie and does
// not follow redirects.
func (p *Person) Client() *http.Client { return p.c }

func (p *Person) post(ctx context.Context, path, body string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.Base+path, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := p.c.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 400 {
		return "", fmt.Errorf("POST %s: %d %s", path, res.StatusCode, raw)
	}
	return string(raw), nil
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authorizeURL, nil)
	if err != nil {
		return nil, err
	}
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
	u, err := url.Parse(authorizeURL)
	if err != nil {
		return nil, err
	}
	req, err = http.NewRequestWithContext(ctx, http.MethodPost, p.Base+u.RequestURI(), strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
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

// Token runs the whole code flow as an MCP client would (dynamic
// registration as a public client, PKCE S256 with the MCP resource,
// consent, exchange) and returns the token response, plus "client_id".
func (p *Person) Token(ctx context.Context, clientName string, rooms map[string]string) (map[string]any, error) {
	const redirect = "http://localhost:9/callback"
	reg, _ := json.Marshal(map[string]any{"redirect_uris": []string{redirect}, "client_name": clientName, "token_endpoint_auth_method": "none"})
	plain := &http.Client{Transport: p.Transport}
	var client map[string]any
	if err := postJSON(ctx, plain, p.Base+"/register", "application/json", string(reg), &client); err != nil {
		return nil, fmt.Errorf("client registration: %w", err)
	}
	id, _ := client["client_id"].(string)
	if id == "" {
		return nil, fmt.Errorf("client registration returned no client_id: %v", client)
	}
	var secret [32]byte
	_, _ = rand.Read(secret[:])
	verifier := hex.EncodeToString(secret[:]) // 64 characters, within PKCE's 43…128
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{"response_type": {"code"}, "client_id": {id}, "redirect_uri": {redirect}, "state": {"passkeyclient-state"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"}, "resource": {p.Base + "/mcp"}}
	got, err := p.Consent(ctx, p.Base+"/authorize?"+q.Encode(), rooms)
	if err != nil {
		return nil, err
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {got.Code},
		"redirect_uri": {redirect}, "client_id": {id}, "code_verifier": {verifier}, "resource": {p.Base + "/mcp"}}
	var tok map[string]any
	if err := postJSON(ctx, plain, p.Base+"/token", "application/x-www-form-urlencoded", form.Encode(), &tok); err != nil {
		return nil, fmt.Errorf("token exchange: %w", err)
	}
	if tok["access_token"] == nil {
		return nil, fmt.Errorf("no token: %v", tok)
	}
	tok["client_id"] = id
	return tok, nil
}

// postJSON posts body and decodes the JSON answer into into; a status of
// 400 or more is an error carrying the answer.
func postJSON(ctx context.Context, c *http.Client, u, contentType, body string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode >= 400 {
		return fmt.Errorf("%d %s", res.StatusCode, raw)
	}
	return json.Unmarshal(raw, into)
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
