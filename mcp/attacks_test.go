package mcp_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"github.com/syncsubstrate/sync/mcp"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
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

// A role's bootstrap runs with the role agent's own authority (its scope
// and _shared), not with the filler's: a participant who defines a role
// cannot, through an owner filling it, plant an action or view in the
// owner's scope or replace the owner's action.
func TestAttackRoleBootstrapBorrowsNoAuthority(t *testing.T) {
	srv, _, bs, alice := roleLab(t)
	as2 := connectWithToken(t, srv, mintToken(t, srv, alice, map[string]string{"lab": "admin"})["access_token"].(string))

	// Bob (a participant) defines a role whose bootstrap would act in
	// alice's scope and replace her define_role; alice, the owner, fills it.
	mustTool(t, bs, "sync_embody", map[string]any{"room": "lab"})
	mustTool(t, bs, "sync_invoke_action", map[string]any{"action": "define_role", "params": map[string]any{
		"role_id": "mole", "description": "harmless",
		"bootstrap_actions": []any{
			map[string]any{"id": "grab", "scope": "alice:conformance", "writes": []any{map[string]any{"scope": "alice:conformance", "key": "x", "value": 1}}},
			map[string]any{"id": "define_role", "writes": []any{map[string]any{"scope": "_shared", "key": "pwned", "value": true}}},
		},
		"bootstrap_views": []any{map[string]any{"id": "peek", "scope": "alice:conformance", "expr": `state["alice:conformance"]`}},
	}})
	emb := mustTool(t, as2, "sync_embody", map[string]any{"room": "lab", "role": "mole"})
	got := fmt.Sprint(emb["bootstrap"])
	if strings.Count(got, "error:") != 3 || !strings.Contains(got, "scope_denied") || !strings.Contains(got, "action_owned") {
		t.Fatalf("HOLE: the mole's bootstrap borrowed the owner's authority: %v", emb["bootstrap"])
	}
	ctx := mustTool(t, as2, "sync_read_context", map[string]any{"depth": "full"})
	if get(ctx, "actions", "grab") != nil || get(ctx, "views", "peek") != nil || get(ctx, "actions", "define_role", "registered_by") != "alice:conformance" {
		t.Fatalf("HOLE: bootstrap registered across authority: grab %v, peek %v, define_role %v",
			get(ctx, "actions", "grab"), get(ctx, "views", "peek"), get(ctx, "actions", "define_role"))
	}
}

// Seed 003 §XI: embodying gives the agent the role mcp-client (unless it
// fills a role) and grants by the user's access level: room authority for
// an owner at the admin level, the communal scopes for owners and
// collaborators at write, nothing for participants; observers cannot
// embody at all.
//
// Attacks: grants stored for one connection never lift another (of the
// same user, at a lower level) above its own level, in a mutation either;
// a participant whose agent a token holder granted "*" or _shared acts
// without them.
func TestAttackEmbodyGrantsNeverExceedAccess(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	alice, bob, carol, dan := signup(t, srv, "alice"), signup(t, srv, "bob"), signup(t, srv, "carol"), signup(t, srv, "dan")
	as := connectWithToken(t, srv, mintToken(t, srv, alice, nil)["access_token"].(string))
	mustTool(t, as, "sync_create_room", map[string]any{"room": "hall"})
	mustTool(t, as, "sync_share_room", map[string]any{"room": "hall", "username": "bob", "role": "participant"})
	mustTool(t, as, "sync_share_room", map[string]any{"room": "hall", "username": "carol", "role": "collaborator"})
	mustTool(t, as, "sync_share_room", map[string]any{"room": "hall", "username": "dan", "role": "observer"})
	if e := mustTool(t, as, "sync_embody", map[string]any{"room": "hall"}); e["role"] != "mcp-client" {
		t.Fatalf("embodiment role: %v", e["role"])
	}
	bs := connectWithToken(t, srv, mintToken(t, srv, bob, map[string]string{"hall": "write"})["access_token"].(string))
	cs := connectWithToken(t, srv, mintToken(t, srv, carol, map[string]string{"hall": "write"})["access_token"].(string))
	ds := connectWithToken(t, srv, mintToken(t, srv, dan, map[string]string{"hall": "read"})["access_token"].(string))
	mustTool(t, bs, "sync_embody", map[string]any{"room": "hall"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "hall"})
	if out, isErr := callTool(t, ds, "sync_embody", map[string]any{"room": "hall"}); !isErr {
		t.Fatalf("HOLE: an observer embodied: %v", out)
	}
	grants := func() map[string]string {
		list, err := srv.svc.ListAgents(context.Background(), substrate.RoomPrincipal("hall"), "hall")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, a := range list {
			out[a.ID] = a.Role + fmt.Sprint(a.Grants)
		}
		return out
	}
	want := map[string]string{"alice:conformance": "mcp-client[*]", "bob:conformance": "mcp-client[]", "carol:conformance": "mcp-client[_shared _messages]"}
	if got := grants(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("grants by access: %v, want %v", got, want)
	}

	// Alice on a write-level connection drives the same agent; her admin
	// connection embodies again and stores "*". The write connection must
	// not use it: registering in bob's scope needs room authority.
	aw := connectWithToken(t, srv, mintToken(t, srv, alice, map[string]string{"hall": "write"})["access_token"].(string))
	mustTool(t, aw, "sync_embody", map[string]any{"room": "hall"})
	mustTool(t, as, "sync_embody", map[string]any{"room": "hall"})
	if g := grants()["alice:conformance"]; g != "mcp-client[*]" {
		t.Fatalf("admin re-embodiment: %v", g)
	}
	if out, isErr := callTool(t, aw, "sync_register_action", map[string]any{"id": "plant", "scope": "bob:conformance",
		"writes": []any{map[string]any{"scope": "bob:conformance", "key": "x", "value": 1}}}); !isErr || out["error"] != "scope_denied" {
		t.Fatalf("HOLE: a write-level connection used the stored room authority: %v", out)
	}
	mustTool(t, as, "sync_register_action", map[string]any{"id": "plant", "scope": "bob:conformance",
		"writes": []any{map[string]any{"scope": "bob:conformance", "key": "x", "value": 1}}})

	// A token holder grants bob's agent "*": bob, a participant, still
	// cannot replace alice's action.
	if _, err := srv.svc.UpdateAgent(context.Background(), substrate.RoomPrincipal("hall"), "hall", "bob:conformance", substrate.AgentUpdate{Grants: &[]string{"*", "_shared"}}); err != nil {
		t.Fatal(err)
	}
	mustTool(t, as, "sync_register_action", map[string]any{"id": "keep", "writes": []any{map[string]any{"key": "k", "value": 1}}})
	if out, isErr := callTool(t, bs, "sync_register_action", map[string]any{"id": "keep", "writes": []any{map[string]any{"key": "y", "value": 1}}}); !isErr || out["error"] != "action_owned" {
		t.Fatalf("HOLE: a participant used a token holder's \"*\": %v", out)
	}
}

