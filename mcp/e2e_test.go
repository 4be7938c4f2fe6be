package mcp_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/mcp"
	"github.com/syncsubstrate/sync/oauth"
	"github.com/syncsubstrate/sync/oauth/oauthtest"
	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/httpmw"
	"github.com/syncsubstrate/sync/substrate/rest"
)

func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	// Every tool result of every test: successes fit their output schema,
	// errors carry no structured content (mcp/export_test.go).
	if b := mcp.ResultBreaches(); len(b) > 0 {
		fmt.Fprintf(os.Stderr, "tool results that break the output rule:\n%s\n", strings.Join(b, "\n"))
		code = 1
	}
	os.Exit(code)
}

// server is a whole sync server on one database: REST, OAuth, /mcp.
type server struct {
	base  string
	db    *store.DB
	auth  *oauth.Server
	svc   *substrate.Service
	lobby *lobby.Lobby
}

func startServer(t testing.TB, db *store.DB) *server { return startServerWith(t, db, nil) }

func startServerWith(t testing.TB, db *store.DB, origins []string) *server {
	return startServerOpts(t, db, serverOpts{origins: origins})
}

// serverOpts vary the test server from its defaults.
type serverOpts struct {
	origins   []string      // SYNC_MCP_ORIGINS
	publicURL string        // default http://localhost:<port>
	http      *httpmw.Stack // the shared middleware; default none shared, no rate limits
	// cimdRoots, when set, lets client metadata documents come from
	// loopback TLS servers signed by these roots.
	cimdRoots *x509.CertPool
	// accessTTL shortens access tokens (default oauth's 12 h), for tests
	// that need a client to refresh.
	accessTTL time.Duration
	// keepAlive is the event streams' keep-alive interval (default 15 s).
	keepAlive time.Duration
	// ln, when set, is the listener to serve on (bound by the test
	// before the server starts, e.g. for a proxy in front of it).
	ln net.Listener
	// shutdown is mcp.Options.Shutdown (default none).
	shutdown context.Context
}

func startServerOpts(t testing.TB, db *store.DB, o serverOpts) *server {
	t.Helper()
	ln := o.ln
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	base := "http://localhost:" + strings.Split(ln.Addr().String(), ":")[1]
	public := base
	if o.publicURL != "" {
		public = o.publicURL
	}
	// A minute's safety-net re-check: waits the tests see woken were woken
	// by a notification.
	svc := substrate.New(db, substrate.Options{Features: testFeatures, Wait: substrate.WaitOptions{Recheck: time.Minute}})
	t.Cleanup(svc.Close)
	lob := lobby.New(db, svc)
	a, err := oauth.New(context.Background(), db, oauth.Options{PublicURL: public, Rooms: lob, Signup: "open", RatePerSecond: -1,
		HTTP: o.http, AllowPrivateMetadataFetch: o.cimdRoots != nil, MetadataFetchRoots: o.cimdRoots, AccessTokenTTL: o.accessTTL})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	a.Routes(mux)
	h := mcp.Handler(mcp.Options{Lobby: lob, Substrate: svc, Auth: a, PublicURL: public, AllowedOrigins: o.origins, HTTP: o.http, KeepAlive: o.keepAlive,
		Shutdown: o.shutdown, DB: db})
	mux.Handle("/mcp", h)
	mux.Handle("/mcp/{$}", h)
	mux.Handle("GET "+mcp.IconPath, mcp.Icons())
	mux.Handle("GET "+mcp.FaviconPath, mcp.Icons())
	mux.Handle("/", rest.Handler(svc, rest.Options{RatePerSecond: -1, HTTP: o.http}))
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return &server{base: base, db: db, auth: a, svc: svc, lobby: lob}
}

// person is a signed-in user with a software passkey (oauth/oauthtest).
type person = oauthtest.Person

func signup(t testing.TB, srv *server, name string) *person {
	t.Helper()
	return oauthtest.SignUp(t, srv.base, name, "")
}

