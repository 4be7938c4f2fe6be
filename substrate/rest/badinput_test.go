package rest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/rest"
)

// Every client mistake gets a 4xx with a stable code, a message and a hint,
// and writes nothing.
func TestBadInput(t *testing.T) {
	e := newEnv(t, rest.Options{MaxBodyBytes: 8 << 10})
	rm := e.room("bad", nil)
	aTok := e.join(rm, "a")
	big := strings.Repeat("x", 5000) // over the test's 4096-byte value limit
	cases := []struct {
		name, method, path, token string
		body                      any
		status                    int
		code                      string
	}{
		{"malformed json", "PUT", "/rooms/bad/state", rm.token, `{"scope": "_shared",`, 400, "invalid_json"},
		{"not json", "PUT", "/rooms/bad/state", rm.token, `hello`, 400, "invalid_json"},
		{"empty body", "PUT", "/rooms/bad/state", rm.token, ``, 400, "invalid_json"},
		{"array body", "PUT", "/rooms/bad/state", rm.token, `[1,2]`, 400, "invalid_json"},
		{"trailing data", "PUT", "/rooms/bad/state", rm.token, `{"scope":"_shared","key":"k","value":1} {}`, 400, "invalid_json"},
		{"wrong type key", "PUT", "/rooms/bad/state", rm.token, `{"scope":"_shared","key":5,"value":1}`, 400, "invalid_field"},
		{"wrong type if_version", "PUT", "/rooms/bad/state", rm.token, `{"scope":"_shared","key":"k","value":1,"if_version":"one"}`, 400, "invalid_field"},
		{"unknown field", "PUT", "/rooms/bad/state", rm.token, `{"scope":"_shared","key":"k","valeu":1}`, 400, "invalid_field"},
		{"no value", "PUT", "/rooms/bad/state", rm.token, map[string]any{"scope": "_shared", "key": "k"}, 400, "invalid_field"},
		{"value and merge", "PUT", "/rooms/bad/state", rm.token, map[string]any{"scope": "_shared", "key": "k", "value": 1, "merge": map[string]any{}}, 400, "invalid_field"},
		{"merge not object", "PUT", "/rooms/bad/state", rm.token, map[string]any{"scope": "_shared", "key": "k", "merge": []int{1}}, 400, "invalid_field"},
		{"append with if_version", "PUT", "/rooms/bad/state", rm.token, map[string]any{"scope": "_messages", "append": true, "value": 1, "if_version": 0}, 400, "invalid_field"},
		{"negative if_version", "PUT", "/rooms/bad/state", rm.token, map[string]any{"scope": "_shared", "key": "k", "value": 1, "if_version": -1}, 400, "invalid_field"},
		{"empty scope", "PUT", "/rooms/bad/state", rm.token, map[string]any{"scope": "", "key": "k", "value": 1}, 400, "invalid_field"},
		{"bad scope chars", "PUT", "/rooms/bad/state", rm.token, map[string]any{"scope": "a b", "key": "k", "value": 1}, 400, "invalid_field"},
		{"long scope", "PUT", "/rooms/bad/state", rm.token, map[string]any{"scope": strings.Repeat("s", 129), "key": "k", "value": 1}, 400, "invalid_field"},
		{"empty key", "PUT", "/rooms/bad/state", rm.token, map[string]any{"scope": "_shared", "key": "", "value": 1}, 400, "invalid_field"},
		{"long key", "PUT", "/rooms/bad/state", rm.token, map[string]any{"scope": "_shared", "key": strings.Repeat("k", 257), "value": 1}, 400, "invalid_field"},
		{"control char key", "PUT", "/rooms/bad/state", rm.token, map[string]any{"scope": "_shared", "key": "a\nb", "value": 1}, 400, "invalid_field"},
		{"self for room token", "PUT", "/rooms/bad/state", rm.token, map[string]any{"scope": "self", "key": "k", "value": 1}, 400, "invalid_field"},
		{"oversize value", "PUT", "/rooms/bad/state", rm.token, map[string]any{"scope": "_shared", "key": "k", "value": big}, 413, "value_too_large"},
		{"oversize body", "PUT", "/rooms/bad/state", rm.token, map[string]any{"scope": "_shared", "key": "k", "value": strings.Repeat("y", 9000)}, 413, "body_too_large"},
		{"empty batch", "PUT", "/rooms/bad/state/batch", rm.token, map[string]any{"writes": []any{}}, 400, "invalid_field"},
		{"batch too long", "PUT", "/rooms/bad/state/batch", rm.token, map[string]any{"writes": validWrites(101)}, 400, "invalid_field"},
		{"unknown room", "GET", "/rooms/nope/state", rm.token, nil, 404, "room_not_found"},
		{"unknown room write", "PUT", "/rooms/nope/state", rm.token, map[string]any{"scope": "_shared", "key": "k", "value": 1}, 404, "room_not_found"},
		{"missing token", "GET", "/rooms/bad/state", "", nil, 401, "unauthorized"},
		{"missing token write", "PUT", "/rooms/bad/state", "", map[string]any{"scope": "_shared", "key": "k", "value": 1}, 401, "unauthorized"},
		{"garbage token", "GET", "/rooms/bad/state", "hunter2", nil, 401, "unauthorized"},
		{"unknown key", "GET", "/rooms/bad/state?scope=_shared&key=nope", rm.token, nil, 404, "key_not_found"},
		{"key without scope", "GET", "/rooms/bad/state?key=k", rm.token, nil, 400, "invalid_field"},
		{"bad after", "GET", "/rooms/bad/state?scope=_messages&after=x", rm.token, nil, 400, "invalid_field"},
		{"unknown endpoint", "GET", "/rooms/bad/nothing", rm.token, nil, 404, "not_found"},
		{"bad room id", "POST", "/rooms", "", map[string]any{"id": "_sys"}, 400, "invalid_field"},
		{"meta not object", "POST", "/rooms", "", map[string]any{"id": "m", "meta": "x"}, 400, "invalid_field"},
		{"duplicate room", "POST", "/rooms", "", map[string]any{"id": "bad"}, 409, "room_exists"},
		{"join without name", "POST", "/rooms/bad/agents", rm.token, map[string]any{"id": "n"}, 400, "invalid_field"},
		{"join as self", "POST", "/rooms/bad/agents", rm.token, map[string]any{"id": "self", "name": "S"}, 400, "invalid_field"},
		{"agent writes _audit", "PUT", "/rooms/bad/state", aTok, map[string]any{"scope": "_audit", "key": "k", "value": 1}, 403, "scope_denied"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.seq(rm)
			r := e.do(c.method, c.path, c.token, c.body)
			if r.status != c.status || r.str("error") != c.code {
				t.Fatalf("got %d %s, want %d %s: %s", r.status, r.str("error"), c.status, c.code, r.raw)
			}
			if r.str("message") == "" || r.str("hint") == "" {
				t.Fatalf("error without message or hint: %s", r.raw)
			}
			if e.seq(rm) != before {
				t.Fatal("a refused request changed the room")
			}
		})
	}
	// Nothing at all was written to _shared by the cases above.
	if n := len(e.do("GET", "/rooms/bad/state?scope=_shared", rm.token, nil).must(t, 200).body["entries"].([]any)); n != 0 {
		t.Fatalf("%d entries in _shared after only bad writes", n)
	}
}

