package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// Search, threads and acknowledgements through the tools (issue 31): a
// model searches the room and all its rooms, replies in a thread, reads
// and waits on it, asks for and gives an acknowledgement, and every hint
// it is given is a tool call.
func TestSearchThreadsAcksOverMCP(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	_, room, _ := restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": "ship"})
	tok := room["token"].(string)
	alice := owner(t, srv, "alice", "ship", tok)
	cs := connect(t, alice, map[string]string{"ship": "admin"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "ship"})
	_, bob, _ := restCall(ctx, srv.base, "POST", "/rooms/ship/agents", tok, map[string]any{"id": "bob", "name": "bob"})
	bobTok := bob["token"].(string)

	root := mustTool(t, cs, "sync_send_message", map[string]any{"body": "When does the ferry leave?", "subject": "Ferry"})
	seq := root["seq"].(float64)
	if code, out, _ := restCall(ctx, srv.base, "POST", "/rooms/ship/actions/_send_message/invoke", bobTok,
		map[string]any{"params": map[string]any{"body": "At noon, please confirm", "reply_to": seq, "ack": true}}); code != 200 {
		t.Fatalf("bob's reply: %d %v", code, out)
	}
	read := mustTool(t, cs, "sync_read_context", map[string]any{"only": "messages"})
	threads, _ := get(read, "messages", "threads").([]any)
	if len(threads) != 1 || !strings.HasPrefix(fmt.Sprint(threads[0].(map[string]any)["read"]), "sync_read_context") {
		t.Fatalf("threads: %v", threads)
	}
	whole := mustTool(t, cs, "sync_read_context", map[string]any{"thread": seq, "only": "messages"})
	if n := len(get(whole, "messages", "recent").([]any)); n != 2 {
		t.Fatalf("the thread whole: %d messages", n)
	}
	reply := get(whole, "messages", "recent").([]any)[1].(map[string]any)
	if reply["ack"] != true || get(reply, "receipts", "pending") == nil {
		t.Fatalf("the reply asks for acknowledgement with receipts: %v", reply)
	}
	ackRes := mustTool(t, cs, "sync_invoke_action", map[string]any{"action": "_ack", "params": map[string]any{"seq": reply["seq"]}})
	if get(ackRes, "builtin_result", "pending") != float64(0) {
		t.Fatalf("_ack: %v", ackRes)
	}

	hits := mustTool(t, cs, "sync_search", map[string]any{"q": "ferry noon", "limit": 1})
	if h, _ := get(hits, "hits").([]any); len(h) != 1 || !strings.Contains(fmt.Sprint(h[0].(map[string]any)["snippet"]), "«noon»") {
		t.Fatalf("search: %v", hits)
	}
	all := mustTool(t, cs, "sync_search", map[string]any{"q": "ferry", "room": "*"})
	if get(all, "rooms_searched") != float64(1) || get(all, "room") != "*" || get(all, "hits").([]any)[0].(map[string]any)["room"] != "ship" {
		t.Fatalf("search of all rooms: %v", all)
	}
	if more, _ := get(mustTool(t, cs, "sync_search", map[string]any{"q": "ferry", "limit": 1}), "more").(string); !strings.HasPrefix(more, "sync_search {") {
		t.Fatalf("the next page is not a tool call: %q", more)
	}
	res, isErr := callTool(t, cs, "sync_search", map[string]any{"q": ""})
	raw, _ := json.Marshal(res)
	if !isErr || !strings.Contains(string(raw), "invalid_field") || !strings.Contains(string(raw), "sync_search") {
		t.Fatalf("an empty query: %v %s", isErr, raw)
	}
	// A wait on the thread without a condition returns with its next
	// message (since: the seq it waits after, so that the test does not
	// race the wait's start).
	_, info, _ := restCall(ctx, srv.base, "GET", "/rooms/ship", tok, nil)
	done := make(chan map[string]any, 1)
	go func() {
		done <- mustTool(t, cs, "sync_wait", map[string]any{"thread": seq, "since": info["seq"], "timeout_ms": 10000})
	}()
	restCall(ctx, srv.base, "POST", "/rooms/ship/actions/_send_message/invoke", bobTok, map[string]any{"params": map[string]any{"body": "boarding", "reply_to": seq}})
	if w := <-done; get(w, "triggered") != true {
		t.Fatalf("wait on the thread: %v", w)
	}
}