// An agent a room-token holder gated with enabled is not shown by the
// lobby to members who do not read the whole room (the room decides per
// reader who sees it; the lobby does not evaluate it): a participant's
// lobby leaves it out, the owner's (admin) lists it.
func TestAttackLobbyShowsNoGatedAgent(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	alice, bob := signup(t, srv, "alice"), signup(t, srv, "bob")
	as := connectWithToken(t, srv, mintToken(t, srv, alice, nil)["access_token"].(string))
	mustTool(t, as, "sync_create_room", map[string]any{"room": "den"})
	mustTool(t, as, "sync_share_room", map[string]any{"room": "den", "username": "bob", "role": "participant"})
	if _, err := srv.svc.Join(context.Background(), substrate.RoomPrincipal("den"), "den", substrate.JoinRequest{ID: "ghost", Name: "G", Enabled: "false"}); err != nil {
		t.Fatal(err)
	}
	bs := connectWithToken(t, srv, mintToken(t, srv, bob, map[string]string{"den": "write"})["access_token"].(string))
	if v := mustTool(t, bs, "sync_lobby", nil); strings.Contains(fmt.Sprint(v["rooms"]), "ghost") {
		t.Fatalf("HOLE: the lobby shows a participant a gated agent: %v", v["rooms"])
	}
	if v := mustTool(t, as, "sync_lobby", nil); !strings.Contains(fmt.Sprint(v["rooms"]), "ghost") {
		t.Fatalf("the owner's lobby lacks the agent: %v", v["rooms"])
	}
}