// consent is the go-sdk client's AuthorizationCodeFetcher: the person
// opens the authorize URL in their (signed-in) browser and allows the
// given rooms, as on the real consent page.
// owner signs a person up and makes them an owner of a room created over
// REST, proven by its room token.
func owner(t *testing.T, srv *server, username, room, roomToken string) *person {
	t.Helper()
	p := signup(t, srv, username)
	var id string
	_ = srv.db.QueryRow(context.Background(), `SELECT id FROM smcp_users WHERE username = $1`, username).Scan(&id)
	if _, err := srv.lobby.ClaimRoom(context.Background(), id, room, roomToken, false); err != nil {
		t.Fatal(err)
	}
	return p
}

func consent(p *person, rooms map[string]string) auth.AuthorizationCodeFetcher {
	return func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		r, err := p.Consent(ctx, args.URL, rooms)
		if err != nil {
			return nil, err
		}
		return &auth.AuthorizationResult{Code: r.Code, State: r.State, Iss: r.Iss}, nil
	}
}

// connect runs the go-sdk client through discovery, dynamic registration,
// PKCE with resource, consent and token exchange, and returns a session.
func connect(t *testing.T, p *person, rooms map[string]string) *sdk.ClientSession {
	t.Helper()
	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			ClientName: "Go SDK test", RedirectURIs: []string{"http://localhost:1/callback"}, TokenEndpointAuthMethod: "none",
			GrantTypes: []string{"authorization_code", "refresh_token"}, ResponseTypes: []string{"code"}}},
		RedirectURL:              "http://localhost:1/callback",
		AuthorizationCodeFetcher: consent(p, rooms),
	})
	if err != nil {
		t.Fatal(err)
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: p.Base + "/mcp", OAuthHandler: h}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// callTool calls a tool and returns its structured result and isError.
func callTool(t testing.TB, cs *sdk.ClientSession, name string, args map[string]any) (map[string]any, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", name, err)
	}
	if res.IsError {
		if res.StructuredContent != nil {
			t.Fatalf("%s: an error result with structured content (errors are text only): %v", name, res.StructuredContent)
		}
		return errorFields(t, resultText(res)), true
	}
	var out map[string]any
	raw, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(raw, &out)
	return out, res.IsError
}

func resultText(res *sdk.CallToolResult) string {
	text := ""
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			text += tc.Text
		}
	}
	return text
}

// errorFields reads an error result's text (mcp.Text's rendering) back
// into its top-level fields: scalars, and lists written inline or as
// "- item" lines. It is what a test needs; a model reads the text.
func errorFields(t testing.TB, text string) map[string]any {
	t.Helper()
	out := map[string]any{}
	scalar := func(v string) any {
		var s string
		if strings.HasPrefix(v, `"`) && json.Unmarshal([]byte(v), &s) == nil {
			return s
		}
		return v
	}
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		k, v, ok := strings.Cut(lines[i], ":")
		if !ok || strings.HasPrefix(lines[i], " ") || strings.HasPrefix(lines[i], "-") {
			continue
		}
		k, v = strings.Trim(k, `"`), strings.TrimPrefix(v, " ")
		switch {
		case v == "":
			var list []any
			for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "  ") {
				i++
				if item, ok := strings.CutPrefix(lines[i], "  - "); ok {
					list = append(list, scalar(item))
				}
			}
			out[k] = list
		case strings.HasPrefix(v, "[") && strings.HasSuffix(v, "]"):
			var list []any
			rest := v[1 : len(v)-1]
			for rest != "" {
				item := rest
				if strings.HasPrefix(rest, `"`) { // a quoted item may hold ", "
					dec := json.NewDecoder(strings.NewReader(rest))
					var s string
					if dec.Decode(&s) != nil {
						t.Fatalf("unreadable list in %q", v)
					}
					item, rest = rest[:dec.InputOffset()], rest[dec.InputOffset():]
				} else if i := strings.Index(rest, ", "); i >= 0 {
					item, rest = rest[:i], rest[i:]
				} else {
					rest = ""
				}
				list = append(list, scalar(item))
				rest = strings.TrimPrefix(rest, ", ")
			}
			out[k] = list
		default:
			out[k] = scalar(v)
		}
	}
	if !strings.HasPrefix(text, "error: ") || out["error"] == nil || out["message"] == nil {
		t.Fatalf("an error result whose text does not begin with its code and message:\n%s", text)
	}
	return out
}

