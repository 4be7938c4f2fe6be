package httpmw

import (
	"fmt"
	"net/http/httptest"
	"testing"
)

// Keys are whole addresses: one IPv6 /64 holds 2^64 of them. One host
// spreads its requests over fresh addresses (no limit applies to it) and
// fills the limiter, after which every new client shares one bucket that
// the attacker keeps empty.
// A host holding an IPv6 /64 used a fresh address per request: keyed on
// the full address it was never limited, and filled the limiter until new
// clients shared one overflow bucket.
func TestAttackIPv6PrefixSharesOneBudget(t *testing.T) {
	s := New(Options{RatePerSecond: 1, RateBurst: 1})
	req := func(addr string) bool {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = addr
		return s.Limit(httptest.NewRecorder(), r, "")
	}
	allowed := 0
	for i := 0; i < maxBuckets; i++ {
		if req(fmt.Sprintf("[2001:db8:1:2:%x:%x::1]:4000", i>>16, i&0xffff)) {
			allowed++
		}
	}
	// overflow bucket drained by the attacker
	req("[2001:db8:1:2:ffff:ffff::1]:4000")
	victim := req("198.51.100.7:5000")
	if allowed == maxBuckets || !victim {
		t.Errorf("HOLE: one /64 got %d of %d requests through at 1 rps; a new, innocent client allowed=%v", allowed, maxBuckets, victim)
	}
}
