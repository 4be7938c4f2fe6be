// Package web is the people's side of the lobby: server-rendered pages that
// show a person their rooms (/), one room live (/rooms/{id}), fed by the
// same commit notifications as waits (server-sent events at
// /live/rooms/{id}), and the room's loom (/web/rooms/{id}/loom). Every page
// is a thin adapter over lobby and substrate calls: it reads with the
// person's own authority in the room (lobby.PersonPrincipal) or a view
// token's, and acts as the person's own agent (lobby.PersonActor), through
// forms checked for cross-site origins. The README's "The lobby and room
// pages" says what each page shows.
package web

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/httpmw"
	"github.com/syncsubstrate/sync/substrate/loom"
	"github.com/syncsubstrate/sync/substrate/trajectory"
)

//go:embed assets
var assets embed.FS

// Options configure the pages.
type Options struct {
	// Lobby says which rooms a person has and with what access. Required.
	Lobby *lobby.Lobby
	// Substrate reads the rooms. Required.
	Substrate *substrate.Service
	// SignedIn names the person signed in on the browser making the
	// request (oauth.Server.SignedIn). Required.
	SignedIn func(*http.Request) (userID, username string, ok bool)
	// MaxStreams bounds the live streams one person (or one view token)
	// keeps open at once; more are refused with 429. Default 16.
	MaxStreams int
	// MaxStreamsPerAddress bounds those of one client address, whatever
	// credentials it brings: rooms (and so view tokens) can be made by
	// anyone when room creation is open. Default 4 × MaxStreams.
	MaxStreamsPerAddress int
	// Heartbeat is how often an idle live stream sends a comment, so
	// proxies keep it open. Default 25 s.
	Heartbeat time.Duration
	// Log receives failures. Default slog.Default().
	Log *slog.Logger
	// PublicURL is the server's public origin, trusted by the cross-origin
	// check of the pages' forms besides the request's own Host (as the
	// authorization server's pages trust it). Optional.
	PublicURL string
}

// Web serves the pages.
type Web struct {
	opt  Options
	tmpl *template.Template

	csrf *http.CrossOriginProtection

	mu      sync.Mutex
	streams map[string]int // open live streams per person or view token
	done    chan struct{}  // closed by Close: live streams end
	once    sync.Once
}

// Close ends every live stream, for a graceful shutdown (a stream's
// request would otherwise outlast it; browsers reconnect elsewhere).
func (wb *Web) Close() { wb.once.Do(func() { close(wb.done) }) }

// New builds the pages.
func New(opt Options) (*Web, error) {
	if opt.Lobby == nil || opt.Substrate == nil || opt.SignedIn == nil {
		return nil, errors.New("web: Lobby, Substrate and SignedIn are required")
	}
	if opt.MaxStreams <= 0 {
		opt.MaxStreams = 16
	}
	if opt.MaxStreamsPerAddress <= 0 {
		opt.MaxStreamsPerAddress = 4 * opt.MaxStreams
	}
	if opt.Heartbeat <= 0 {
		opt.Heartbeat = 25 * time.Second
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	tmpl, err := template.New("").Funcs(template.FuncMap{
		"json": prettyJSON,
		"ago":  ago,
		// args passes several values to a shared template: args "Room" r "Action" a.
		"args": func(kv ...any) map[string]any {
			m := map[string]any{}
			for i := 0; i+1 < len(kv); i += 2 {
				m[fmt.Sprint(kv[i])] = kv[i+1]
			}
			return m
		},
		"compact": compactJSON,
		"text":    textOf,
		"has":     slices.Contains[[]string],
		"short":   func(v any) string { return shorten(textOf(v), 300) },
		"audit":   auditLine,
		// The loom's own scopes hold its machinery: folded by default.
		"loomScope": func(name string) bool { return strings.HasPrefix(name, "_loom") },
		// A model's thinking is for those who observe it, on request:
		// folded, its text whole inside (seed 002: collapsed by default).
		"thought":     loom.IsThought,
		"thoughtText": thoughtText,
		"runes":       utf8.RuneCountInString,
	}).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, err
	}
	csrf := http.NewCrossOriginProtection()
	if opt.PublicURL != "" {
		if err := csrf.AddTrustedOrigin(strings.TrimRight(opt.PublicURL, "/")); err != nil {
			return nil, err
		}
	}
	return &Web{opt: opt, tmpl: tmpl, csrf: csrf, streams: map[string]int{}, done: make(chan struct{})}, nil
}