// One HTTP request carried 400 tool calls past the per-grant rate limit:
// JSON-RPC batches (which the protocol removed in 2025-06-18; without a
// protocol header the SDK took the request as 2025-03-26 and ran them) are
// refused with -32600 before any call runs, and each refused batch is
// still charged to its grant's budget (issue 25, item 5).
func TestAttackBatchesRefused(t *testing.T) {
	stack := httpmw.New(httpmw.Options{RatePerSecond: 5, RateBurst: 10})
	srv := startServerOpts(t, pgtest.New(t), serverOpts{http: stack})
	alice := signup(t, srv, "alice")
	token := mintToken(t, srv, alice, nil)["access_token"].(string)
	var calls []string
	for i := range 400 {
		calls = append(calls, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"sync_create_room","arguments":{"room":"b%d"}}}`, i, i))
	}
	batch := []byte(" [" + strings.Join(calls, ",") + "]")
	req, _ := http.NewRequest("POST", srv.base+"/mcp", bytes.NewReader(batch))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		ID    any `json:"id"`
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.NewDecoder(res.Body).Decode(&body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || body.Error.Code != -32600 || body.ID != nil || !strings.Contains(body.Error.Message, "batch") {
		t.Fatalf("a batch of 400 calls: %d %+v, want 400 with JSON-RPC error -32600", res.StatusCode, body)
	}
	var rooms int
	_ = srv.db.QueryRow(context.Background(), `SELECT count(*) FROM rooms WHERE id LIKE 'b%'`).Scan(&rooms)
	if rooms != 0 {
		t.Fatalf("a refused batch created %d rooms", rooms)
	}
	// Refused batches draw on the grant's budget like any request.
	codes := map[int]int{}
	for range 30 {
		codes[postMCP(t, srv.base, token, batch).StatusCode]++
	}
	if codes[http.StatusTooManyRequests] < 15 {
		t.Fatalf("30 batches: %v, want most rate limited", codes)
	}
	// A single request still works (once the budget refills). Stays: the
	// limiter refills on the real clock, which is what this checks.
	time.Sleep(time.Second)
	if res := postMCP(t, srv.base, token, []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)); res.StatusCode != http.StatusOK {
		t.Fatalf("a single request after: %d", res.StatusCode)
	}
}

// An agent denied the loom does not read it through its context or CEL
// (issue 25 item 3): the _loom scope (tree names, permissions, generation
// requests) used to be in every context's state whatever → view said.
func TestAttackContextFollowsLoomPermissions(t *testing.T) {
	bs := loomDeniedParticipant(t, "weave")
	if out, isErr := callTool(t, bs, "sync_loom", map[string]any{"commands": "→ view 1"}); !isErr {
		t.Fatalf("→ view runs for bob's agent: %v", out)
	}
	if got := mustTool(t, bs, "sync_read_context", nil); strings.Contains(fmt.Sprint(got), "TREE-SECRET") || strings.Contains(fmt.Sprint(got["state"]), "_loom") {
		t.Fatalf("HOLE: bob's context shows the loom: %v", got["state"])
	}
	if out, isErr := callTool(t, bs, "sync_eval_cel", map[string]any{"expr": `state["_loom"]`}); !isErr || strings.Contains(fmt.Sprint(out), "TREE-SECRET") {
		t.Fatalf("HOLE: bob's CEL reads _loom: %v", out)
	}
}

// Issue 25 item 1: a participant named a role after the owner's agent
// (<username>:<client>) with an action that writes _shared.roles, then
// filled it with sync_embody and drove the owner's agent, private scope
// included, while the owner was embodied. define_role refuses such ids, and
// filling a role never takes a person's agent, whatever defined the role.
func TestAttackRoleTakesOverPersonsAgent(t *testing.T) {
	_, as, bs, _ := roleLab(t)
	mine := mustTool(t, as, "sync_embody", map[string]any{"room": "lab"})["agent"].(string)
	mustTool(t, as, "sync_register_action", map[string]any{"id": "note", "scope": mine, "params": map[string]any{"text": map[string]any{"type": "string"}},
		"writes": []any{map[string]any{"scope": mine, "key": "diary", "value": "${params.text}"}}})
	mustTool(t, as, "sync_invoke_action", map[string]any{"action": "note", "params": map[string]any{"text": "alice's secret"}})
	// A role-defining action of the room's own, without define_role's guard.
	mustTool(t, as, "sync_register_action", map[string]any{"id": "add_role", "params": map[string]any{"role_id": map[string]any{"type": "string", "required": true}},
		"writes": []any{map[string]any{"scope": "_shared", "key": "roles", "merge": map[string]any{"${params.role_id}": map[string]any{"filled_by": nil}}}}})

	mustTool(t, bs, "sync_embody", map[string]any{"room": "lab"})
	if out, isErr := callTool(t, bs, "sync_invoke_action", map[string]any{"action": "define_role", "params": map[string]any{"role_id": mine, "description": "x"}}); !isErr {
		t.Fatalf("define_role took a person's agent id: %v", out)
	}
	for _, id := range []string{mine, "alice:web"} {
		mustTool(t, bs, "sync_invoke_action", map[string]any{"action": "add_role", "params": map[string]any{"role_id": id}})
		for _, args := range []map[string]any{{"room": "lab", "role": id}, {"room": "lab", "agent": id}} {
			out, isErr := callTool(t, bs, "sync_embody", args)
			if !isErr {
				t.Fatalf("HOLE: bob embodied %v: %v", args, out)
			}
			if args["role"] != nil && (out["error"] != "invalid_field" || out["reason"] != "person_id" || !strings.Contains(fmt.Sprint(out["hint"]), "roles")) {
				t.Fatalf("filling role %s: %v", id, out)
			}
		}
	}
	// Refused fills left bob as he was: embodied as his own agent.
	if lobby := mustTool(t, bs, "sync_lobby", nil); !strings.Contains(fmt.Sprint(lobby["_session"]), "agent:bob:") {
		t.Fatalf("a refused role fill changed bob's embodiment: %v", lobby["_session"])
	}
	got := mustTool(t, bs, "sync_read_context", nil)
	if st := fmt.Sprint(got["state"]); strings.Contains(st, "alice's secret") {
		t.Fatalf("HOLE: bob reads alice's scope: %v", st)
	}
	// The context says whose account drives each agent (issue 25 item 7).
	if acct := get(got, "agents", mine, "account"); acct != "alice" {
		t.Fatalf("the context does not say alice drives %s: %v", mine, got["agents"])
	}
	// Alice still drives her agent.
	if ctx := mustTool(t, as, "sync_read_context", nil); !strings.Contains(fmt.Sprint(get(ctx, "state", "self")), "alice's secret") {
		t.Fatalf("alice lost her agent: %v", ctx["state"])
	}
	// The rule is in help.
	if help := mustTool(t, bs, "sync_help", map[string]any{"key": "roles"}); !strings.Contains(fmt.Sprint(help["content"]), `Ids with ":" belong to people`) {
		t.Fatalf("help key roles: %v", help)
	}
}

// Issue 25 item 2: a sync_wait in progress outlived the caller's access:
// a person who left the room, revoked it from the connection
// (sync_revoke_access) or whose connection was revoked still received the
// room's context, including what was written afterwards, when the wait
// woke. Access and the token are checked again at each wake-up.
func TestAttackWaitOutlivesLostAccess(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	alice, bob := signup(t, srv, "alice"), signup(t, srv, "bob")
	as := connectWithToken(t, srv, mintToken(t, srv, alice, nil)["access_token"].(string))
	mustTool(t, as, "sync_create_room", map[string]any{"room": "lab"})
	mustTool(t, as, "sync_embody", map[string]any{"room": "lab"})
	lib := mustTool(t, as, "sync_help", map[string]any{"key": "standard_library"})
	for _, d := range asList(lib["content"]) {
		if def := d.(map[string]any); def["id"] == "set" {
			mustTool(t, as, "sync_register_action", def)
		}
	}
	var bobID string
	if err := srv.db.QueryRow(ctx, `SELECT id FROM smcp_users WHERE username = 'bob'`).Scan(&bobID); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		name   string
		revoke func(bobToken string)
		code   string
	}{
		{"sync_revoke_access from another call", func(tok string) {
			mustTool(t, connectWithToken(t, srv, tok), "sync_revoke_access", map[string]any{"room": "lab"})
		}, "room_not_in_scope"},
		{"leaving the room", func(string) {
			if err := srv.lobby.LeaveRoom(ctx, bobID, "lab"); err != nil {
				t.Fatal(err)
			}
		}, "room_not_in_scope"},
		{"the connection revoked", func(string) {
			var grant string
			if err := srv.db.QueryRow(ctx, `SELECT grant_id FROM smcp_user_sessions WHERE user_id = $1 ORDER BY created_at DESC LIMIT 1`, bobID).Scan(&grant); err != nil {
				t.Fatal(err)
			}
			if err := srv.auth.RevokeGrant(ctx, bobID, grant); err != nil {
				t.Fatal(err)
			}
		}, "unauthorized"},
	} {
		mustTool(t, as, "sync_share_room", map[string]any{"room": "lab", "username": "bob", "role": "participant"})
		tok := mintToken(t, srv, bob, map[string]string{"lab": "write"})["access_token"].(string)
		bs := connectWithToken(t, srv, tok)
		agent := mustTool(t, bs, "sync_embody", map[string]any{"room": "lab"})["agent"].(string)
		key := fmt.Sprintf("plan%d", i)
		got := make(chan map[string]any, 1)
		go func() {
			out, _ := callTool(t, bs, "sync_wait", map[string]any{"condition": "has(state._shared." + key + ")", "timeout_ms": 30000})
			got <- out
		}()
		pgtest.Eventually(t, 20*time.Second, func() bool {
			a, _ := srv.svc.ListAgents(ctx, substrate.RoomPrincipal("lab"), "lab")
			return slices.ContainsFunc(a, func(a substrate.Agent) bool { return a.ID == agent && a.Status == "waiting" })
		}, "%s: bob's wait to begin", c.name)
		c.revoke(tok)
		mustTool(t, as, "sync_invoke_action", map[string]any{"action": "set", "params": map[string]any{"key": key, "value": "written after " + c.name}})
		select {
		case out := <-got:
			if out["error"] != c.code || strings.Contains(fmt.Sprint(out), "written after") {
				t.Fatalf("HOLE: %s: the wait answered %v", c.name, out)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: the wait did not end", c.name)
		}
		// Stepped out by the revocation, bob's agent stays idle: the
		// refused wait does not mark it active again.
		if i == 0 {
			a, _ := srv.svc.ListAgents(ctx, substrate.RoomPrincipal("lab"), "lab")
			if j := slices.IndexFunc(a, func(a substrate.Agent) bool { return a.ID == agent }); j < 0 || a[j].Status != "idle" {
				t.Fatalf("%s: bob's agent after the refused wait: %+v", c.name, a)
			}
		}
	}
}

// A model denied the loom cannot read it by ceasing to act (review of
// issue 25 item 3): bob's agent is denied loom_aware and doc_read; after
// sync_disembody the same connection observed with an observer's default
// loom permissions, and → view showed the tree and the context the _loom
// scope. Observing keeps the loom permissions of the connection's own
// agent in the room, as the web pages keep the person's web agent's.
func TestAttackLoomDenialSurvivesDisembodying(t *testing.T) {
	bs := loomDeniedParticipant(t, "weave2")
	mustTool(t, bs, "sync_disembody", nil)
	if out, isErr := callTool(t, bs, "sync_loom", map[string]any{"commands": "→ view 1"}); !isErr || strings.Contains(fmt.Sprint(out), "TREE-SECRET") {
		t.Fatalf("HOLE: → view runs for bob's connection once disembodied: %v", out)
	}
	if got := mustTool(t, bs, "sync_read_context", map[string]any{"room": "weave2"}); strings.Contains(fmt.Sprint(got), "TREE-SECRET") || strings.Contains(fmt.Sprint(got["state"]), "_loom") {
		t.Fatalf("HOLE: bob's observing context shows the loom: %v", got["state"])
	}
}

// Review r4 (noticed, fixed by h13): a message gated away from its reader
// still raised the reader's unread counts over MCP too (sync_read_context
// shows them, sync_wait's conditions read them): a whisper about bob, hidden
// from bob, told bob it exists and woke his messages.unread wait.
func TestAttackGatedMessageRaisesNoUnread(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	alice, bob := signup(t, srv, "alice"), signup(t, srv, "bob")
	as := connectWithToken(t, srv, mintToken(t, srv, alice, nil)["access_token"].(string))
	mustTool(t, as, "sync_create_room", map[string]any{"room": "lab"})
	mustTool(t, as, "sync_embody", map[string]any{"room": "lab"})
	mustTool(t, as, "sync_share_room", map[string]any{"room": "lab", "username": "bob", "role": "participant"})
	bs := connectWithToken(t, srv, mintToken(t, srv, bob, map[string]string{"lab": "write"})["access_token"].(string))
	agent := mustTool(t, bs, "sync_embody", map[string]any{"room": "lab"})["agent"].(string)
	mustTool(t, bs, "sync_read_context", map[string]any{"room": "lab"})
	body, _ := json.Marshal(map[string]any{"body": "about-bob", "to": agent})
	if _, err := srv.svc.WriteState(ctx, substrate.RoomPrincipal("lab"), "lab", []substrate.Write{
		{Scope: "_messages", Append: true, Value: body, Enabled: `self != "` + agent + `"`},
	}, false); err != nil {
		t.Fatal(err)
	}
	read := mustTool(t, bs, "sync_read_context", map[string]any{"room": "lab", "only": "messages"})
	raw, _ := json.Marshal(read)
	if !strings.Contains(string(raw), `"unread":0`) || !strings.Contains(string(raw), `"directed_unread":0`) || strings.Contains(string(raw), "about-bob") {
		t.Fatalf("HOLE: bob's counts include a message gated away from him: %s", raw)
	}
	for _, cond := range []string{"messages.unread > 0", "messages.directed_unread > 0"} {
		w, _ := callTool(t, bs, "sync_wait", map[string]any{"condition": cond, "timeout_ms": 300})
		if w["triggered"] == true {
			t.Fatalf("HOLE: bob's sync_wait on %s woke for a message gated away from him: %v", cond, w)
		}
	}
}

// loomDeniedParticipant starts a server with room id owned by alice, where
// bob is a participant embodied over MCP whose agent the room token has
// denied loom_aware and doc_read after planting a tree named TREE-SECRET.
// It returns bob's connection.
func loomDeniedParticipant(t *testing.T, id string) *sdk.ClientSession {
	t.Helper()
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	_, room, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": id})
	roomTok := room["token"].(string)
	alice := owner(t, srv, "alice", id, roomTok)
	bob := signup(t, srv, "bob")
	cs := connect(t, alice, map[string]string{id: "admin"})
	mustTool(t, cs, "sync_share_room", map[string]any{"room": id, "username": "bob", "role": "participant"})
	bs := connect(t, bob, map[string]string{id: "write"})
	agent := mustTool(t, bs, "sync_embody", map[string]any{"room": id})["agent"].(string)
	if code, out, _ := restCall(ctx, srv.base, "POST", "/rooms/"+id+"/loom", roomTok, map[string]any{"commands": `→ new tree "TREE-SECRET" "root"` + "\n→ deny " + agent + " loom_aware doc_read"}); code != 200 {
		t.Fatalf("planting: %d %v", code, out)
	}
	return bs
}

// h32's hole 1, through MCP: the builds and gate results a room's readers
// share were keyed by self and visible scopes, which the room token and a
// read with no agent and no room authority (the view token, and an owner
// observing over MCP, who reads as it does) have in common; but only room
// authority reads an agent's loom memory. Whichever read an unchanged room
// first decided what the other was served: after a room-token read, the
// observing owner's context, state and search showed the agent's stash
// and an entry whose gate reads the stash; read the other way round, the
// room token lost them. The shared computations now carry the read rules'
// key.
func TestAttackObservingOwnerGetsNoRoomAuthorityBuild(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	const id = "rules"
	_, room, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": id})
	roomTok := room["token"].(string)
	alice := owner(t, srv, "alice", id, roomTok)
	code, joined, _ := restCall(ctx, srv.base, "POST", "/rooms/"+id+"/agents", roomTok, map[string]any{"id": "worker", "name": "worker"})
	if code/100 != 2 {
		t.Fatalf("join: %d %v", code, joined)
	}
	workerTok := joined["token"].(string)
	for _, step := range []struct{ tok, cmd string }{
		{roomTok, "→ permit worker loom_aware loom_write"},
		{workerTok, `→ stash "plan" "STASHED-SECRET"`},
	} {
		if code, out, _ := restCall(ctx, srv.base, "POST", "/rooms/"+id+"/loom", step.tok, map[string]any{"commands": step.cmd}); code != 200 {
			t.Fatalf("%s: %d %v", step.cmd, code, out)
		}
	}
	put := func(key string, value any, enabled string) {
		t.Helper()
		body := map[string]any{"scope": "_shared", "key": key, "value": value}
		if enabled != "" {
			body["enabled"] = enabled
		}
		if code, out, _ := restCall(ctx, srv.base, "PUT", "/rooms/"+id+"/state", roomTok, body); code != 200 {
			t.Fatalf("put %s: %d %v", key, code, out)
		}
	}
	put("tell", "GATE-SAYS-STASH", `"loom:stash:plan" in state.worker`)
	put("k", 1, "")
	cs := connect(t, alice, map[string]string{id: "admin"}) // observes: she embodies no agent
	roomRead := func() string {
		t.Helper()
		code, out, _ := restCall(ctx, srv.base, "GET", "/rooms/"+id+"/context?depth=lean", roomTok, nil)
		if code != 200 {
			t.Fatalf("room token context: %d %v", code, out)
		}
		raw, _ := json.Marshal(out)
		return string(raw)
	}
	ownerReads := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		for name, call := range map[string]struct {
			tool string
			args map[string]any
		}{
			"context": {"sync_read_context", map[string]any{"room": id}},
			"state":   {"sync_read_context", map[string]any{"room": id, "only": "state"}},
			"search":  {"sync_search", map[string]any{"room": id, "q": "STASHED"}},
		} {
			raw, _ := json.Marshal(mustTool(t, cs, call.tool, call.args))
			// Search marks the matched words in its snippets.
			out[name] = strings.NewReplacer("«", "", "»", "").Replace(string(raw))
		}
		return out
	}
	checkOwner := func(round string) {
		t.Helper()
		for name, got := range ownerReads() {
			for _, secret := range []string{"STASHED-SECRET", "GATE-SAYS-STASH"} {
				if strings.Contains(got, secret) {
					t.Errorf("HOLE (%s): the observing owner's %s shows %s: %s", round, name, secret, got)
				}
			}
		}
	}
	checkRoom := func(round string) {
		t.Helper()
		got := roomRead()
		for _, secret := range []string{"STASHED-SECRET", "GATE-SAYS-STASH"} {
			if !strings.Contains(got, secret) {
				t.Errorf("HOLE (%s): the room token's context lost %s: %s", round, secret, got)
			}
		}
	}
	// The room token reads the unchanged room first, then the owner.
	checkRoom("room token first")
	checkOwner("room token first")
	checkRoom("room token first, again")
	// A write (a new state) and the other order.
	put("k", 2, "")
	checkOwner("owner first")
	checkRoom("owner first")
	checkOwner("owner first, again")
	// Checked last: a read of hers before the room token's would make the
	// first round "owner first".
	if s := get(mustTool(t, cs, "sync_read_context", map[string]any{"room": id, "only": "agents"}), "_session", "agent"); s != "" {
		t.Fatalf("alice reads %s as agent %v: not the case this checks", id, s)
	}
}

// sync_restrict_scope {"scope": "rooms:*:admin"} on a connection holding
// two rooms once answered scope "": the connection lost every room and its
// agent, and only a person's consent gave them back. A restrict reaching
// past the connection's scope is an error result (scope_denied) with the
// current scope and the way to widen, and nothing changes.
func TestAttackRestrictScopeWidening(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	alice := signup(t, srv, "alice")
	as := connectWithToken(t, srv, mintToken(t, srv, alice, nil)["access_token"].(string))
	mustTool(t, as, "sync_create_room", map[string]any{"room": "guild"})
	mustTool(t, as, "sync_create_room", map[string]any{"room": "side"})
	cs := connectWithToken(t, srv, mintToken(t, srv, alice, map[string]string{"guild": "admin", "side": "read"})["access_token"].(string))
	mustTool(t, cs, "sync_embody", map[string]any{"room": "guild"})
	lobbyOf := func() string {
		t.Helper()
		v := mustTool(t, cs, "sync_lobby", nil)
		raw, _ := json.Marshal([]any{v["rooms"], v["embodied"], v["can_create_rooms"]})
		return string(raw)
	}
	before := lobbyOf()
	for _, scope := range []string{"rooms:*:admin", "rooms:side:write", "rooms:guild:read rooms:*:observe"} {
		out, isErr := callTool(t, cs, "sync_restrict_scope", map[string]any{"scope": scope})
		if !isErr || out["error"] != "scope_denied" {
			t.Fatalf("HOLE: restrict %q widened the connection: %v", scope, out)
		}
		if cur, _ := out["scope"].(string); !strings.Contains(cur, "rooms:guild:admin") || !strings.Contains(cur, "rooms:side:read") ||
			!strings.Contains(fmt.Sprint(out["hint"]), "consent") {
			t.Fatalf("restrict %q: the refusal names neither the current scope nor how to widen: %v", scope, out)
		}
		if got := lobbyOf(); got != before {
			t.Fatalf("HOLE: a refused restrict %q changed the connection:\n%s\nwas\n%s", scope, got, before)
		}
	}
	if !strings.Contains(before, `"agent":"alice`) {
		t.Fatalf("not embodied before: %s", before)
	}
	if out := mustTool(t, cs, "sync_restrict_scope", map[string]any{"scope": "rooms:guild:admin"}); out["scope"] != "rooms:guild:admin" {
		t.Fatalf("a narrowing restrict: %v", out)
	}
}

