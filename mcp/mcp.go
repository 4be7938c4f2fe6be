// Package mcp is sync's MCP server: the tools Claude.ai and Claude Code call,
// on the go-sdk's streamable HTTP handler in stateless mode, behind the
// OAuth bearer check. Every call resolves its session row through the
// lobby, so any process can serve any call and a restart loses nothing.
// Tools are thin adapters over lobby and substrate operations.
package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/oauth"
	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/httpmw"
)

// Options configure the MCP endpoint.
type Options struct {
	Lobby     *lobby.Lobby
	Substrate *substrate.Service
	Auth      *oauth.Server
	// PublicURL is the server's external base URL; its origin may call.
	PublicURL string
	// AllowedOrigins are further browser origins allowed to call /mcp.
	// Requests without an Origin header (non-browser clients) are allowed.
	AllowedOrigins []string
	// HTTP is the middleware shared with the server's other surfaces (body
	// limit, request ids, recovery, access log); the per-grant rate limit
	// is applied by Auth's bearer check. Default: a stack of its own with
	// httpmw's defaults.
	HTTP *httpmw.Stack
	// Version is reported to clients. Default "dev".
	Version string
	// ObserveTool, when set, is called after each tool call with the
	// tool's name (only the server's own tools reach it), "ok" or the error
	// code of its result, and its duration (metrics). Default none.
	ObserveTool func(tool, outcome string, took time.Duration)
	// KeepAlive is how long an event stream may stay silent before a
	// keep-alive comment goes out (proxies cut silent responses). Default
	// 15 s: a comment at least every 19 s, inside the 30 s read timeout
	// some proxies and hosts use.
	KeepAlive time.Duration
	// Shutdown, when it ends, ends every event stream (the listen stream):
	// a server ends it as its shutdown begins, so that clients reconnect
	// to another process at once instead of holding the drain for its
	// whole timeout; ordinary requests are not cut. A stream that begins
	// after it ended ends as soon as it began. Default nil: streams end
	// only when their client leaves.
	Shutdown context.Context
	// DB, when set, is where sync_wait's tasks live (migration 0021): a
	// client that declares the tasks extension gets its waits as tasks,
	// which any process sharing the database answers. Default nil: every
	// wait is a blocking call.
	DB *store.DB
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Instructions tell a model how to begin.
const Instructions = `sync is a shared workspace of rooms where agents coordinate through versioned state, actions and views.
Begin with sync_lobby: it lists the rooms you may use and who is in them. Observe a room with sync_read_context;
to act, sync_embody an agent there, then sync_invoke_action (the context lists available actions). Use sync_wait
instead of polling. No actions yet? sync_help key standard_library has ready-made ones for sync_register_action.
Every result carries _session: the room and agent you act as, your access level there, and the server's time.`

// Handler returns the /mcp endpoint.
func Handler(opt Options) http.Handler {
	if opt.Version == "" {
		opt.Version = "dev"
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.KeepAlive <= 0 {
		opt.KeepAlive = 15 * time.Second
	}
	// The SDK logs every stateless connection at info level; keep its
	// warnings and errors only.
	sdkLog := slog.New(levelFilter{opt.Logger.Handler(), slog.LevelWarn})
	// One server for every request: tools find the caller in the request
	// (RequestExtra.TokenInfo), so nothing is built per call.
	// Hosts show the icon and link the website next to the connector.
	public := strings.TrimSuffix(opt.PublicURL, "/")
	sopt := &sdk.ServerOptions{Instructions: Instructions, Logger: sdkLog}
	if opt.DB != nil {
		// The SDK's default ({"logging":{}}) and the tasks extension,
		// which server/discover announces.
		//lint:ignore SA1019 the default kept: turning tasks on changes nothing else clients see
		sopt.Capabilities = &sdk.ServerCapabilities{Logging: &sdk.LoggingCapabilities{}}
		sopt.Capabilities.AddExtension(tasksExtension, nil)
	}
	srv := sdk.NewServer(&sdk.Implementation{Name: "sync", Title: "sync", Version: opt.Version, WebsiteURL: public + "/",
		Icons: []sdk.Icon{{Source: public + IconPath, MIMEType: "image/png", Sizes: []string{"128x128"}}}}, sopt)
	for _, d := range tools() {
		h := handler(&opt, d)
		srv.AddTool(d.def, h)
		if opt.DB != nil && d.def.Name == "sync_wait" {
			newTasks(&opt, h).register(srv)
		}
	}
	addLoomPrompt(srv, &opt)
	// The SDK's own DNS-rebinding check refuses every Host but loopback
	// ones when the listener is on loopback, which is exactly the
	// deployment behind a reverse proxy or tunnel that keeps the public
	// Host; checkHost does the same job knowing the public URL.
	streamable := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv },
		&sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true, Logger: sdkLog, DisableLocalhostProtection: true})
	// Order: the shared stack first (request id, recovery, body limit);
	// the Host check refuses DNS-rebinding requests, and the Origin check
	// cross-site browsers, before any work; our bearer check then answers
	// 401 with the challenge clients follow to sign in
	// (error="invalid_token", which the SDK's own middleware omits) and
	// applies the grant's rate limit (peekRPC, before it, makes a limited
	// tool call a result the model reads; batches are refused after it, so
	// they are charged too); the SDK's middleware only hands the verified
	// token to the tools; event streams get keep-alives.
	pass := sdkauth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*sdkauth.TokenInfo, error) {
		ti := oauth.TokenInfoFrom(ctx)
		if ti == nil {
			return nil, sdkauth.ErrInvalidToken
		}
		// The SDK wants its own TokenInfo; the tools read only the Caller
		// carried in it, translated here once.
		return &sdkauth.TokenInfo{Scopes: ti.Scopes, Expiration: ti.Expiry, UserID: ti.UserID, Extra: map[string]any{tokenExtra: callerOf(ti)}}, nil
	}, &sdkauth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	if opt.HTTP == nil {
		opt.HTTP = httpmw.New(httpmw.Options{Logger: opt.Logger})
	}
	return opt.HTTP.Wrap(checkHost(&opt, checkOrigin(&opt, peekRPC(opt.Auth.RequireBearer("", refuseBatches(pass(keepAlive(opt.KeepAlive, opt.Shutdown, streamable))))))))
}

