package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/oauth/oauthtest"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// MCP tools/call against the same operation over REST: the MCP layer's
// overhead (session resolution, JSON-RPC, tool dispatch).
//
//	go test ./mcp -run '^$' -bench . -benchtime 3s
func BenchmarkMCPvsREST(b *testing.B) {
	db := pgtest.New(b)
	srv := startServer(b, db)
	alice := signup(b, srv, "alice")
	tok := mintToken(b, srv, alice, nil)["access_token"].(string)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil).Connect(context.Background(),
		&sdk.StreamableClientTransport{Endpoint: srv.base + "/mcp", HTTPClient: &http.Client{Transport: oauthtest.Bearer{Token: tok}}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	call := func(name string, args map[string]any) {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
		if err != nil || res.IsError {
			b.Fatalf("%s: %v %v", name, err, res)
		}
	}
	call("sync_create_room", map[string]any{"room": "bench"})
	call("sync_embody", map[string]any{"room": "bench"})
	call("sync_register_action", map[string]any{"id": "move", "if": "true", "writes": []any{
		map[string]any{"key": "moves", "increment": 1}, map[string]any{"scope": "${self}", "key": "last", "value": "${now}"}}})

	// The same room over REST, with an agent token, on the same server.
	p := substrate.RoomPrincipal("bench")
	ag, err := srv.svc.Join(context.Background(), p, "bench", substrate.JoinRequest{ID: "rest-agent", Name: "R"})
	if err != nil {
		b.Fatal(err)
	}
	restCall := func(method, path string, body any) {
		var rd *bytes.Reader
		if body != nil {
			raw, _ := json.Marshal(body)
			rd = bytes.NewReader(raw)
		} else {
			rd = bytes.NewReader(nil)
		}
		req, _ := http.NewRequest(method, srv.base+path, rd)
		req.Header.Set("Authorization", "Bearer "+ag.Token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode >= 300 {
			b.Fatalf("%s %s: %d", method, path, res.StatusCode)
		}
	}
	// Raw JSON-RPC over HTTP, the body discarded as on the REST side, so
	// the comparison is the servers' work, not the Go client's decoding.
	rpc := func(name string, args map[string]any) {
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
			"params": map[string]any{"name": name, "arguments": args}})
		req, _ := http.NewRequest("POST", srv.base+"/mcp", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || bytes.Contains(raw, []byte(`"isError":true`)) {
			b.Fatalf("%s: %d %s", name, res.StatusCode, raw)
		}
	}
	b.Run("mcp/read_context", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			rpc("sync_read_context", map[string]any{})
		}
	})
	b.Run("rest/read_context", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			restCall("GET", "/rooms/bench/context", nil)
		}
	})
	b.Run("mcp/invoke", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			rpc("sync_invoke_action", map[string]any{"action": "move"})
		}
	})
	b.Run("rest/invoke", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			restCall("POST", "/rooms/bench/actions/move/invoke", map[string]any{})
		}
	})
}