// A scope holds at most MaxKeysPerScope mutable keys (50 in these tests).
func TestScopeCapacity(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("cap", nil)
	writes := make([]any, 50)
	for i := range writes {
		writes[i] = map[string]any{"scope": "_shared", "key": fmt.Sprint("k", i), "value": i}
	}
	e.do("PUT", "/rooms/cap/state/batch", rm.token, map[string]any{"writes": writes}).must(t, 200)
	r := e.do("PUT", "/rooms/cap/state", rm.token, map[string]any{"scope": "_shared", "key": "one-more", "value": 1}).must(t, 409)
	if r.str("error") != "scope_full" {
		t.Fatalf("over capacity: %s", r.raw)
	}
	// Overwriting an existing key is still fine.
	e.do("PUT", "/rooms/cap/state", rm.token, map[string]any{"scope": "_shared", "key": "k1", "value": "new"}).must(t, 200)

	// With the room's snapshot cached (a read), the count comes from it
	// and stays exact through deletions and inserts.
	e.do("GET", "/rooms/cap/context", rm.token, nil).must(t, 200)
	e.do("PUT", "/rooms/cap/state", rm.token, map[string]any{"scope": "_shared", "key": "one-more", "value": 1}).must(t, 409)
	e.do("DELETE", "/rooms/cap/state?scope=_shared&key=k2", rm.token, nil).must(t, 200)
	e.do("PUT", "/rooms/cap/state", rm.token, map[string]any{"scope": "_shared", "key": "one-more", "value": 1}).must(t, 200)
	if r := e.do("PUT", "/rooms/cap/state", rm.token, map[string]any{"scope": "_shared", "key": "two-more", "value": 1}); r.status != 409 {
		t.Fatalf("past capacity with a warm snapshot: %d %s", r.status, r.raw)
	}
}

