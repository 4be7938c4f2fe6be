// Package oauthtest drives sync's sign-up and consent pages the way a
// person with a browser would, using a software passkey authenticator, so
// tests can obtain real OAuth grants without a browser. The flow itself
// is oauth/passkeyclient's (which `syncd bench` uses too); this package
// turns its errors into test failures.
package oauthtest

import (
	"context"
	"net/http"
	"testing"

	"github.com/descope/virtualwebauthn"

	"github.com/syncsubstrate/sync/oauth/passkeyclient"
)

// Person is a user with a cookie-keeping browser and a software passkey,
// signed in to the server at Base.
type Person struct{ *passkeyclient.Person }

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
	p, err := passkeyclient.SignUp(context.Background(), base, name, invite, tr)
	if err != nil {
		t.Fatal(err)
	}
	return &Person{p}
}

// NewCredential returns a software passkey whose public key encodes at
// full length (passkeyclient.NewCredential).
func NewCredential() virtualwebauthn.Credential {
	c, err := passkeyclient.NewCredential()
	if err != nil {
		panic(err)
	}
	return c
}

// Result is what an authorization redirect carried.
type Result = passkeyclient.Result

// SharedRooms is the key of Consent's rooms map that sets the consent
// screen's "new rooms shared with me" level instead of a room's.
const SharedRooms = passkeyclient.SharedRooms

// Token runs the whole code flow by hand (dynamic registration as a
// public client, PKCE S256 with the MCP resource, consent, exchange) and
// returns the token response, plus "client_id".
func (p *Person) Token(t testing.TB, clientName string, rooms map[string]string) map[string]any {
	t.Helper()
	tok, err := p.Person.Token(context.Background(), clientName, rooms)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Bearer is an http.RoundTripper that adds a bearer token.
type Bearer = passkeyclient.Bearer
