package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/oauth/oauthtest"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// rotate sends each request to the next server, with the current token.
type rotate struct {
	hosts []atomic.Value
	n     atomic.Int64
	token atomic.Value
}

func (r *rotate) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.URL.Host = r.hosts[int(r.n.Add(1))%len(r.hosts)].Load().(string)
	req.Host = req.URL.Host
	req.Header.Set("Authorization", "Bearer "+r.token.Load().(string))
	return http.DefaultTransport.RoundTrip(req)
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strings.Split(ln.Addr().String(), ":")[1]
}

// Two syncd processes on one database serve one MCP session: calls
// alternate between them; one is restarted mid-session; a refreshed token
// keeps the embodiment. Nothing of the session lives in a process.
func TestMCPSessionAcrossProcesses(t *testing.T) {
	dbURL := pgtest.URL(t)
	port := freePort(t)
	public := "http://localhost:" + port
	cfg := testConfig(t, "-addr", "127.0.0.1:"+port, "-database-url", dbURL, "-rate-limit", "-1", "-signup", "open", "-public-url", public)
	if err := run(context.Background(), "migrate", cfg, nil); err != nil {
		t.Fatal(err)
	}
	a, stopA := start(t, cfg)
	b := startChild(t, dbURL, "-signup", "open", "-public-url", public) // another process, same public URL

	alice := oauthtest.SignUp(t, public, "alice", "")
	tok := alice.Token(t, "Two Process", nil)
	rt := &rotate{hosts: make([]atomic.Value, 2)}
	rt.hosts[0].Store(strings.TrimPrefix(a, "http://"))
	rt.hosts[1].Store(strings.TrimPrefix(b, "http://"))
	rt.token.Store(tok["access_token"].(string))
	connect := func() *sdk.ClientSession {
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(),
			&sdk.StreamableClientTransport{Endpoint: public + "/mcp", HTTPClient: &http.Client{Transport: rt}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	call := func(cs *sdk.ClientSession, name string, args map[string]any) map[string]any {
		t.Helper()
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var out map[string]any
		raw, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(raw, &out)
		if res.IsError { // errors are text only
			t.Fatalf("%s: %v", name, res.Content[0].(*sdk.TextContent).Text)
		}
		return out
	}
	cs := connect()
	call(cs, "sync_create_room", map[string]any{"room": "shared-room"})
	call(cs, "sync_embody", map[string]any{"room": "shared-room"})
	call(cs, "sync_register_action", map[string]any{"id": "tick", "writes": []any{map[string]any{"key": "n", "increment": 1}}})
	for i := 0; i < 4; i++ { // alternating processes
		out := call(cs, "sync_invoke_action", map[string]any{"action": "tick"})
		if s, _ := out["_session"].(map[string]any); s["agent"] != "alice:two-process" {
			t.Fatalf("call %d lost the embodiment: %v", i, out["_session"])
		}
	}

	// Restart the in-process server: the session goes on.
	stopA()
	_, stopA = start(t, cfg) // same address, so the rotation needs no change
	defer stopA()
	call(cs, "sync_invoke_action", map[string]any{"action": "tick"})

	// Refresh the token: same grant, same session row.
	res, err := http.PostForm(public+"/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok["refresh_token"].(string)},
		"client_id": {tok["client_id"].(string)}})
	if err != nil {
		t.Fatal(err)
	}
	var fresh map[string]any
	_ = json.NewDecoder(res.Body).Decode(&fresh)
	res.Body.Close()
	rt.token.Store(fresh["access_token"].(string))
	ctx := call(connect(), "sync_read_context", nil)
	shared, _ := ctx["state"].(map[string]any)["_shared"].(map[string]any)
	if s, _ := ctx["_session"].(map[string]any); s["agent"] != "alice:two-process" || shared["n"] != float64(5) {
		t.Fatalf("after restart and refresh: session %v, n=%v", ctx["_session"], shared["n"])
	}
}

// A new grant's first MCP calls often arrive at once (a JSON-RPC batch, or
// a host sending tools/list and a tool call right after connecting). Each
// resolves the grant's session row, which the first of them creates: 32 at
// once, split over two processes on one database, must all succeed and
// leave exactly one row, with the default pool and with a tiny one. Before
// the fix a call whose statement began before another's insert committed
// found no row ("resolve MCP session: no rows in result set", an internal
// error).
func TestFirstCallsOfNewGrantAtOnce(t *testing.T) {
	for _, conns := range []string{"16", "2"} {
		t.Run("pool="+conns, func(t *testing.T) {
			dbURL := pgtest.URL(t)
			if err := run(context.Background(), "migrate", testConfig(t, "-database-url", dbURL), nil); err != nil {
				t.Fatal(err)
			}
			// The public URL names the port: picked before the server
			// binds it, it is tried again with another when taken.
			a, stopA, ports := startOnFreePorts(t, 1, func(ports []string) *config {
				return testConfig(t, "-addr", "127.0.0.1:"+ports[0], "-database-url", dbURL, "-rate-limit", "-1", "-signup", "open",
					"-public-url", "http://localhost:"+ports[0], "-db-max-conns", conns)
			})
			defer stopA()
			public := "http://localhost:" + ports[0]
			b := startChild(t, dbURL, "-signup", "open", "-public-url", public, "-db-max-conns", conns)
			bob := oauthtest.SignUp(t, public, "bob", "")
			db, err := pgx.Connect(context.Background(), dbURL)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close(context.Background())

			const grants, calls = 4, 32
			for g := range grants {
				tok := bob.Token(t, fmt.Sprintf("Burst %d", g), nil)["access_token"].(string)
				start := make(chan struct{})
				var wg sync.WaitGroup
				failures := make(chan string, calls)
				for i := range calls {
					base := a
					if i%2 == 1 {
						base = b
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"sync_lobby","arguments":{}}}`, i)
						req, _ := http.NewRequest("POST", base+"/mcp", strings.NewReader(body))
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("Accept", "application/json, text/event-stream")
						req.Header.Set("Authorization", "Bearer "+tok)
						res, err := http.DefaultClient.Do(req)
						if err != nil {
							failures <- err.Error()
							return
						}
						defer res.Body.Close()
						var out struct {
							Result struct {
								IsError bool            `json:"isError"`
								Content json.RawMessage `json:"structuredContent"`
							} `json:"result"`
							Error json.RawMessage `json:"error"`
						}
						raw, _ := io.ReadAll(res.Body)
						if err := json.Unmarshal(raw, &out); err != nil || res.StatusCode != http.StatusOK || out.Error != nil || out.Result.IsError {
							failures <- fmt.Sprintf("%d %s", res.StatusCode, raw)
						}
					}()
				}
				close(start)
				wg.Wait()
				close(failures)
				n := 0
				for f := range failures {
					n++
					if n <= 3 {
						t.Errorf("grant %d: a first call failed: %s", g, f)
					}
				}
				if n > 0 {
					t.Fatalf("grant %d: %d of %d first calls failed", g, n, calls)
				}
				var rows int
				if err := db.QueryRow(context.Background(), `SELECT count(*) FROM smcp_user_sessions s
					JOIN smcp_oauth_clients c ON c.id = s.client_id WHERE c.name = $1`, fmt.Sprintf("Burst %d", g)).Scan(&rows); err != nil {
					t.Fatal(err)
				}
				if rows != 1 {
					t.Fatalf("grant %d: %d session rows, want 1", g, rows)
				}
			}
		})
	}
}