func TestRateLimit(t *testing.T) {
	e := newEnv(t, rest.Options{RatePerSecond: 1, RateBurst: 3})
	r := e.do("POST", "/rooms", "", map[string]any{"id": "rl"}).must(t, 201)
	tok := r.str("token")
	limited := false
	for i := 0; i < 6 && !limited; i++ {
		res := e.do("GET", "/rooms/rl", tok, nil)
		if res.status == 429 {
			limited = true
			if res.str("error") != "rate_limited" || res.header.Get("Retry-After") == "" {
				t.Fatalf("429 without code or Retry-After: %s", res.raw)
			}
		}
	}
	if !limited {
		t.Fatal("6 requests at burst 3 and 1/s were never limited")
	}
}

// Requests without a credential spend their address's budget: a client
// that sends none cannot flood the API (and a credential's budget is its
// own: the room token still gets through).
func TestRateLimitPerAddress(t *testing.T) {
	e := newEnv(t, rest.Options{RatePerSecond: 1, RateBurst: 3})
	tok := e.room("ip", nil).token
	limited := false
	for i := 0; i < 6 && !limited; i++ {
		res := e.do("GET", "/rooms/ip/context", "", nil)
		limited = res.status == 429 && res.str("error") == "rate_limited" && res.header.Get("Retry-After") != ""
	}
	if !limited {
		t.Fatal("6 anonymous requests at burst 3 and 1/s were never limited")
	}
	e.do("GET", "/rooms/ip/context", tok, nil).must(t, 200)
}

// validWrites is a batch of n writes each valid on its own, so that only
// the batch limit can refuse it.
func validWrites(n int) []map[string]any {
	out := make([]map[string]any, n)
	for i := range out {
		out[i] = map[string]any{"scope": "_shared", "key": fmt.Sprintf("k%d", i), "value": i}
	}
	return out
}

// The batch limit is exactly 100 writes: the 101st is what is refused.
func TestBatchLimitBoundary(t *testing.T) {
	e := newEnvWith(t, rest.Options{}, substrate.Limits{MaxKeysPerScope: 1000})
	rm := e.room("batch", nil)
	e.do("PUT", "/rooms/batch/state/batch", rm.token, map[string]any{"writes": validWrites(100)}).must(t, 200)
	r := e.do("PUT", "/rooms/batch/state/batch", rm.token, map[string]any{"writes": validWrites(101)})
	if r.status != 400 || !strings.Contains(r.str("message"), "100") {
		t.Fatalf("101 writes: %d %s", r.status, r.raw)
	}
}
