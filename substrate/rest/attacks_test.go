package rest_test

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/syncsubstrate/sync/substrate/rest"
)

// Attacks on the REST API that must fail. Each case names the hole it
// closes; add the next one found here.

func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "as_" + hex.EncodeToString(b[:])
}

// Rate limits key on the verified credential, else the client address: a
// client inventing a new bearer string per request used to get a fresh
// budget each time (and grow the limiter's memory).
func TestAttackRandomBearerTokensAreRateLimited(t *testing.T) {
	e := newEnv(t, rest.Options{RatePerSecond: 5, RateBurst: 10})
	rm := e.room("target", nil)
	limited := 0
	for range 40 {
		res := e.do("GET", "/rooms/target/context", randomToken(), nil)
		switch res.status {
		case 401:
		case 429:
			limited++
			if res.str("error") != "rate_limited" || res.header.Get("Retry-After") == "" {
				t.Fatalf("429 without its code or Retry-After: %s", res.raw)
			}
		default:
			t.Fatalf("random token answered %d: %s", res.status, res.raw)
		}
	}
	if limited < 25 {
		t.Fatalf("only %d of 40 requests with random tokens were rate limited", limited)
	}
	// Creating rooms with a random bearer header is limited per address
	// too (the header used to buy a budget of its own).
	limited = 0
	for range 20 {
		if res := e.do("POST", "/rooms", randomToken(), map[string]any{}); res.status == 429 {
			limited++
		}
	}
	if limited < 15 {
		t.Fatalf("only %d of 20 room creations with random bearer headers were limited", limited)
	}
	// A verified credential keeps its own budget from the same address.
	e.do("GET", "/rooms/target", rm.token, nil).must(t, 200)
}