func mustTool(t testing.TB, cs *sdk.ClientSession, name string, args map[string]any) map[string]any {
	t.Helper()
	out, isErr := callTool(t, cs, name, args)
	if isErr {
		t.Fatalf("%s(%v) failed: %v", name, args, out)
	}
	return out
}

func get(m map[string]any, path ...string) any {
	var cur any = m
	for _, k := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

// The whole path a model takes: connect through OAuth, lobby, create a
// room, embody, register an action and a view, invoke, read the context;
// a second user's agent satisfies the first one's wait.
func TestEndToEndWithGoSDKClient(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	alice := signup(t, srv, "alice")
	cs := connect(t, alice, nil)

	lobbyView := mustTool(t, cs, "sync_lobby", nil)
	if lobbyView["can_create_rooms"] != true || lobbyView["embodied"] != nil {
		t.Fatalf("lobby %v", lobbyView)
	}
	// Acting while observing fails with the exact call to make.
	if out, isErr := callTool(t, cs, "sync_invoke_action", map[string]any{"action": "x"}); !isErr || out["error"] != "not_embodied" || !strings.Contains(out["hint"].(string), "sync_embody") {
		t.Fatalf("act while observing: %v", out)
	}
	mustTool(t, cs, "sync_create_room", map[string]any{"room": "lab", "label": "Lab"})
	// Observing leaves no trace in the agents list.
	mustTool(t, cs, "sync_read_context", map[string]any{"room": "lab"})
	if ctx := mustTool(t, cs, "sync_read_context", map[string]any{"room": "lab"}); len(get(ctx, "agents").(map[string]any)) != 0 {
		t.Fatalf("observing created an agent: %v", ctx["agents"])
	}
	emb := mustTool(t, cs, "sync_embody", map[string]any{"room": "lab"})
	if emb["agent"] != "alice:go-sdk-test" || get(emb, "_session", "agent") != "alice:go-sdk-test" {
		t.Fatalf("embody %v", emb)
	}
	mustTool(t, cs, "sync_register_action", map[string]any{"id": "ring", "description": "ring the bell",
		"params": map[string]any{"by": map[string]any{"type": "string"}},
		"writes": []any{map[string]any{"key": "bell", "value": map[string]any{"rung_by": "${self}", "note": "${params.by}"}}}})
	mustTool(t, cs, "sync_register_view", map[string]any{"id": "rung", "expr": `has(state._shared.bell)`})

	// A second user joins the room and embodies; alice waits for the bell.
	bob := signup(t, srv, "bob")
	mustTool(t, cs, "sync_share_room", map[string]any{"room": "lab", "username": "bob", "role": "participant"})
	bs := connect(t, bob, map[string]string{"lab": "write"})
	if out, isErr := callTool(t, bs, "sync_embody", map[string]any{"room": "lab", "agent": "alice:go-sdk-test"}); !isErr {
		t.Fatalf("bob embodied alice's agent: %v", out)
	}
	mustTool(t, bs, "sync_embody", map[string]any{"room": "lab"})

	waited := make(chan map[string]any, 1)
	go func() { // no t.Fatal off the test's goroutine: errors travel back
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "sync_wait", Arguments: map[string]any{"condition": "views.rung", "timeout_ms": 30000}})
		out := map[string]any{"error": fmt.Sprint(err)}
		if err == nil {
			raw, _ := json.Marshal(res.StructuredContent)
			_ = json.Unmarshal(raw, &out)
		}
		waited <- out
	}()
	pgtest.Eventually(t, 20*time.Second, func() bool {
		var status string
		_ = srv.db.QueryRow(context.Background(), `SELECT status FROM agents WHERE room_id = 'lab' AND id = 'alice:go-sdk-test'`).Scan(&status)
		return status == "waiting"
	}, "alice to start waiting")
	rung := time.Now()
	mustTool(t, bs, "sync_invoke_action", map[string]any{"action": "ring", "params": map[string]any{"by": "bob"}})
	select {
	case out := <-waited:
		if out["triggered"] != true {
			t.Fatalf("wait: %v", out)
		}
		if d := time.Since(rung); d > 3*time.Second {
			t.Fatalf("alice woken %v after bob's invocation: not by its notification", d)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("bob's invocation did not wake alice's wait")
	}
	ctx := mustTool(t, cs, "sync_read_context", nil)
	if get(ctx, "views", "rung") != true || get(ctx, "state", "_shared", "bell", "rung_by") != "bob:go-sdk-test" {
		t.Fatalf("context after the bell: %v", ctx)
	}
	if get(ctx, "agents", "bob:go-sdk-test", "status") != "active" {
		t.Fatalf("bob not present: %v", ctx["agents"])
	}

	// Narrowing takes effect on the next call.
	// Its result tells the model what the person must do to undo it: no
	// tool widens a connection.
	rev := mustTool(t, cs, "sync_revoke_access", map[string]any{"room": "lab"})
	if r, _ := rev["restore"].(string); !strings.Contains(r, "Tell the person") || !strings.Contains(r, "connect again") || !strings.Contains(r, "ticks lab") {
		t.Fatalf("the revocation does not say how the person restores the room: %v", rev)
	}
	if out, isErr := callTool(t, cs, "sync_read_context", map[string]any{"room": "lab"}); !isErr || out["error"] != "room_not_in_scope" {
		t.Fatalf("revoked room still readable: %v", out)
	}
	if out, isErr := callTool(t, bs, "sync_read_context", map[string]any{"room": "nowhere"}); !isErr || out["error"] != "room_not_in_scope" {
		t.Fatalf("out-of-scope room: %v", out)
	}
}