// The last owner demotes herself with sync_share_room (issue 41, 6): she
// named her own username with a lesser role and the room was left with
// no owner. Refused with last_owner and the tool call that is the way out.
func TestAttackShareRoomDemotesLastOwner(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	_, room, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": "keep"})
	alice := owner(t, srv, "alice", "keep", room["token"].(string))
	cs := connect(t, alice, map[string]string{"keep": "admin"})
	for _, role := range []string{"collaborator", "participant", "observer"} {
		out, isErr := callTool(t, cs, "sync_share_room", map[string]any{"room": "keep", "username": "alice", "role": role})
		hint, _ := out["hint"].(string)
		if !isErr || out["error"] != "last_owner" || !strings.Contains(hint, `sync_share_room {"room": "keep"`) || !strings.Contains(hint, `"role": "owner"`) {
			t.Fatalf("HOLE: the only owner made herself %s: isError %v, %v", role, isErr, out)
		}
	}
	var access string
	if err := srv.db.QueryRow(ctx, `SELECT r.access FROM smcp_user_rooms r JOIN smcp_users u ON u.id = r.user_id WHERE u.username = 'alice' AND r.room_id = 'keep'`).Scan(&access); err != nil || access != "owner" {
		t.Fatalf("HOLE: after the refusals alice is %q (%v)", access, err)
	}
	// With a second owner she may step down.
	signup(t, srv, "bob")
	mustTool(t, cs, "sync_share_room", map[string]any{"room": "keep", "username": "bob", "role": "owner"})
	mustTool(t, cs, "sync_share_room", map[string]any{"room": "keep", "username": "alice", "role": "collaborator"})
}