// Routes registers the lobby, the live streams and the static assets. The
// room page shares its path with the REST API: see IsPage.
func (wb *Web) Routes(mux *http.ServeMux) {
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /web/", http.StripPrefix("/web/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", wb.lobbyPage)
	mux.HandleFunc("GET /live/rooms/{room}", wb.live)
	// Acting from the page: forms, checked for a cross-site origin
	// (Sec-Fetch-Site / Origin) before anything else.
	mux.Handle("POST /web/rooms/{room}/invoke/{action}", wb.csrf.Handler(http.HandlerFunc(wb.invoke)))
	mux.Handle("POST /web/rooms/{room}/message", wb.csrf.Handler(http.HandlerFunc(wb.message)))
	mux.Handle("POST /web/rooms/{room}/tokens/rotate", wb.csrf.Handler(http.HandlerFunc(wb.rotateToken)))
	mux.HandleFunc("GET /web/rooms/{room}/loom", wb.loomPage)
	mux.Handle("POST /web/rooms/{room}/loom", wb.csrf.Handler(http.HandlerFunc(wb.loomRun)))
}

// invoke runs an action from its form, as the person's own agent in the
// room (lobby.PersonActor), with the params the form's fields give.
func (wb *Web) invoke(w http.ResponseWriter, r *http.Request) {
	roomID, action := r.PathValue("room"), r.PathValue("action")
	p, ok := wb.actor(w, r, roomID)
	if !ok {
		return
	}
	if err := r.ParseForm(); err != nil {
		wb.roomWithError(w, r, roomID, errs.New(errs.InvalidField, "the form could not be read").WithHint("send the form again"))
		return
	}
	params := map[string]any{}
	for name, vals := range r.PostForm {
		pname, ok := strings.CutPrefix(name, "p.")
		if !ok || len(vals) == 0 {
			continue
		}
		v, err := formValue(vals[len(vals)-1], r.PostForm.Get("t."+pname))
		if err != nil {
			wb.roomWithError(w, r, roomID, errs.New(errs.InvalidParam, "%s: %v", pname, err).With("param", pname).WithHint("fix the field and invoke %s again", action))
			return
		}
		if v != nil {
			params[pname] = v
		}
	}
	raw, _ := json.Marshal(params)
	if _, err := wb.opt.Substrate.Invoke(r.Context(), p, roomID, action, raw); err != nil {
		wb.roomWithError(w, r, roomID, err)
		return
	}
	http.Redirect(w, r, "/rooms/"+url.PathEscape(roomID)+"#action-"+url.PathEscape(action), http.StatusSeeOther)
}

// message sends a message to the room as the person's own agent.
func (wb *Web) message(w http.ResponseWriter, r *http.Request) {
	roomID := r.PathValue("room")
	p, ok := wb.actor(w, r, roomID)
	if !ok {
		return
	}
	body := strings.TrimSpace(r.PostFormValue("body"))
	if body == "" {
		wb.roomWithError(w, r, roomID, errs.New(errs.InvalidField, "the message is empty").WithHint("write something, then send"))
		return
	}
	raw, _ := json.Marshal(map[string]any{"body": body})
	if _, err := wb.opt.Substrate.Invoke(r.Context(), p, roomID, "_send_message", raw); err != nil {
		wb.roomWithError(w, r, roomID, err)
		return
	}
	http.Redirect(w, r, "/rooms/"+url.PathEscape(roomID)+"#h-messages", http.StatusSeeOther)
}

// actor is the signed-in person's acting authority in the room; view
// links never act.
func (wb *Web) actor(w http.ResponseWriter, r *http.Request, roomID string) (*substrate.Principal, bool) {
	userID, username, signed := wb.opt.SignedIn(r)
	if !signed {
		wb.errorPage(w, r, http.StatusUnauthorized, "Sign in to act", "Acting in a room needs you signed in.", false)
		return nil, false
	}
	p, err := wb.opt.Lobby.PersonActor(r.Context(), userID, username, roomID)
	if err != nil {
		wb.fail(w, r, err)
		return nil, false
	}
	return p, true
}