// One number per message (issue 43 item 3): sync_send_message answers
// with the message's own seq, and reply_to takes it. A reply to a seq that
// is no message (the room's, a read's) names the nearest message, and its
// next call is that reply, which succeeds.
func TestSendMessageAnswersItsSeq(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	alice := signup(t, srv, "alice")
	as := connectWithToken(t, srv, mintToken(t, srv, alice, nil)["access_token"].(string))
	mustTool(t, as, "sync_create_room", map[string]any{"room": "guild"})
	mustTool(t, as, "sync_embody", map[string]any{"room": "guild"})
	sent := mustTool(t, as, "sync_send_message", map[string]any{"body": "When do we ship?", "subject": "Release date"})
	seq, ok := sent["seq"].(float64)
	if !ok || sent["thread"] != seq || sent["writes"] != nil {
		t.Fatalf("the send answers %v: want the message's seq and thread, one number", sent)
	}
	recent := get(mustTool(t, as, "sync_read_context", map[string]any{"only": "messages"}), "messages", "recent").([]any)
	if got := recent[len(recent)-1].(map[string]any)["seq"]; got != seq {
		t.Fatalf("the send answered %v, the message reads as seq %v", seq, got)
	}
	reply := mustTool(t, as, "sync_send_message", map[string]any{"body": "Friday", "reply_to": seq})
	if reply["thread"] != seq {
		t.Fatalf("reply_to the answered seq: %v", reply)
	}
	out, isErr := callTool(t, as, "sync_send_message", map[string]any{"body": "Friday", "reply_to": reply["seq"].(float64) + 1})
	want := fmt.Sprintf(`sync_send_message {"body":"Friday","reply_to":%d}`, int64(reply["seq"].(float64)))
	if !isErr || fmt.Sprint(out["did_you_mean"]) != fmt.Sprint(reply["seq"]) || out["next"] != want {
		t.Fatalf("reply_to a seq past the last message: %v (want did_you_mean %v, next %s)", out, reply["seq"], want)
	}
}
