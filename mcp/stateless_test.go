package mcp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// rotating sends each request to the next of several servers, with the
// current bearer token.
type rotating struct {
	hosts []string
	n     atomic.Int64
	token atomic.Value
}

func (r *rotating) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	hosts := r.hosts
	req.URL.Host = hosts[int(r.n.Add(1))%len(hosts)]
	req.Host = req.URL.Host
	req.Header.Set("Authorization", "Bearer "+r.token.Load().(string))
	return http.DefaultTransport.RoundTrip(req)
}

// No session state lives in a process: calls alternate between two server
// instances (separate pools, caches and listeners) on one database, a new
// instance picks up mid-session, and a refreshed token keeps the
// embodiment.
func TestStatelessAcrossServers(t *testing.T) {
	db := pgtest.New(t)
	a := startServer(t, db)
	b := startServerAt(t, db, a.base) // same public URL, so tokens are for it
	alice := signup(t, a, "alice")
	tok := mintToken(t, a, alice, nil)

	rt := &rotating{hosts: []string{host(a.base), host(b.base)}}
	rt.token.Store(tok["access_token"].(string))
	connect := func() *sdk.ClientSession {
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(),
			&sdk.StreamableClientTransport{Endpoint: a.base + "/mcp", HTTPClient: &http.Client{Transport: rt}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	cs := connect()
	mustTool(t, cs, "sync_create_room", map[string]any{"room": "stateless"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "stateless"})
	for i := 0; i < 4; i++ { // alternating servers
		out := mustTool(t, cs, "sync_lobby", nil)
		if get(out, "embodied", "agent") != "alice:conformance" {
			t.Fatalf("call %d lost the embodiment: %v", i, out["embodied"])
		}
	}
	mustTool(t, cs, "sync_register_action", map[string]any{"id": "tick", "writes": []any{map[string]any{"key": "n", "increment": 1}}})
	mustTool(t, cs, "sync_invoke_action", map[string]any{"action": "tick"})

	// A new server instance (as after a restart) serves the same session.
	c := startServerAt(t, db, a.base)
	rt.hosts = []string{host(c.base)}
	mustTool(t, cs, "sync_invoke_action", map[string]any{"action": "tick"})

	// After a token refresh the grant, and so the session row, is the same.
	res, err := http.PostForm(a.base+"/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok["refresh_token"].(string)},
		"client_id": {tok["client_id"].(string)}})
	if err != nil {
		t.Fatal(err)
	}
	var fresh map[string]any
	_ = json.NewDecoder(res.Body).Decode(&fresh)
	res.Body.Close()
	if fresh["access_token"] == nil {
		t.Fatalf("refresh: %v", fresh)
	}
	rt.token.Store(fresh["access_token"].(string))
	cs2 := connect()
	ctx := mustTool(t, cs2, "sync_read_context", nil)
	if get(ctx, "_session", "agent") != "alice:conformance" || get(ctx, "state", "_shared", "n") != float64(2) {
		t.Fatalf("after refresh: session %v, n=%v", ctx["_session"], get(ctx, "state", "_shared", "n"))
	}
	// And the embodied agent is the one the actions ran as.
	var writer string
	_ = db.Pool.QueryRow(context.Background(), `SELECT writer FROM state WHERE room_id = 'stateless' AND scope = '_shared' AND key = 'n'`).Scan(&writer)
	if writer != "alice:conformance" {
		t.Fatalf("writer %q", writer)
	}
}

func host(base string) string { return strings.TrimPrefix(base, "http://") }
