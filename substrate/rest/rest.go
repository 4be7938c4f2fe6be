// Package rest is the REST API of the substrate for token clients (room,
// view and agent tokens; seed 001 §API). Each handler decodes the request,
// calls one substrate operation and encodes the result.
package rest

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/httpmw"
)

// Options configure the API.
type Options struct {
	// HTTP is the middleware shared with the server's other surfaces (body
	// limit, rate limits, request ids, recovery). Default: a stack of its
	// own built from MaxBodyBytes, RatePerSecond and RateBurst.
	HTTP *httpmw.Stack
	// MaxBodyBytes caps a request body when HTTP is nil. Default 1 MiB.
	MaxBodyBytes int64
	// RatePerSecond is, when HTTP is nil, the sustained requests per second
	// allowed per credential (per client IP for requests without a valid
	// one). Default 100; negative disables rate limiting.
	RatePerSecond float64
	// RateBurst is the burst above the sustained rate when HTTP is nil.
	// Default 2× the rate.
	RateBurst int
	// CreateToken, when set, is the bearer token POST /rooms requires; when
	// empty anyone may create a room (still rate limited per IP).
	CreateToken string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

type api struct {
	svc           *substrate.Service
	opt           Options
	log           *slog.Logger
	http          *httpmw.Stack
	createTokHash [32]byte
}

// Handler returns the REST API. Mount it at the server root: its routes
// start with /rooms.
func Handler(svc *substrate.Service, opt Options) http.Handler {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.HTTP == nil {
		opt.HTTP = httpmw.New(httpmw.Options{MaxBodyBytes: opt.MaxBodyBytes, RatePerSecond: opt.RatePerSecond,
			RateBurst: opt.RateBurst, Logger: opt.Logger})
	}
	a := &api{svc: svc, opt: opt, log: opt.Logger, http: opt.HTTP}
	if opt.CreateToken != "" {
		a.createTokHash = sha256.Sum256([]byte(opt.CreateToken))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /rooms", a.createRoom)
	mux.HandleFunc("GET /rooms", a.authed(a.listRooms))
	mux.HandleFunc("GET /rooms/{room}", a.authed(a.getRoom))
	mux.HandleFunc("POST /rooms/{room}/tokens/rotate", a.authed(a.rotateToken))
	mux.HandleFunc("POST /rooms/{room}/agents", a.join)
	mux.HandleFunc("GET /rooms/{room}/agents", a.authed(a.listAgents))
	mux.HandleFunc("PATCH /rooms/{room}/agents/{agent}", a.authed(a.updateAgent))
	mux.HandleFunc("POST /rooms/{room}/agents/{agent}/heartbeat", a.authed(a.heartbeat))
	mux.HandleFunc("GET /rooms/{room}/state", a.authed(a.readState))
	mux.HandleFunc("PUT /rooms/{room}/state", a.authed(a.writeState))
	mux.HandleFunc("PUT /rooms/{room}/state/batch", a.authed(a.writeBatch))
	mux.HandleFunc("DELETE /rooms/{room}/state", a.authed(a.deleteState))
	mux.HandleFunc("PUT /rooms/{room}/actions", a.authed(a.registerAction))
	mux.HandleFunc("GET /rooms/{room}/actions", a.authed(a.listActions))
	mux.HandleFunc("GET /rooms/{room}/actions/{action}", a.authed(a.getAction))
	mux.HandleFunc("DELETE /rooms/{room}/actions/{action}", a.authed(a.deleteAction))
	mux.HandleFunc("POST /rooms/{room}/actions/{action}/invoke", a.authedInvoke(a.invoke))
	mux.HandleFunc("PUT /rooms/{room}/views", a.authed(a.registerView))
	mux.HandleFunc("GET /rooms/{room}/views", a.authed(a.listViews))
	mux.HandleFunc("GET /rooms/{room}/views/{view}", a.authed(a.getView))
	mux.HandleFunc("DELETE /rooms/{room}/views/{view}", a.authed(a.deleteView))
	mux.HandleFunc("GET /rooms/{room}/context", a.authed(a.context))
	mux.HandleFunc("GET /rooms/{room}/wait", a.authed(a.wait))
	mux.HandleFunc("GET /rooms/{room}/search", a.authed(a.search))
	mux.HandleFunc("POST /rooms/{room}/eval", a.authed(a.eval))
	mux.HandleFunc("GET /rooms/{room}/help", a.authed(a.help))
	mux.HandleFunc("GET /rooms/{room}/trajectory", a.authed(a.trajectory))
	mux.HandleFunc("GET /rooms/{room}/history", a.authed(a.history))
	mux.HandleFunc("GET /rooms/{room}/replay", a.authed(a.replay))
	mux.HandleFunc("POST /rooms/{room}/loom", a.authed(a.loom))
	mux.HandleFunc("/rooms/", func(w http.ResponseWriter, r *http.Request) {
		a.fail(w, r, errs.New(errs.NotFound, "no endpoint %s %s", r.Method, r.URL.Path).
			WithHint("see the README for the REST API: /rooms, /rooms/:id/agents, /rooms/:id/state"))
	})
	// The shared stack wraps everything (recovery, request id, body
	// limit); CORS then answers preflights before any handler. Rate limits
	// apply in the handlers, once the credential is verified.
	return a.http.WrapWithHeaders(corsHeaders, a.cors(validText(a, mux)))
}

// authed wraps a handler that needs a principal.
func (a *api) authed(h func(http.ResponseWriter, *http.Request, *substrate.Principal)) http.HandlerFunc {
	return a.authedBy(h, false)
}

func (a *api) authedBy(h func(http.ResponseWriter, *http.Request, *substrate.Principal), invoke bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := a.principalFor(w, r, invoke)
		if !ok {
			return
		}
		if p == nil {
			a.fail(w, r, errs.New(errs.Unauthorized, "this request needs a bearer token").
				WithHint("send Authorization: Bearer <room_, view_ or as_ token>"))
			return
		}
		h(w, r, p)
	}
}

// authedInvoke is authed for an invocation, whose token lookup may come
// from memory (substrate.Service.AuthenticateInvoke).
func (a *api) authedInvoke(h func(http.ResponseWriter, *http.Request, *substrate.Principal)) http.HandlerFunc {
	return a.authedBy(h, true)
}

// principal authenticates the request's bearer token (nil without one)
// and takes the request from the rate budget of what it verified: the
// credential, or the client address when there is none or it is not valid.
// When it reports false it has answered the request.
func (a *api) principal(w http.ResponseWriter, r *http.Request) (*substrate.Principal, bool) {
	return a.principalFor(w, r, false)
}

// principalFor is principal; invoke says the request invokes the action
// its route names (see authedInvoke).
func (a *api) principalFor(w http.ResponseWriter, r *http.Request, invoke bool) (*substrate.Principal, bool) {
	tok := httpmw.Bearer(r)
	if tok == "" {
		return nil, a.http.Limit(w, r, "")
	}
	// The room the route names ("" for GET /rooms) keeps the token lookup
	// to that room (one shard, when rooms are sharded).
	var p *substrate.Principal
	var err error
	if invoke {
		p, err = a.svc.AuthenticateInvoke(r.Context(), r.PathValue("room"), r.PathValue("action"), tok)
	} else {
		p, err = a.svc.AuthenticateIn(r.Context(), r.PathValue("room"), tok)
	}
	if err != nil {
		if a.http.Limit(w, r, "") {
			a.fail(w, r, err)
		}
		return nil, false
	}
	p.Words = Words
	return p, a.http.Limit(w, r, p.Key())
}

func (a *api) createRoom(w http.ResponseWriter, r *http.Request) {
	key := "" // open creation: limited per client address
	if a.opt.CreateToken != "" {
		got := sha256.Sum256([]byte(httpmw.Bearer(r)))
		if subtle.ConstantTimeCompare(got[:], a.createTokHash[:]) != 1 {
			if a.http.Limit(w, r, "") {
				a.fail(w, r, errs.New(errs.Unauthorized, "creating a room needs the server's room-creation token").
					WithHint("send Authorization: Bearer <SYNC_CREATE_TOKEN>, or create rooms through an MCP client"))
			}
			return
		}
		key = "create-token"
	}
	if !a.http.Limit(w, r, key) {
		return
	}
	var req substrate.CreateRoomRequest
	if !a.decode(w, r, &req, true) {
		return
	}
	room, err := a.svc.CreateRoom(r.Context(), req)
	a.reply(w, r, http.StatusCreated, room, err)
}

func (a *api) listRooms(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	rooms, err := a.svc.ListRooms(r.Context(), p)
	a.reply(w, r, http.StatusOK, map[string]any{"rooms": rooms}, err)
}

func (a *api) getRoom(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	room, err := a.svc.GetRoom(r.Context(), p, r.PathValue("room"))
	a.reply(w, r, http.StatusOK, room, err)
}

func (a *api) rotateToken(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	var body struct {
		Which string `json:"which"`
	}
	if !a.decode(w, r, &body, false) {
		return
	}
	res, err := a.svc.RotateToken(r.Context(), p, r.PathValue("room"), body.Which)
	a.reply(w, r, http.StatusOK, res, err)
}

func (a *api) join(w http.ResponseWriter, r *http.Request) {
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	var req substrate.JoinRequest
	if !a.decode(w, r, &req, false) {
		return
	}
	ag, err := a.svc.Join(r.Context(), p, r.PathValue("room"), req)
	status := http.StatusOK
	if err == nil && ag.Created {
		status = http.StatusCreated
	}
	a.reply(w, r, status, ag, err)
}

func (a *api) listAgents(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	agents, err := a.svc.ListAgents(r.Context(), p, r.PathValue("room"))
	a.reply(w, r, http.StatusOK, map[string]any{"agents": agents}, err)
}

func (a *api) updateAgent(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	var u substrate.AgentUpdate
	if !a.decode(w, r, &u, false) {
		return
	}
	ag, err := a.svc.UpdateAgent(r.Context(), p, r.PathValue("room"), r.PathValue("agent"), u)
	a.reply(w, r, http.StatusOK, ag, err)
}

func (a *api) heartbeat(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	var body struct {
		Status string `json:"status,omitempty"`
	}
	if !a.decode(w, r, &body, true) {
		return
	}
	ag, err := a.svc.Heartbeat(r.Context(), p, r.PathValue("room"), r.PathValue("agent"), body.Status)
	a.reply(w, r, http.StatusOK, ag, err)
}

func (a *api) readState(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	q := r.URL.Query()
	rq := substrate.ReadQuery{Scope: q.Get("scope"), Key: q.Get("key")}
	var err error
	if rq.After, err = intParam(q.Get("after"), "after"); err != nil {
		a.fail(w, r, err)
		return
	}
	limit, err := intParam(q.Get("limit"), "limit")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	rq.Limit = int(limit)
	res, err := a.svc.ReadState(r.Context(), p, r.PathValue("room"), rq)
	if err == nil && rq.Key != "" {
		// One entry asked for, one entry returned.
		a.reply(w, r, http.StatusOK, res.Entries[0], nil)
		return
	}
	a.reply(w, r, http.StatusOK, res, err)
}

// writeBody is a write as REST clients send it. Its "enabled" tells an
// empty string (remove the entry's gate, as PATCH …/agents/:agent does)
// from an absent one (keep it), which substrate.Write's string cannot.
type writeBody struct {
	substrate.Write
	Enabled *string `json:"enabled,omitempty"`
}

func (b writeBody) write() substrate.Write {
	w := b.Write
	if b.Enabled != nil {
		w.Enabled, w.Ungate = *b.Enabled, *b.Enabled == ""
	}
	return w
}

func (a *api) writeState(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	var body writeBody
	if !a.decode(w, r, &body, false) {
		return
	}
	wr := body.write()
	if wr.Delete {
		a.fail(w, r, errs.New(errs.InvalidField, "delete is not a field of a single write").WithHint("use DELETE /rooms/:id/state?scope=…&key=…, or delete: true inside a batch"))
		return
	}
	res, err := a.svc.WriteState(r.Context(), p, r.PathValue("room"), []substrate.Write{wr}, false)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	e := res.Entries[0]
	a.reply(w, r, http.StatusOK, struct {
		substrate.Entry
		Seq int64 `json:"seq"`
	}{e, res.Seq}, nil)
}

func (a *api) writeBatch(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	var body struct {
		Writes []writeBody `json:"writes"`
	}
	if !a.decode(w, r, &body, false) {
		return
	}
	writes := make([]substrate.Write, len(body.Writes))
	for i, b := range body.Writes {
		writes[i] = b.write()
	}
	res, err := a.svc.WriteState(r.Context(), p, r.PathValue("room"), writes, true)
	a.reply(w, r, http.StatusOK, res, err)
}

func (a *api) deleteState(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	q := r.URL.Query()
	wr := substrate.Write{Scope: q.Get("scope"), Key: q.Get("key"), Delete: true}
	if v := q.Get("if_version"); v != "" {
		n, err := intParam(v, "if_version")
		if err != nil {
			a.fail(w, r, err)
			return
		}
		wr.IfVersion = &n
	}
	res, err := a.svc.WriteState(r.Context(), p, r.PathValue("room"), []substrate.Write{wr}, false)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.reply(w, r, http.StatusOK, map[string]any{"deleted": true, "scope": wr.Scope, "key": wr.Key, "seq": res.Seq}, nil)
}

func intParam(v, name string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errs.New(errs.InvalidField, "%s=%q is not a non-negative integer", name, v).WithHint("send %s as a whole number", name)
	}
	return n, nil
}

