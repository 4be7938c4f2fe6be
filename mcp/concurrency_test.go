package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// restCall sends one REST request and returns the status and decoded body.
func restCall(ctx context.Context, base, method, path, token string, body any) (int, map[string]any, error) {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, nil
}

// The server must never hang on its own connection pool. With a pool of
// two connections (pgtest.MaxConns), at the same moment: 16 agents read the
// context of a room where they have unread messages (the read marks them
// read), 16 invocations write to it, 16 waits are woken by a write, and 8
// MCP calls are served. Before the fix each context read held its read
// transaction's connection while asking for a second one to mark messages
// read, and the server stopped answering.
func TestNoHangWithTinyPool(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	must := func(code int, body map[string]any, err error) map[string]any {
		t.Helper()
		if err != nil || code >= 300 {
			t.Fatalf("setup: %d %v %v", code, body, err)
		}
		return body
	}
	room := must(restCall(ctx, srv.base, "POST", "/rooms", "", map[string]any{"id": "busy"}))
	roomTok := room["token"].(string)
	must(restCall(ctx, srv.base, "PUT", "/rooms/busy/actions", roomTok, map[string]any{"id": "bump",
		"writes": []any{map[string]any{"key": "n", "increment": 1}}}))
	const n = 16
	join := func(prefix string) []string {
		toks := make([]string, n)
		for i := range toks {
			toks[i] = must(restCall(ctx, srv.base, "POST", "/rooms/busy/agents", roomTok,
				map[string]any{"id": fmt.Sprintf("%s%d", prefix, i), "name": prefix}))["token"].(string)
		}
		return toks
	}
	readers, writers, waiters := join("reader"), join("writer"), join("waiter")
	for i := range 50 {
		must(restCall(ctx, srv.base, "POST", "/rooms/busy/actions/_send_message/invoke", roomTok,
			map[string]any{"params": map[string]any{"body": fmt.Sprintf("note %d", i)}}))
	}

	alice := signup(t, srv, "alice")
	cs := connect(t, alice, nil)
	mustTool(t, cs, "sync_create_room", map[string]any{"room": "side"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "side"})
	mustTool(t, cs, "sync_invoke_action", map[string]any{"action": "_send_message", "params": map[string]any{"body": "hi"}})
	mustTool(t, cs, "sync_register_action", map[string]any{"id": "go", "writes": []any{map[string]any{"scope": "_shared", "key": "go", "value": true}}})

	// Every request gets a client-side limit well above what a healthy
	// server needs and well below a hang.
	const limit = 15 * time.Second
	var mu sync.Mutex
	var failures []string
	var slowest time.Duration
	requests := 0
	record := func(what string, start time.Time, err error) {
		d := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		requests++
		slowest = max(slowest, d)
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s after %v: %v", what, d.Round(time.Millisecond), err))
		}
	}
	rest := func(what, method, path, token string, body any) {
		rctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		start := time.Now()
		code, out, err := restCall(rctx, srv.base, method, path, token, body)
		if err == nil && code != 200 {
			err = fmt.Errorf("status %d: %v", code, out)
		}
		if err == nil && what == "wait" && out["triggered"] != true {
			err = fmt.Errorf("not triggered: %v", out)
		}
		record(what, start, err)
	}

	var waitersUp, all sync.WaitGroup
	for i := range n {
		waitersUp.Add(1)
		all.Add(1)
		go func() {
			defer all.Done()
			waitersUp.Done()
			rest("wait", "GET", "/rooms/busy/wait?timeout=12000&messages_limit=5&condition="+url.QueryEscape("state._shared.go == true"), waiters[i], nil)
		}()
	}
	// MCP waits too: each wake-up checks the access token, the session and
	// the person's access again (issue 25 item 2), with the same two
	// connections.
	const mcpWaits = 4
	for range mcpWaits {
		all.Add(1)
		go func() {
			defer all.Done()
			cctx, cancel := context.WithTimeout(ctx, limit)
			defer cancel()
			start := time.Now()
			res, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: "sync_wait", Arguments: map[string]any{"room": "side", "condition": "has(state._shared.go)", "timeout_ms": 12000}})
			if err == nil && (res.IsError || !strings.Contains(fmt.Sprint(res.StructuredContent), "triggered:true")) {
				err = fmt.Errorf("sync_wait: %v", res.StructuredContent)
			}
			record("mcp wait", start, err)
		}()
	}
	waitersUp.Wait()
	for i := range n {
		all.Add(3)
		go func() { defer all.Done(); rest("context", "GET", "/rooms/busy/context", readers[i], nil) }()
		go func() {
			defer all.Done()
			rest("invoke", "POST", "/rooms/busy/actions/bump/invoke", writers[i], map[string]any{})
		}()
		go func() {
			defer all.Done()
			if i%2 == 0 {
				return
			}
			cctx, cancel := context.WithTimeout(ctx, limit)
			defer cancel()
			start := time.Now()
			res, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: "sync_read_context", Arguments: map[string]any{}})
			if err == nil && res.IsError {
				err = fmt.Errorf("tool error: %s", resultText(res))
			}
			record("mcp", start, err)
		}()
	}
	// Wake the waiters once they all wait (REST and MCP alike: each counts
	// in OpenWaits once it would see any write), so the writes below wake
	// them rather than meet a condition already true. The waits' own limit
	// (limit) is below Eventually's: a wait that never opens fails there.
	pgtest.Eventually(t, 30*time.Second, func() bool { return srv.svc.Stats().OpenWaits >= n+mcpWaits },
		"%d waits open (%v are)", n+mcpWaits, func() any { return srv.svc.Stats().OpenWaits })
	rest("write", "PUT", "/rooms/busy/state", roomTok, map[string]any{"scope": "_shared", "key": "go", "value": true})
	mustTool(t, cs, "sync_invoke_action", map[string]any{"action": "go"})
	all.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests failed with a pool of %d connections, e.g.:\n%v", len(failures), requests, pgtest.MaxConns, failures[:min(5, len(failures))])
	}
	t.Logf("slowest request %v", slowest.Round(time.Millisecond))
	if slowest > 5*time.Second {
		t.Fatalf("a request took %v with a pool of %d connections", slowest, pgtest.MaxConns)
	}
	// The reads marked the messages read.
	var seen int64
	_ = srv.db.QueryRow(ctx, `SELECT min(last_seen_seq) FROM agents WHERE room_id = 'busy' AND id LIKE 'reader%'`).Scan(&seen)
	if seen == 0 {
		t.Fatal("context reads did not mark messages read")
	}
}