// roomWithError shows the room page again with what went wrong, in the
// error's status; a room the person cannot read is just the error.
func (wb *Web) roomWithError(w http.ResponseWriter, r *http.Request, roomID string, err error) {
	e := errs.From(err)
	if e.Code == errs.Internal {
		wb.fail(w, r, err)
		return
	}
	msg := e.Message
	if e.Hint != "" {
		msg += ". " + e.Hint + "."
	}
	wb.roomWith(w, r, roomID, e.Code.Status(), "Error", msg, err)
}

// roomWith shows the room page to the signed-in person with one more
// datum (key: value) in the given status; when the room cannot be read,
// it shows err (the failure that led here) instead.
func (wb *Web) roomWith(w http.ResponseWriter, r *http.Request, roomID string, status int, key string, value any, err error) {
	userID, username, _ := wb.opt.SignedIn(r)
	p, access, perr := wb.opt.Lobby.PersonPrincipal(r.Context(), userID, username, roomID)
	if perr != nil {
		wb.fail(w, r, cmp.Or(err, perr))
		return
	}
	data, derr := wb.roomData(r.Context(), p, roomID)
	if derr != nil {
		wb.fail(w, r, cmp.Or(err, derr))
		return
	}
	data["Who"], data["CanReplay"], data["CanAct"], data[key] = username+" ("+access+")", p.Admin(), canAct(access), value
	data["CanRotate"] = access == "owner"
	wb.render(w, r, status, "room", data, false)
}

// rotateToken replaces the room's room or view token (form field which)
// for an owner, and shows the room page with the new token, this once.
func (wb *Web) rotateToken(w http.ResponseWriter, r *http.Request) {
	roomID := r.PathValue("room")
	userID, username, signed := wb.opt.SignedIn(r)
	if !signed {
		wb.errorPage(w, r, http.StatusUnauthorized, "Sign in to rotate tokens", "Rotating a room's tokens needs you signed in as an owner.", false)
		return
	}
	rt, err := wb.opt.Lobby.RotateToken(r.Context(), userID, username, roomID, r.PostFormValue("which"))
	if err != nil {
		wb.roomWithError(w, r, roomID, err)
		return
	}
	wb.roomWith(w, r, roomID, http.StatusOK, "NewToken", rt, nil)
}

// formValue turns a form field into a param of the given type (the
// action's ParamSpec type, sent beside the field): numbers and booleans as
// such, objects, arrays and untyped values as JSON when they parse, text
// as text. An empty field is an absent param.
func formValue(v, typ string) (any, error) {
	if v == "" {
		return nil, nil
	}
	switch typ {
	case "string":
		return v, nil
	case "integer":
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a whole number", v)
		}
		return n, nil
	case "number":
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", v)
		}
		return f, nil
	case "boolean":
		return v == "true" || v == "on", nil
	}
	var x any
	if err := json.Unmarshal([]byte(v), &x); err == nil {
		return x, nil
	}
	if typ == "object" || typ == "array" {
		return nil, fmt.Errorf("%q is not JSON", v)
	}
	return v, nil
}