// decode reads the JSON body into v. Unknown fields are refused, so a
// misspelt field is an error rather than silently ignored. With optional,
// an empty body is allowed.
func (a *api) decode(w http.ResponseWriter, r *http.Request, v any, optional bool) bool {
	return a.decodeBody(w, r, v, optional, true)
}

// decodeBody is decode; checkText false leaves refusing NUL and invalid
// UTF-8 to the operation (an invocation audits a refused call, and must
// see it to do so).
func (a *api) decodeBody(w http.ResponseWriter, r *http.Request, v any, optional, checkText bool) bool {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			a.fail(w, r, errs.New(errs.BodyTooLarge, "request body is over the limit of %d bytes", tooBig.Limit).
				WithHint("send less per request; split batches").With("limit", tooBig.Limit))
			return false
		}
		a.fail(w, r, errs.New(errs.InvalidJSON, "could not read the request body: %v", err).WithHint("send the body again"))
		return false
	}
	if checkText {
		if err := substrate.CheckJSONText(body); err != nil {
			a.fail(w, r, err)
			return false
		}
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		if optional {
			return true
		}
		a.fail(w, r, errs.New(errs.InvalidJSON, "request body is empty").WithHint("send a JSON object"))
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		a.fail(w, r, jsonError(err))
		return false
	}
	if dec.More() {
		a.fail(w, r, errs.New(errs.InvalidJSON, "request body has data after the JSON object").WithHint("send exactly one JSON object"))
		return false
	}
	return true
}