// deepValue is issue 41's value: nested 9,900 levels (some 40 KB).
func deepValue(levels int) string {
	var b strings.Builder
	for i := range levels {
		if i%2 == 0 {
			b.WriteString(`[`)
		} else {
			b.WriteString(`{"k":`)
		}
	}
	b.WriteString(`"x"`)
	for i := levels - 1; i >= 0; i-- {
		if i%2 == 0 {
			b.WriteString(`]`)
		} else {
			b.WriteString(`}`)
		}
	}
	return b.String()
}

// Issue 41.1: a context holding one value nested 9,900 levels deep
// (stored before values' nesting was bounded) became a text of some
// 100 MB for the model: every level indented every line below it. The
// text costs what the JSON does: levels past the text's depth are written
// as their JSON on one line.
func TestAttackDeepValueTextCostsWhatTheJSONDoes(t *testing.T) {
	body := []byte(`{"state":{"_shared":{"deep":` + deepValue(9900) + `,"after":"shown"}}}`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	text := mcp.Text(body)
	runtime.ReadMemStats(&after)
	if len(text) > 2*len(body) {
		t.Fatalf("HOLE: %d bytes of JSON made %d bytes of text", len(body), len(text))
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 64*uint64(len(body)) {
		t.Fatalf("HOLE: rendering %d bytes of JSON allocated %d MB", len(body), n>>20)
	}
	if !strings.Contains(text, "after: shown") || !strings.Contains(text, `{"k":[{"k":[`) {
		t.Fatalf("the text lost the value: %.600s", text)
	}
}

// Issue 41.1, over MCP: a value nested past the limit (64) is refused with
// invalid_value naming the limit when an action's params carry it, when
// an action builds it from shallow params, and in a message body; a view
// computing one shows an error in its slot.
func TestAttackDeepValueRefusedOverMCP(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	alice := signup(t, srv, "alice")
	as := connectWithToken(t, srv, mintToken(t, srv, alice, nil)["access_token"].(string))
	mustTool(t, as, "sync_create_room", map[string]any{"room": "deep"})
	mustTool(t, as, "sync_embody", map[string]any{"room": "deep"})
	mustTool(t, as, "sync_register_action", map[string]any{"id": "wrap", "params": map[string]any{"v": map[string]any{}},
		"writes": []any{map[string]any{"scope": "_shared", "key": "wrapped", "value": map[string]any{"x": map[string]any{"y": "${params.v}"}}}}})
	nested := func(n int) any {
		var v any
		if err := json.Unmarshal([]byte(deepValue(n)), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	refused := func(what string, out map[string]any, isErr bool) {
		t.Helper()
		if !isErr || out["error"] != "invalid_value" || fmt.Sprint(out["limit"]) != "64" || !strings.Contains(fmt.Sprint(out["message"]), "64") {
			t.Errorf("HOLE: %s: %v %.400v", what, isErr, out)
		}
	}
	out, isErr := callTool(t, as, "sync_invoke_action", map[string]any{"action": "wrap", "params": map[string]any{"v": nested(63)}})
	refused("an action wrapping params", out, isErr)
	out, isErr = callTool(t, as, "sync_invoke_action", map[string]any{"action": "wrap", "params": map[string]any{"v": nested(200)}})
	refused("params", out, isErr)
	out, isErr = callTool(t, as, "sync_send_message", map[string]any{"body": nested(64)})
	refused("a message body", out, isErr)
	ctx := mustTool(t, as, "sync_read_context", map[string]any{"depth": "full"})
	if s := fmt.Sprint(ctx["state"]); strings.Contains(s, "wrapped") {
		t.Errorf("HOLE: a refused invocation wrote: %.400s", s)
	}
	lit := strings.Repeat("[", 70) + "1" + strings.Repeat("]", 70)
	mustTool(t, as, "sync_register_view", map[string]any{"id": "deepview", "expr": lit})
	views := mustTool(t, as, "sync_read_context", map[string]any{"only": "views"})
	if msg := fmt.Sprint(get(views, "views", "deepview", "_error")); !strings.Contains(msg, "64 levels") {
		t.Errorf("HOLE: a view 70 levels deep is not an error in its slot: %.400v", views["views"])
	}
}

// A task id is the only handle on a task, and it is bound to the grant
// that made it: another grant's poll or cancel of it, a guessed id and a
// near miss are all "not found" (the same error, so that a probe learns
// nothing), and the task goes on untouched.
func TestAttackTasksOfAnotherGrant(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	aliceP, alice := tasksPerson(t, srv, "alice")
	bob := tasksRoom(t, srv, "bob")
	created, e := waitCall(t, srv.base, alice, map[string]any{"condition": "has(state._shared.go)", "timeout_ms": 30000}, true)
	if e != nil {
		t.Fatal(e)
	}
	id := created["taskId"].(string)
	// Another client of alice's own is another grant too.
	aliceOther := aliceP.Token(t, "Another client", nil)["access_token"].(string)
	// The id is its random part, then its room: a near miss and a guess
	// keep the room and change the random part.
	random, inRoom, _ := strings.Cut(id, ".")
	last := random[len(random)-1]
	nearMiss := random[:len(random)-1] + string(rune('A'+(last-'A'+1)%26)) + "." + inRoom
	for name, c := range map[string]struct{ token, id string }{
		"bob's poll":                 {bob, id},
		"alice's other grant":        {aliceOther, id},
		"a guessed id":               {bob, "AAAAAAAAAAAAAAAAAAAAAAAAAA"},
		"a guessed id in her room":   {alice, "AAAAAAAAAAAAAAAAAAAAAAAAAA." + inRoom},
		"a near miss":                {alice, nearMiss},
		"her id with bob's room":     {alice, random + "." + base64.RawURLEncoding.EncodeToString([]byte("lab-bob"))},
		"the id's hash as stored":    {alice, hashOf(id)},
		"the id's random part alone": {alice, random},
	} {
		for _, method := range []string{"tasks/get", "tasks/cancel"} {
			res, e := rpc(t, srv.base, c.token, method, map[string]any{"taskId": c.id}, true)
			if e == nil || e["code"].(float64) != -32602 || !strings.Contains(e["message"].(string), "not found") {
				t.Errorf("%s, %s: %v %v, want -32602 not found", name, method, res, e)
			}
		}
	}
	if got, e := taskGet(t, srv.base, alice, id); e != nil || got["status"] != "working" {
		t.Fatalf("alice's task after the attempts: %v %v", got, e)
	}
}
