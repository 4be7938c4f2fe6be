package mcp_test

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/syncsubstrate/sync/mcp"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// On Citus every statement of an MCP call is routed to the one worker
// holding its room (issue 46): a session's initialize and tools/call of
// read, invoke, wait (woken) and search through the real handler, in
// rooms on every worker, each statement's plan checked
// (pgtest.CheckRouting). Sign-up and consent, which write the reference
// tables of users and grants, are set-up, not what is checked. Without
// Citus it is skipped.
func TestCitusRoutingOfMCPCalls(t *testing.T) {
	rt := pgtest.NewRouting(t)
	srv := startServer(t, rt.DB(t))
	ctx := context.Background()
	rooms := rt.RoomsOnEveryWorker(t, "routed", 2)
	grant := map[string]string{}
	tokens := map[string]string{}
	for _, id := range rooms {
		_, room, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": id})
		tokens[id] = room["token"].(string)
		grant[id] = "admin"
	}
	alice := owner(t, srv, "alice", rooms[0], tokens[rooms[0]])
	for _, id := range rooms[1:] {
		var uid string
		_ = srv.db.QueryRow(ctx, `SELECT id FROM smcp_users WHERE username = 'alice'`).Scan(&uid)
		if _, err := srv.lobby.ClaimRoom(ctx, uid, id, tokens[id], false); err != nil {
			t.Fatal(err)
		}
	}
	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			ClientName: "routing test", RedirectURIs: []string{"http://localhost:1/callback"}, TokenEndpointAuthMethod: "none",
			GrantTypes: []string{"authorization_code", "refresh_token"}, ResponseTypes: []string{"code"}}},
		RedirectURL:              "http://localhost:1/callback",
		AuthorizationCodeFetcher: consent(alice, grant),
	})
	if err != nil {
		t.Fatal(err)
	}
	session := func() *sdk.ClientSession {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).
			Connect(cctx, &sdk.StreamableClientTransport{Endpoint: alice.Base + "/mcp", OAuthHandler: h}, nil)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	// The first session goes through consent and the token exchange;
	// what is checked starts with the next one's initialize, as a client
	// holding its token connects.
	cs := session()
	mustTool(t, cs, "sync_lobby", nil)
	cs.Close()
	rt.Reset()
	cs = session()
	mustTool(t, cs, "sync_lobby", nil)

	for _, id := range rooms {
		mustTool(t, cs, "sync_embody", map[string]any{"room": id})
		_, bob, _ := restCall(ctx, srv.base, "POST", "/rooms/"+id+"/agents", tokens[id], map[string]any{"id": "bob", "name": "bob"})
		bobTok := bob["token"].(string)
		root := mustTool(t, cs, "sync_send_message", map[string]any{"body": "When does the ferry leave?", "subject": "Ferry"})
		mustTool(t, cs, "sync_invoke_action", map[string]any{"action": "_send_message", "params": map[string]any{"body": "and the last one back?"}})
		mustTool(t, cs, "sync_read_context", map[string]any{"only": "messages"})
		mustTool(t, cs, "sync_read_context", nil)
		if hits := mustTool(t, cs, "sync_search", map[string]any{"q": "ferry"}); len(get(hits, "hits").([]any)) == 0 {
			t.Fatalf("%s: search: %v", id, hits)
		}
		_, info, _ := restCall(ctx, srv.base, "GET", "/rooms/"+id, tokens[id], nil)
		done := make(chan map[string]any, 1)
		go func() {
			done <- mustTool(t, cs, "sync_wait", map[string]any{"thread": root["seq"], "since": info["seq"], "timeout_ms": 10000})
		}()
		restCall(ctx, srv.base, "POST", "/rooms/"+id+"/actions/_send_message/invoke", bobTok, map[string]any{"params": map[string]any{"body": "at noon", "reply_to": root["seq"]}})
		if w := <-done; get(w, "triggered") != true {
			t.Fatalf("%s: wait: %v", id, w)
		}
	}
	if rt.WorkerOf(t, rooms[0]) == rt.WorkerOf(t, rooms[1]) {
		t.Fatalf("rooms %v on one worker", rooms)
	}
	if n := rt.CheckRouting(t); n < 20 {
		t.Errorf("only %d distinct statements checked", n)
	}
}

// A wait run as a task on the cluster: its creation, polls, completion,
// cancel and lease renewal each reach the room's shard alone (the task id
// carries its room), as the blocking wait's statements do. The expiry
// sweep is the one listed exception.
func TestCitusRoutingOfTasks(t *testing.T) {
	// Leases renewed every 300 ms, so that the renewal is among the
	// statements checked.
	defer mcp.SetTaskLease(900 * time.Millisecond)()
	rt := pgtest.NewRouting(t)
	srv := startServer(t, rt.DB(t))
	token := tasksRoom(t, srv, "alice")
	rt.Reset()

	created, e := waitCall(t, srv.base, token, map[string]any{"condition": "has(state._shared.go)", "timeout_ms": 30000}, true)
	if e != nil {
		t.Fatal(e)
	}
	id, _ := created["taskId"].(string)
	if got, e := taskGet(t, srv.base, token, id); e != nil || got["status"] != "working" {
		t.Fatalf("tasks/get: %v %v", got, e)
	}
	setKey(t, srv.base, token, "go")
	if end := taskEnd(t, srv.base, token, id); end["status"] != "completed" {
		t.Fatalf("task ended %v", end)
	}
	second, e := waitCall(t, srv.base, token, map[string]any{"condition": "has(state._shared.never)", "timeout_ms": 30000}, true)
	if e != nil {
		t.Fatal(e)
	}
	var lease0 time.Time
	_ = srv.db.QueryRow(context.Background(), `SELECT max(lease_until) FROM mcp_tasks WHERE room_id = 'lab-alice'`).Scan(&lease0)
	pgtest.Eventually(t, 20*time.Second, func() bool {
		var lease time.Time
		_ = srv.db.QueryRow(context.Background(), `SELECT max(lease_until) FROM mcp_tasks WHERE room_id = 'lab-alice'`).Scan(&lease)
		return lease.After(lease0)
	}, "the open task's lease to be renewed")
	if _, e := rpc(t, srv.base, token, "tasks/cancel", map[string]any{"taskId": second["taskId"]}, true); e != nil {
		t.Fatalf("tasks/cancel: %v", e)
	}
	if n := rt.CheckRouting(t); n < 5 {
		t.Errorf("only %d distinct statements checked", n)
	}
}