func jsonError(err error) *errs.Error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return errs.New(errs.InvalidJSON, "request body is not valid JSON at byte %d: %v", syn.Offset, err).WithHint("send a valid JSON object")
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return errs.New(errs.InvalidJSON, "request body must be a JSON object, not %s", typ.Value).WithHint("send a JSON object")
		}
		return errs.New(errs.InvalidField, "field %q must be %s, not %s", field, typeName(typ.Type.String()), typ.Value).
			WithHint("send %s as %s", field, typeName(typ.Type.String())).With("field", field)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errs.New(errs.InvalidJSON, "request body ends in the middle of the JSON").WithHint("send a complete JSON object")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return errs.New(errs.InvalidField, "unknown field %q", field).WithHint("check the field name against the API documentation").With("field", field)
	}
	return errs.New(errs.InvalidJSON, "request body could not be decoded: %v", err).WithHint("send a valid JSON object")
}

func typeName(goType string) string {
	switch {
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "a boolean"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "*int"), strings.HasPrefix(goType, "float"):
		return "a number"
	case strings.HasPrefix(goType, "[]"), strings.HasPrefix(goType, "*[]"):
		return "a list"
	}
	return "an object"
}

func (a *api) reply(w http.ResponseWriter, r *http.Request, status int, v any, err error) {
	if err != nil {
		a.fail(w, r, err)
		return
	}
	httpmw.WriteJSON(w, status, v)
}