// checkHost is the DNS-rebinding protection: a browser tricked into
// reaching this server under a hostile name sends that name as Host. The
// public URL's host name and loopback names are the only legitimate ones
// (any port: a proxy or tunnel may add or drop it).
func checkHost(opt *Options, next http.Handler) http.Handler {
	public := ""
	if u, err := url.Parse(opt.PublicURL); err == nil {
		public = strings.ToLower(u.Hostname())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := strings.ToLower(r.Host)
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
		ip := net.ParseIP(host)
		if host != public && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "Forbidden: invalid Host header "+strconv.Quote(r.Host)+": this endpoint answers only as "+public, http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// tokenExtra is the key of the caller (a lobby.Caller) in the SDK's
// TokenInfo.Extra.
const tokenExtra = "sync.caller"

// callerOf is the one translation of a verified token into the lobby's
// caller: everything past the MCP edge (the session, the principal) reads
// the caller's identity from it and never from the token.
func callerOf(ti *oauth.TokenInfo) lobby.Caller {
	return lobby.Caller{GrantID: ti.GrantID, UserID: ti.UserID, Username: ti.Username,
		ClientID: ti.ClientID, ClientName: ti.ClientName, Scopes: ti.Scopes}
}

// levelFilter drops records below a level.
type levelFilter struct {
	slog.Handler
	min slog.Level
}

func (f levelFilter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= f.min && f.Handler.Enabled(ctx, l)
}

func checkOrigin(opt *Options, next http.Handler) http.Handler {
	allowed := append([]string{}, opt.AllowedOrigins...)
	if u, err := url.Parse(opt.PublicURL); err == nil {
		allowed = append(allowed, u.Scheme+"://"+u.Host)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && !slices.Contains(allowed, o) {
			http.Error(w, "Forbidden: origin "+strconv.Quote(o)+" may not call this endpoint", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func handler(opt *Options, d tool) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		start := time.Now()
		out, sess, err := runTool(ctx, opt, d, req)
		if opt.ObserveTool != nil {
			outcome := "ok"
			if err != nil {
				outcome = string(errs.From(err).Code)
			}
			opt.ObserveTool(d.def.Name, outcome, time.Since(start))
		}
		res := result(out, err, sess)
		if n := resultSize(res); n > MaxResultChars {
			opt.Logger.Warn("tool result past the limit", "tool", d.def.Name, "chars", n)
			res = tooLarge(d.def.Name, n, d.def.Annotations != nil && d.def.Annotations.ReadOnlyHint)
		}
		if checkResult != nil {
			checkResult(d.def, res)
		}
		return res, nil
	}
}

// checkResult, when set (by the package's tests), sees every tool result.
var checkResult func(*sdk.Tool, *sdk.CallToolResult)

// runTool resolves the caller's session and runs the tool.
func runTool(ctx context.Context, opt *Options, d tool, req *sdk.CallToolRequest) (any, *lobby.Session, error) {
	var who lobby.Caller
	var ok bool
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		who, ok = req.Extra.TokenInfo.Extra[tokenExtra].(lobby.Caller)
	}
	if !ok { // RequireBearer guarantees one; never act without it
		return nil, nil, errs.New(errs.Unauthorized, "no verified token").WithHint("reconnect the integration")
	}
	sess, err := opt.Lobby.Resolve(ctx, who)
	if err != nil {
		opt.Logger.Error("resolve MCP session", "err", err)
		return nil, nil, err
	}
	c := &call{opt: opt, sess: sess}
	if req.Extra != nil && req.Extra.Header != nil {
		c.bearer = httpmw.Bearer(&http.Request{Header: req.Extra.Header})
	}
	out, err := d.run(ctx, c, req.Params.Arguments)
	if err != nil {
		err = withNext(d.def.Name, req.Params.Arguments, sess, err)
	}
	// A call whose context ended (its client left, its task was
	// cancelled, the shutdown) did not fail.
	if err != nil && errs.From(err).Code == errs.Internal && ctx.Err() == nil {
		opt.Logger.Error("tool failed", "tool", d.def.Name, "err", err)
	}
	return out, sess, err
}

// result encodes a tool's answer: the domain's JSON as structured content
// and its compact rendering (Text) as text, with the session block. The
// JSON is encoded once and the session block spliced in, since contexts
// can be large.
//
// A domain error is an isError result with text content only: its stable
// code, what was wrong, the hint and the next call, in that order, then
// its details and the session block. One rule for every tool: structured
// content is the tool's successful output and always validates against
// its outputSchema; an error has none. (Clients validate structured
// content whenever it is present: the TypeScript SDK, on which most hosts
// are built, threw -32602 for an error shaped unlike the output schema,
// and the model never saw the error.) A program reads the code from the
// text's first line, "error: <code>".
func result(out any, err error, sess *lobby.Session) *sdk.CallToolResult {
	var body []byte
	if err != nil {
		body = errorJSON(errs.From(err).In(Words).Body())
	} else {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if encErr := enc.Encode(out); encErr != nil {
			err = encErr
			body = errorJSON(errs.From(encErr).Body())
		} else {
			body = bytes.TrimSpace(buf.Bytes())
		}
	}
	if len(body) == 0 || body[0] != '{' { // not an object: wrap it
		body = append(append([]byte(`{"result":`), body...), '}')
	}
	if sess != nil {
		level := ""
		if sess.RoomID != "" {
			level = sess.Level(sess.RoomID) // rooms shared since the consent too
		}
		// The server's clock rides along: a model has no other reliable
		// source for "now" (timers, last heartbeats, deadlines).
		block, _ := json.Marshal(map[string]any{"room": sess.RoomID, "agent": sess.AgentID, "scope_level": level,
			"now": time.Now().UTC().Format(time.RFC3339)})
		sep := []byte(",")
		if bytes.Equal(body, []byte("{}")) {
			sep = nil
		}
		body = append(append(append(append(body[:len(body)-1:len(body)-1], sep...), `"_session":`...), block...), '}')
	}
	text := []sdk.Content{&sdk.TextContent{Text: Text(body)}}
	if err != nil {
		return &sdk.CallToolResult{IsError: true, Content: text}
	}
	return &sdk.CallToolResult{StructuredContent: json.RawMessage(body), Content: text}
}

// errorLead are the fields an error's text begins with, in reading order.
var errorLead = []string{"error", "message", "hint", "next", "options"}

// errorJSON encodes an error body as one JSON object with errorLead's
// fields first and the details after them, sorted.
func errorJSON(b map[string]any) []byte {
	keys := make([]string, 0, len(b))
	for k := range b {
		if !slices.Contains(errorLead, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	buf.WriteByte('{')
	for _, k := range append(slices.Clone(errorLead), keys...) {
		v, ok := b[k]
		if !ok {
			continue
		}
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		_ = enc.Encode(k)
		buf.Truncate(buf.Len() - 1) // Encode's newline
		buf.WriteByte(':')
		if enc.Encode(v) != nil {
			_ = enc.Encode(fmt.Sprint(v))
		}
		buf.Truncate(buf.Len() - 1)
	}
	buf.WriteByte('}')
	return buf.Bytes()
}

func strictJSON(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// contextRequest builds the substrate's context parameters from tool
// arguments, with the same validation as the REST query.
// DefaultMaxBytes is the size budget of a context in a tool result when
// the call names none: about 8,000 tokens, well inside what Claude Code
// (25,000 tokens) and Claude.ai accept, and enough for a room of a few
// hundred small entries whole.
const DefaultMaxBytes = 32_000

// MaxResultChars is the most a tool result holds, as text and as
// structured JSON alike: past about 48,000 characters Claude Code hands
// its model a 2 KB preview and a file path instead (MAX_MCP_OUTPUT_TOKENS
// does not change that), and a model without file tools cannot read on.
// Bytes are counted, which is never fewer than characters.
const MaxResultChars = 48_000

// MaxContextBytes is the largest max_bytes a read, a wait or an
// embodiment takes, and the largest any advice names: the result's frame
// (the _session block, an embodiment) and a text rendering somewhat
// longer than its JSON stay within MaxResultChars. What is larger is
// read page by page.
const MaxContextBytes = 40_000

func contextRequest(sh shaping, after *int64, include, context string, since *int64) (substrate.ContextRequest, error) {
	p := substrate.ContextParams{Depth: sh.Depth, Only: sh.Only, Include: include, Context: context, Since: since, MessagesAfter: after}
	switch {
	case sh.MaxBytes == nil:
		p.MaxBytes = ptr(DefaultMaxBytes)
	case *sh.MaxBytes > MaxContextBytes:
		return substrate.ContextRequest{}, errs.New(errs.InvalidField, "max_bytes %d is past %d, the most a tool result holds (a client shows its model only a preview of a larger one)", *sh.MaxBytes, MaxContextBytes).
			With("field", "max_bytes").WithHint("leave max_bytes out and read page by page: each cut in _context.budget names the read of its next page (keys_after, messages_after, prefix)")
	default:
		p.MaxBytes = ptr(clampInt(*sh.MaxBytes))
	}
	if sh.MessagesLimit != nil {
		p.MessagesLimit = ptr(clampInt(*sh.MessagesLimit))
	}
	r, err := p.Request()
	r.AdviseMax = MaxContextBytes
	return r, err
}

// clampInt narrows a tool's int64 argument to an int: on a platform
// whose int is narrower, one past int's range is refused by the range
// check it then fails, never wrapped into one that passes; where int has
// 64 bits (every platform syncd is built for) the value is kept, and a
// refusal quotes what the caller sent.
func clampInt(n int64) int {
	return int(max(min(n, math.MaxInt), math.MinInt))
}
