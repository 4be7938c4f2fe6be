package oauth_test

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/syncsubstrate/sync/oauth"
)

// A refresh token copied before rotation must not outlive its owner's use
// of the new one: once the successor has been used, the old token is
// refused, and presenting it revokes the grant, the owner's newest tokens
// included (the two cannot be told apart; the person reconnects, and the
// account page says why). A token nobody used yet was not: a forged or
// unknown refresh token revokes nothing.
func TestAttackStolenRefreshTokenAfterRotation(t *testing.T) {
	h := newHarness(t, oauth.Options{})
	alice := h.enrol("alice")
	h.room("plans", h.userID("alice"), "owner")
	c := h.register("none", "http://localhost/callback")
	loc := alice.consent(h.authorizeURL(c, nil), map[string]string{"plans": "read"}, false)
	tok := h.exchange(c, loc.Query().Get("code")).json()
	refresh := func(rt string) map[string]any {
		return h.token(c, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}}).json()
	}
	stolen := tok["refresh_token"].(string)
	owner1 := refresh(stolen)                           // the owner rotates…
	owner2 := refresh(owner1["refresh_token"].(string)) // …and uses the new token
	if owner2["access_token"] == nil {
		t.Fatalf("owner's refresh: %v", owner2)
	}
	if m := refresh("ory_rt_forged.forged"); m["error"] != "invalid_grant" {
		t.Fatalf("forged refresh token: %v", m)
	}
	if _, err := h.s.Verify(context.Background(), owner2["access_token"].(string)); err != nil {
		t.Fatalf("a forged token revoked the grant: %v", err)
	}
	if m := refresh(stolen); m["access_token"] != nil {
		t.Fatalf("HOLE: a refresh token whose successor was used still works: %v", m)
	}
	if _, err := h.s.Verify(context.Background(), owner2["access_token"].(string)); !errors.Is(err, oauth.ErrInvalidToken) {
		t.Fatalf("HOLE: the grant survived the reuse of a retired refresh token: %v", err)
	}
	if m := refresh(owner2["refresh_token"].(string)); m["access_token"] != nil {
		t.Fatalf("HOLE: the grant's newest refresh token survived the reuse: %v", m)
	}
}

// Racing refreshes with one token (Claude's backend and its proxy; several
// Claude Code processes sharing a credentials file), on a pool of 2
// connections: every one succeeds, and each new token then works.
func TestRacingRefreshesAllSucceed(t *testing.T) {
	h := newHarness(t, oauth.Options{})
	alice := h.enrol("alice")
	h.room("plans", h.userID("alice"), "owner")
	c := h.register("none", "http://localhost/callback")
	loc := alice.consent(h.authorizeURL(c, nil), map[string]string{"plans": "read"}, false)
	rt := h.exchange(c, loc.Query().Get("code")).json()["refresh_token"].(string)
	const n = 12
	out := make(chan map[string]any, n)
	for range n {
		go func() {
			out <- h.token(c, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}}).json()
		}()
	}
	var next []string
	for range n {
		m := <-out
		if m["refresh_token"] == nil {
			t.Fatalf("a racing refresh failed: %v", m)
		}
		next = append(next, m["refresh_token"].(string))
	}
	for _, r := range next {
		if m := h.token(c, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {r}}).json(); m["access_token"] == nil {
			t.Fatalf("a successor of a racing refresh failed: %v", m)
		}
	}
}