// IsPage reports whether a request for /rooms/{id} is a browser asking for
// the room page rather than a REST client asking for the room: a GET that
// accepts HTML and carries no bearer token. Everything else goes to the
// API unchanged.
func IsPage(r *http.Request) bool {
	if r.Method != http.MethodGet || r.Header.Get("Authorization") != "" {
		return false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/rooms/")
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return false
	}
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// RoomPage serves /rooms/{id} to a browser (see IsPage).
func (wb *Web) RoomPage(w http.ResponseWriter, r *http.Request) {
	roomID := strings.TrimPrefix(r.URL.Path, "/rooms/")
	p, who, access, viewToken, ok := wb.reader(w, r, roomID)
	if !ok {
		return
	}
	q := r.URL.Query()
	data, err := wb.roomData(r.Context(), p, roomID)
	if err != nil {
		wb.fail(w, r, err)
		return
	}
	data["Who"], data["ViewToken"] = who, viewToken
	data["CanReplay"] = p.Admin()
	// Acting is for signed-in people who may: not view links, not
	// observers (the form's post says so if it is tried anyway).
	data["CanAct"] = viewToken == "" && canAct(access)
	data["CanRotate"] = viewToken == "" && access == "owner"
	if at := q.Get("at"); at != "" {
		// The audit scrubber: the state as it was at a seq, from the
		// audit log (room authority only).
		seq, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			wb.fail(w, r, errs.New(errs.InvalidField, "at=%q is not a seq", at).WithHint("pick a seq between 1 and the room's current seq"))
			return
		}
		past, err := trajectory.Replay(r.Context(), wb.opt.Substrate, p, roomID, seq)
		if err != nil {
			wb.fail(w, r, err)
			return
		}
		data["At"], data["Scopes"], data["More"] = seq, byScope(past.Entries), past.More
	}
	if src := q.Get("eval"); src != "" {
		// The CEL console: an expression evaluated with the reader's own
		// authority, as sync_eval_cel would for them.
		res, err := wb.opt.Substrate.Eval(r.Context(), p, roomID, src, nil)
		data["Eval"] = src
		if err != nil {
			e := errs.From(err)
			if e.Code == errs.Internal {
				wb.fail(w, r, err)
				return
			}
			data["EvalError"] = e.Message
		} else {
			data["EvalResult"] = res
		}
	}
	name := "room"
	if r.URL.Query().Get("part") == "main" {
		name = "roommain" // the live refresh swaps the page's main section
	}
	wb.render(w, r, http.StatusOK, name, data, viewToken != "")
}

// reader resolves who reads the room: a view token (?view=, read-only, no
// account) or the signed-in person with their access. Otherwise it answers
// (sign-in redirect, or 404 for a room that is not theirs) and returns ok
// false.
func (wb *Web) reader(w http.ResponseWriter, r *http.Request, roomID string) (p *substrate.Principal, who, access, viewToken string, ok bool) {
	if tok := r.URL.Query().Get("view"); tok != "" {
		p, err := wb.opt.Substrate.AuthenticateIn(r.Context(), roomID, tok)
		if err != nil || p.Kind != substrate.KindView || p.RoomID != roomID {
			wb.errorPage(w, r, http.StatusNotFound, "No such room", "That link does not open a room. Ask whoever sent it for a new one.", true)
			return nil, "", "", "", false
		}
		return p, "view link (read-only)", "", tok, true
	}
	userID, username, signed := wb.opt.SignedIn(r)
	if !signed {
		http.Redirect(w, r, "/signin?next="+urlPath(r), http.StatusSeeOther)
		return nil, "", "", "", false
	}
	p, access, err := wb.opt.Lobby.PersonPrincipal(r.Context(), userID, username, roomID)
	if err != nil {
		wb.fail(w, r, err)
		return nil, "", "", "", false
	}
	return p, username + " (" + access + ")", access, "", true
}

// canAct reports whether a room access lets a person act from the page.
func canAct(access string) bool {
	return access == "owner" || access == "collaborator" || access == "participant"
}

