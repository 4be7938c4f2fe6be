package mcp_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate/httpmw"
)

// Attacks on /mcp that must fail. Each case names the hole it closes; add
// the next one found here.

func postMCP(t *testing.T, base, token string, body []byte) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/mcp", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res
}

// /mcp had neither the REST API's body limit (go-sdk allows 4 MiB) nor any
// rate limit: the same stack now guards both surfaces.
func TestAttackMCPLimits(t *testing.T) {
	stack := httpmw.New(httpmw.Options{RatePerSecond: 5, RateBurst: 10})
	srv := startServerOpts(t, pgtest.New(t), serverOpts{http: stack})
	alice := signup(t, srv, "alice")
	token := mintToken(t, srv, alice, nil)["access_token"].(string)
	ping := []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)

	big := append(append([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"`), bytes.Repeat([]byte("x"), 2<<20)...), `"}}`...)
	if res := postMCP(t, srv.base, token, big); res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("2 MiB body: %d, want 413", res.StatusCode)
	}

	// Random bearer strings share their address's budget.
	limited := 0
	for i := range 30 {
		res := postMCP(t, srv.base, "forged-"+strings.Repeat("x", i), ping)
		if res.StatusCode == http.StatusTooManyRequests {
			limited++
			if res.Header.Get("Retry-After") == "" {
				t.Fatal("429 without Retry-After")
			}
		} else if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("forged token: %d", res.StatusCode)
		}
	}
	if limited < 15 {
		t.Fatalf("only %d of 30 forged-token requests were rate limited", limited)
	}
	// The verified grant has its own budget, and it is limited too.
	codes := map[int]int{}
	for range 30 {
		codes[postMCP(t, srv.base, token, ping).StatusCode]++
	}
	if codes[http.StatusOK] < 5 || codes[http.StatusTooManyRequests] < 15 {
		t.Fatalf("30 calls with one grant: %v, want some 200 then 429", codes)
	}
}