func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := errs.From(err)
	switch e.Code {
	case errs.Internal:
		a.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "request_id", httpmw.RequestID(r.Context()), "err", err)
	case errs.Unavailable:
		a.log.Warn("database unavailable", "method", r.Method, "path", r.URL.Path, "request_id", httpmw.RequestID(r.Context()), "err", err)
	case errs.Unauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="sync"`)
	}
	httpmw.Fail(w, r, e.In(Words))
}

// --- middleware ---

// corsHeaders let browser clients call the API with bearer tokens. No
// cookies are involved, so any origin is safe. The stack sets them on
// every response; cors answers the preflights.
var corsHeaders = map[string]string{"Access-Control-Allow-Origin": "*"}

func (a *api) cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE")
			w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
			w.Header().Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// validText refuses a path or query that is not UTF-8 text, or holds NUL,
// before any handler: ids and keys reach the database, which refuses them
// with an error that is no fault of the server's.
func validText(a *api, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bad := !utf8.ValidString(r.URL.Path) || strings.ContainsRune(r.URL.Path, 0)
		for _, vs := range r.URL.Query() {
			for _, v := range vs {
				bad = bad || !utf8.ValidString(v) || strings.ContainsRune(v, 0)
			}
		}
		if bad {
			a.fail(w, r, errs.New(errs.InvalidField, "the request's path or query is not UTF-8 text, or holds NUL").
				WithHint("send room ids, agent ids, scopes and keys as UTF-8 text without control characters"))
			return
		}
		next.ServeHTTP(w, r)
	})
}