// roomData reads what the room page shows, with p's authority: the
// context (agents, actions, views, messages) and the state with versions.
func (wb *Web) roomData(ctx context.Context, p *substrate.Principal, roomID string) (map[string]any, error) {
	svc := wb.opt.Substrate
	room, err := svc.GetRoom(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	env, err := svc.Context(ctx, p, roomID, substrate.ContextRequest{Depth: "full", MessagesLimit: 50})
	if err != nil {
		return nil, err
	}
	st, err := svc.ReadState(ctx, p, roomID, substrate.ReadQuery{Disabled: true})
	if err != nil {
		return nil, err
	}
	views, err := svc.ListViews(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	feeds, err := wb.logFeeds(ctx, p, roomID, st.Entries)
	if err != nil {
		return nil, err
	}
	actions := actionsOf(env.Actions)
	for i, a := range actions {
		// Why not: the first false clause of a precondition that needs
		// no params, as the reader can evaluate it (an action reads with
		// its registrar's authority, which may see more).
		if !a.Available && a.If != "" && !strings.Contains(a.If, "params") {
			if res, err := svc.Eval(ctx, p, roomID, a.If, nil); err == nil && res.Unmet != nil {
				actions[i].Why = res.Unmet
			}
		}
	}
	var label string
	var meta map[string]any
	if json.Unmarshal(room.Meta, &meta) == nil {
		label, _ = meta["label"].(string)
	}
	return map[string]any{
		"Room": room, "Label": label, "Seq": st.Seq, "More": st.More,
		"Scopes": byScope(st.Entries), "Agents": agentsOf(env.Agents), "Actions": actions,
		"Views": viewsOf(env.Views), "Messages": env.Messages, "Now": time.Now(),
		"Surfaces": surfacesOf(views, actions, env.State), "Feeds": feeds,
	}, nil
}

// feedSize is how many of a log's newest entries the room page shows.
const feedSize = 20

// logFeeds reads the newest entries of each readable scope's append log
// (a whole-room read holds mutable entries only), and for room authority
// the audit log: _messages has its own section. Scopes without a log read
// empty.
func (wb *Web) logFeeds(ctx context.Context, p *substrate.Principal, roomID string, mutable []substrate.Entry) ([]scope, error) {
	names := []string{substrate.ScopeShared}
	for _, e := range mutable {
		if !slices.Contains(names, e.Scope) && e.Scope != "_actions" && e.Scope != "_views" {
			names = append(names, e.Scope)
		}
	}
	if p.Admin() {
		names = append(names, substrate.ScopeAudit)
	}
	var out []scope
	for _, name := range names {
		st, err := wb.opt.Substrate.ReadState(ctx, p, roomID, substrate.ReadQuery{Scope: name, Limit: feedSize})
		if err != nil {
			if errs.From(err).Code == errs.Internal {
				return nil, err
			}
			continue
		}
		var logs []substrate.Entry
		for _, e := range st.Entries {
			if e.SortKey != nil {
				logs = append(logs, e)
			}
		}
		if len(logs) > 0 {
			out = append(out, scope{Name: name, Entries: logs})
		}
	}
	return out, nil
}

// scope is one scope's entries, sorted by key.
type scope struct {
	Name    string
	Entries []substrate.Entry
}

// byScope groups the state by scope. Action and view definitions are left
// out: the page shows them as actions and views.
func byScope(entries []substrate.Entry) []scope {
	m := map[string][]substrate.Entry{}
	for _, e := range entries {
		if e.Scope == "_actions" || e.Scope == "_views" {
			continue
		}
		m[e.Scope] = append(m[e.Scope], e)
	}
	out := make([]scope, 0, len(m))
	for name, es := range m {
		sort.Slice(es, func(i, j int) bool { return es[i].Key < es[j].Key })
		out = append(out, scope{Name: name, Entries: es})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

type agentRow struct {
	ID       string
	Presence map[string]any
	LastSeen string // relative: "12s ago"
}

func agentsOf(agents map[string]any) []agentRow {
	out := make([]agentRow, 0, len(agents))
	for id, a := range agents {
		m, _ := a.(map[string]any)
		row := agentRow{ID: id, Presence: m}
		if hb, ok := m["last_heartbeat"].(string); ok {
			if t, err := time.Parse(time.RFC3339Nano, hb); err == nil {
				row.LastSeen = ago(t)
			}
		}
		out = append(out, row)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

type actionRow struct {
	ID string
	substrate.ActionView
	// Why is the first clause of the action's if that is false for the
	// reader, with what it read (when the reader can evaluate it).
	Why *expr.Explanation
}

func actionsOf(actions map[string]substrate.ActionView) []actionRow {
	out := make([]actionRow, 0, len(actions))
	for id, a := range actions {
		if a.Builtin {
			continue
		}
		out = append(out, actionRow{ID: id, ActionView: a})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

type viewRow struct {
	ID    string
	Value any
}

func viewsOf(views map[string]any) []viewRow {
	out := make([]viewRow, 0, len(views))
	for id, v := range views {
		out = append(out, viewRow{ID: id, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// lobbyPage lists the signed-in person's rooms.
func (wb *Web) lobbyPage(w http.ResponseWriter, r *http.Request) {
	userID, username, ok := wb.opt.SignedIn(r)
	if !ok {
		http.Redirect(w, r, "/signin?next=/", http.StatusSeeOther)
		return
	}
	rooms, err := wb.opt.Lobby.UserRooms(r.Context(), userID)
	if err != nil {
		wb.fail(w, r, err)
		return
	}
	wb.render(w, r, http.StatusOK, "lobby", map[string]any{"Who": username, "Rooms": rooms}, false)
}

// live streams change notices for a room as server-sent events: an event
// "change" whose id is the room's seq after each commit or presence
// change. A browser reconnecting sends the last id it saw (Last-Event-ID)
// and is told at once if the room moved past it meanwhile.
func (wb *Web) live(w http.ResponseWriter, r *http.Request) {
	roomID := r.PathValue("room")
	p, _, _, viewToken, ok := wb.reader(w, r, roomID)
	if !ok {
		return
	}
	key := viewToken
	if key == "" {
		key, _, _ = wb.opt.SignedIn(r)
	}
	addr := "addr:" + httpmw.ClientIP(r)
	if !wb.acquire(key, addr) {
		wb.errorPage(w, r, http.StatusTooManyRequests, "Too many live pages",
			fmt.Sprintf("At most %d pages per person (%d per address) can follow rooms live at once. Close some tabs and reload.", wb.opt.MaxStreams, wb.opt.MaxStreamsPerAddress), viewToken != "")
		return
	}
	defer wb.release(key, addr)
	ctx := r.Context()
	changes, stop, err := wb.opt.Substrate.Watch(ctx, p, roomID)
	if err != nil {
		wb.fail(w, r, err)
		return
	}
	defer stop()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: pass events on as they come
	if viewToken != "" {
		h.Set("Referrer-Policy", "no-referrer")
	}
	w.WriteHeader(http.StatusOK)
	last, _ := strconv.ParseInt(r.Header.Get("Last-Event-ID"), 10, 64)
	// send tells the page the room changed (a presence change keeps the
	// seq), or that it is gone.
	userID, username, _ := wb.opt.SignedIn(r)
	send := func() bool {
		// Access is read again at each change: a person who left the room,
		// or a view token rotated since, hears no more of it.
		var err error
		if viewToken != "" {
			_, err = wb.opt.Substrate.AuthenticateIn(ctx, roomID, viewToken)
		} else {
			p, _, err = wb.opt.Lobby.PersonPrincipal(ctx, userID, username, roomID)
		}
		if err != nil {
			fmt.Fprintf(w, "event: gone\ndata: {}\n\n")
			_ = rc.Flush()
			return false
		}
		room, err := wb.opt.Substrate.GetRoom(ctx, p, roomID)
		if err != nil {
			fmt.Fprintf(w, "event: gone\ndata: {}\n\n")
			_ = rc.Flush()
			return false
		}
		last = room.Seq
		fmt.Fprintf(w, "id: %d\nevent: change\ndata: {\"seq\": %d}\n\n", room.Seq, room.Seq)
		return rc.Flush() == nil
	}
	fmt.Fprintf(w, "retry: 2000\n\n")
	if r.Header.Get("Last-Event-ID") != "" {
		// A reconnect: tell the page at once if it missed a change.
		if room, err := wb.opt.Substrate.GetRoom(ctx, p, roomID); err != nil || room.Seq != last {
			if !send() {
				return
			}
		}
	}
	_ = rc.Flush()
	beat := time.NewTicker(wb.opt.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wb.done:
			return
		case <-changes:
			if !send() {
				return
			}
		case <-beat.C:
			fmt.Fprintf(w, ": keep-alive\n\n")
			if rc.Flush() != nil {
				return
			}
		}
	}
}

func (wb *Web) acquire(key, addr string) bool {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	if wb.streams[key] >= wb.opt.MaxStreams || wb.streams[addr] >= wb.opt.MaxStreamsPerAddress {
		return false
	}
	wb.streams[key]++
	wb.streams[addr]++
	return true
}

func (wb *Web) release(keys ...string) {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	for _, key := range keys {
		if wb.streams[key]--; wb.streams[key] <= 0 {
			delete(wb.streams, key)
		}
	}
}

// render writes a page with the headers every page carries: no caching,
// no framing, scripts and styles from this origin only (no inline script),
// and no referrer when the URL holds a view token.
func (wb *Web) render(w http.ResponseWriter, r *http.Request, status int, name string, data map[string]any, tokenInURL bool) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	if tokenInURL {
		h.Set("Referrer-Policy", "no-referrer")
	}
	w.WriteHeader(status)
	if err := wb.tmpl.ExecuteTemplate(w, name+".html", data); err != nil {
		wb.opt.Log.Error("render page", "page", name, "err", err)
	}
}

func (wb *Web) errorPage(w http.ResponseWriter, r *http.Request, status int, title, msg string, tokenInURL bool) {
	wb.render(w, r, status, "error", map[string]any{"Title": title, "Message": msg}, tokenInURL)
}

// fail shows a domain error as a page with its status; a room that is not
// the person's reads as not found.
func (wb *Web) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := errs.From(err)
	if e.Code == errs.Internal {
		wb.opt.Log.Error("web page failed", "path", r.URL.Path, "err", err)
		wb.errorPage(w, r, http.StatusInternalServerError, "Something went wrong", "Try again in a moment.", false)
		return
	}
	msg := e.Message
	if e.Hint != "" {
		msg += ". " + e.Hint + "."
	}
	if e.Code == errs.RoomNotFound {
		msg = "You have no room by that name. Your rooms are listed in the lobby."
	}
	if ms, ok := e.Details["retry_after_ms"].(int64); ok && e.Code.Status() == http.StatusTooManyRequests {
		// A refusal the domain timed (room_busy): as the API says it.
		w.Header().Set("Retry-After", strconv.FormatInt((ms+999)/1000, 10))
	}
	wb.errorPage(w, r, e.Code.Status(), "That did not work", msg, r.URL.Query().Get("view") != "")
}

// urlPath is the request's path and query, for the sign-in page to return
// to (it accepts only paths on this site).
func urlPath(r *http.Request) string {
	return template.URLQueryEscaper(r.URL.RequestURI())
}

func prettyJSON(v any) string {
	var b []byte
	var err error
	if raw, ok := v.(json.RawMessage); ok {
		var x any
		if json.Unmarshal(raw, &x) == nil {
			v = x
		}
	}
	b, err = json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprint(v)
	}
	const max = 2000
	if len(b) > max {
		return string(b[:max]) + fmt.Sprintf("… (%d bytes)", len(b))
	}
	return string(b)
}

// thoughtText is the text of a thought entry ({"text": …, "at": …}).
func thoughtText(v json.RawMessage) string {
	var t struct {
		Text *string `json:"text"`
	}
	if json.Unmarshal(v, &t) == nil && t.Text != nil {
		return *t.Text
	}
	return string(v)
}

// textOf is a value as a person reads it: text as itself, anything else
// as JSON on one line.
func textOf(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return compactJSON(v)
}

// shorten cuts s to at most n bytes (on a rune boundary), saying so.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d bytes)", len(s))
}

// auditLine is an audit entry in a line: its kind, the action, whether it
// went through, and the keys it wrote.
func auditLine(v any) string {
	var a struct {
		Kind, Action string
		OK           *bool
		Delta        []struct{ Scope, Key string }
	}
	raw, _ := v.(json.RawMessage)
	if json.Unmarshal(raw, &a) != nil {
		return shorten(textOf(v), 200)
	}
	line := a.Kind
	if a.Action != "" {
		line += " " + a.Action
	}
	if a.OK != nil && !*a.OK {
		line += " (refused)"
	}
	var keys []string
	for _, d := range a.Delta {
		keys = append(keys, d.Scope+"."+d.Key)
	}
	if len(keys) > 0 {
		line += ": " + shorten(strings.Join(keys, ", "), 200)
	}
	return line
}

// compactJSON is a value on one line (a button's label, a hidden field).
func compactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := time.Since(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.UTC().Format("2006-01-02")
}
