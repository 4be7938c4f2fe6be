package mcp_test

import (
	"bytes"
	"context"
	"fmt"
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

// A participant whose client name matched an agent created over REST (with
// room authority, "*") became that agent through sync_embody and read
// everything. Embody creates an agent for the user or switches to one the
// user owns; it never adopts a token's or another user's agent.
func TestAttackEmbodyCannotAdoptTokenAgents(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	code, room, err := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": "vault"})
	if err != nil || code != 201 {
		t.Fatalf("create room: %d %v", code, err)
	}
	roomTok := room["token"].(string)
	for _, a := range []map[string]any{{"id": "bob:go-sdk-test", "name": "planted"}, {"id": "keeper", "name": "keeper"}} {
		if code, out, _ := restCall(ctx, srv.base, "POST", "/rooms/vault/agents", roomTok, a); code != 201 {
			t.Fatalf("join %v: %d %v", a["id"], code, out)
		}
	}
	restCall(ctx, srv.base, "PATCH", "/rooms/vault/agents/bob:go-sdk-test", roomTok, map[string]any{"grants": []string{"*"}})
	restCall(ctx, srv.base, "PUT", "/rooms/vault/state", roomTok, map[string]any{"scope": "keeper", "key": "combination", "value": "12-34-56"})

	alice := owner(t, srv, "alice", "vault", roomTok)
	bob := signup(t, srv, "bob")
	cs := connect(t, alice, map[string]string{"vault": "admin"})
	mustTool(t, cs, "sync_share_room", map[string]any{"room": "vault", "username": "bob", "role": "participant"})
	bs := connect(t, bob, map[string]string{"vault": "write"})

	if out, isErr := callTool(t, bs, "sync_embody", map[string]any{"room": "vault", "agent": "keeper"}); !isErr {
		t.Fatalf("bob embodied the token-created agent keeper: %v", out)
	}
	emb := mustTool(t, bs, "sync_embody", map[string]any{"room": "vault"})
	if emb["agent"] == "bob:go-sdk-test" {
		t.Fatalf("bob adopted the planted agent with room authority: %v", emb)
	}
	if emb["agent"] != "bob:go-sdk-test-2" {
		t.Fatalf("bob embodied %v, want the next free id bob:go-sdk-test-2", emb["agent"])
	}
	got := mustTool(t, bs, "sync_read_context", nil)
	if strings.Contains(fmt.Sprint(got), "12-34-56") {
		t.Fatalf("bob reads keeper's private scope: %v", got["state"])
	}
	if out, isErr := callTool(t, bs, "sync_eval_cel", map[string]any{"expr": "state.keeper.combination"}); !isErr && strings.Contains(fmt.Sprint(out), "12-34-56") {
		t.Fatalf("bob evaluates keeper's private scope: %v", out)
	}
}

// An agent of the user's own that a token holder granted room authority
// does not lift a participant above their role.
func TestAttackGrantedAgentStaysWithinRole(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	_, room, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": "den"})
	roomTok := room["token"].(string)
	restCall(ctx, srv.base, "POST", "/rooms/den/agents", roomTok, map[string]any{"id": "keeper", "name": "keeper"})
	restCall(ctx, srv.base, "PUT", "/rooms/den/state", roomTok, map[string]any{"scope": "keeper", "key": "combination", "value": "12-34-56"})
	alice := owner(t, srv, "alice", "den", roomTok)
	bob := signup(t, srv, "bob")
	cs := connect(t, alice, map[string]string{"den": "admin"})
	mustTool(t, cs, "sync_share_room", map[string]any{"room": "den", "username": "bob", "role": "participant"})
	bs := connect(t, bob, map[string]string{"den": "write"})
	agent := mustTool(t, bs, "sync_embody", map[string]any{"room": "den"})["agent"].(string)
	restCall(ctx, srv.base, "PATCH", "/rooms/den/agents/"+agent, roomTok, map[string]any{"grants": []string{"*"}})
	if out, isErr := callTool(t, bs, "sync_eval_cel", map[string]any{"expr": "state.keeper.combination"}); !isErr || strings.Contains(fmt.Sprint(out), "12-34-56") {
		t.Fatalf("a participant's agent granted * reads keeper's scope: %v", out)
	}
}

// A refresh token worked as a bearer token on /mcp: Verify ignored the
// token type fosite's introspection returned. Only access tokens
// authenticate.
func TestAttackRefreshTokenIsNotABearerToken(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	alice := signup(t, srv, "alice")
	tok := mintToken(t, srv, alice, nil)
	ping := []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	if res := postMCP(t, srv.base, tok["access_token"].(string), ping); res.StatusCode != http.StatusOK {
		t.Fatalf("access token: %d", res.StatusCode)
	}
	res := postMCP(t, srv.base, tok["refresh_token"].(string), ping)
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(res.Header.Get("WWW-Authenticate"), "invalid_token") {
		t.Fatalf("refresh token as bearer: %d %q, want 401 invalid_token", res.StatusCode, res.Header.Get("WWW-Authenticate"))
	}
}
