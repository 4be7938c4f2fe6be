// Package web is the people's side of the lobby: server-rendered pages that
// show a person their rooms (/), one room live (/rooms/{id}), fed by the
// same commit notifications as waits (server-sent events at
// /live/rooms/{id}), and the room's loom (/web/rooms/{id}/loom). Every page
// is a thin adapter over lobby and substrate calls: it reads with the
// person's own authority in the room (lobby.PersonPrincipal) or a view
// token's, and acts as the person's own agent (lobby.PersonActor), through
// forms checked for cross-site origins. The README's "The lobby and room
// pages" says what each page shows.
//
// One file per page: lobbypage.go, roompage.go (with its scrubber,
// scrubber.go, and console, console.go), forms.go (acting from the room
// page), live.go (the live streams) and loom.go; web.go holds what they
// share (options, routes, rendering, errors) and format.go the templates'
// helpers.
package web

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/oauth/showonce"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/httpmw"
	"github.com/syncsubstrate/sync/substrate/loom"
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
	// MaxStreamsPerAddress bounds those of one client address (an IPv6
	// client's /64), whatever credentials it brings: rooms (and so view
	// tokens) can be made by anyone when room creation is open. Default
	// 4 × MaxStreams.
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
	// ShowOnceKey (16, 24 or 32 bytes) seals a rotated token into the
	// cookie that carries it across the redirect to its one showing
	// (showonce.go). Processes serving one site must share it, or a
	// rotation answered by one and shown by another says the token could
	// not be shown. Default: a random key of this Web's.
	ShowOnceKey []byte
}

// Web serves the pages.
type Web struct {
	opt  Options
	tmpl *template.Template
	base *template.Template // tmpl before any execution, to clone per page

	csrf *http.CrossOriginProtection
	seal *showonce.Sealer // ShowOnceKey's

	mu      sync.Mutex
	streams map[string]int   // open live streams per person or view token
	feeds   map[string]*feed // followed rooms (livefeed.go)

	streamIDs   atomic.Int64
	liveReads   atomic.Int64  // rooms read for live streams
	liveRenders atomic.Int64  // sections rendered for live streams
	liveStarted atomic.Int64  // live streams past their first section (tests wait on it)
	done        chan struct{} // closed by Close: live streams end
	once        sync.Once
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
		"json":  prettyJSON,
		"ago":   ago,
		"when":  when,
		"clock": clock,
		// args passes several values to a shared template: args "Room" r "Action" a.
		"args": func(kv ...any) map[string]any {
			m := map[string]any{}
			for i := 0; i+1 < len(kv); i += 2 {
				m[fmt.Sprint(kv[i])] = kv[i+1]
			}
			return m
		},
		"compact": compactJSON,
		"typed":   typed,
		// optValue is an enum value as a select's option sends it: text
		// as itself where the field's type says string, else JSON (which
		// formValue reads back as the value it was).
		"optValue": func(v any, typ string) string {
			if s, ok := v.(string); ok && typ == "string" {
				return s
			}
			return compactJSON(v)
		},
		"text":  textOf,
		"has":   slices.Contains[[]string],
		"short": func(v any) string { return textCut(v, 300) },
		"brief": brief,
		"audit": auditLine,
		// The loom's own scopes hold its machinery: folded by default.
		"loomScope": loom.IsScope,
		// A model's thinking is for those who observe it, on request:
		// folded, its text whole inside (seed 002: collapsed by default).
		"thought":     loom.IsThought,
		"thoughtText": thoughtText,
		"runes":       utf8.RuneCountInString,
		"cut":         shorten,
		// internal picks the folded-away scopes or logs (machinery).
		"internal": func(ss []scope) []scope {
			var out []scope
			for _, s := range ss {
				if s.Internal {
					out = append(out, s)
				}
			}
			return out
		},
		// flashFor is the last form's outcome for an action's forms: set
		// per page by render when there is one (forms.go).
		"flashFor": func(string) *flash { return nil },
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
	base := tmpl
	if tmpl, err = base.Clone(); err != nil {
		return nil, err
	}
	seal, err := showonce.New(opt.ShowOnceKey)
	if err != nil {
		return nil, err
	}
	return &Web{opt: opt, tmpl: tmpl, base: base, csrf: csrf, seal: seal, streams: map[string]int{}, feeds: map[string]*feed{}, done: make(chan struct{})}, nil
}

// Routes registers the lobby, the live streams and the static assets. The
// room page shares its path with the REST API: see IsPage.
func (wb *Web) Routes(mux *http.ServeMux) {
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /web/", http.StripPrefix("/web/", staticAssets(static)))
	mux.HandleFunc("GET /{$}", wb.lobbyPage)
	mux.HandleFunc("GET /live/rooms/{room}", wb.live)
	// Acting from the page: forms, checked for a cross-site origin
	// (Sec-Fetch-Site / Origin) before anything else.
	mux.Handle("POST /web/rooms/{room}/invoke/{action}", wb.csrf.Handler(http.HandlerFunc(wb.invoke)))
	mux.Handle("POST /web/rooms/{room}/message", wb.csrf.Handler(http.HandlerFunc(wb.message)))
	mux.Handle("POST /web/rooms/{room}/tokens/rotate", wb.csrf.Handler(http.HandlerFunc(wb.rotateToken)))
	mux.HandleFunc("GET /web/rooms/{room}/loom", wb.loomPage)
	wb.searchRoutes(mux)
	mux.Handle("POST /web/rooms/{room}/loom", wb.csrf.Handler(http.HandlerFunc(wb.loomRun)))
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
	t := wb.tmpl
	if f, ok := data["Flash"].(*flash); ok {
		// An executed template cannot be cloned: clone the one kept
		// unexecuted for this.
		if c, err := wb.base.Clone(); err == nil {
			t = c.Funcs(template.FuncMap{"flashFor": func(action string) *flash {
				if f.Action == action {
					return f
				}
				return nil
			}})
		}
	}
	if err := t.ExecuteTemplate(w, name+".html", data); err != nil && r.Context().Err() == nil {
		wb.opt.Log.Error("render page", "page", name, "err", err)
	}
}

func (wb *Web) errorPage(w http.ResponseWriter, r *http.Request, status int, title, msg string, tokenInURL bool) {
	wb.render(w, r, status, "error", map[string]any{"Title": title, "Message": msg}, tokenInURL)
}

// fail shows a domain error as a page with its status; a room that is not
// the person's reads as not found.
func (wb *Web) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the browser went away (a live refresh cut short by a navigation)
	}
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
	httpmw.SetRetryAfter(w, e) // a refusal the domain timed (room_busy), as the API says it
	wb.errorPage(w, r, e.Code.Status(), "That did not work", msg, r.URL.Query().Get("view") != "")
}

// urlPath is the request's path and query, for the sign-in page to return
// to (it accepts only paths on this site).
func urlPath(r *http.Request) string {
	return template.URLQueryEscaper(r.URL.RequestURI())
}
