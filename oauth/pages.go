package oauth

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/syncsubstrate/sync/oauth/showonce"
)

//go:embed assets
var assets embed.FS

// web is the browser side: passkey sign-up and sign-in, the consent
// screen, the account page. Pages are server-rendered; a little plain
// JavaScript makes the WebAuthn calls.
type web struct {
	s      *Server
	wa     *webauthn.WebAuthn
	tmpl   *template.Template
	secure bool
	cookie string
	csrf   *http.CrossOriginProtection
	once   *showonce.Sealer // new recovery codes and a claim's new token (showonce.go)
}

// ceremonyCookie names the cookie of a ceremony kind: an autofill sign-in
// waiting in the background and a button sign-in must not share one.
func ceremonyCookie(kind string) string { return "sync_webauthn_" + kind }

func newWeb(ctx context.Context, s *Server) (*web, error) {
	u, err := url.Parse(s.issuer)
	if err != nil {
		return nil, err
	}
	wa, err := webauthn.New(&webauthn.Config{
		RPID:          u.Hostname(),
		RPDisplayName: "sync",
		RPOrigins:     []string{u.Scheme + "://" + u.Host},
		Timeouts: webauthn.TimeoutsConfig{
			Login:        webauthn.TimeoutConfig{Enforce: true, Timeout: 5 * time.Minute},
			Registration: webauthn.TimeoutConfig{Enforce: true, Timeout: 5 * time.Minute},
		},
	})
	if err != nil {
		return nil, err
	}
	tmpl, err := template.New("").Funcs(template.FuncMap{
		"ago": func(t time.Time) string {
			if t.IsZero() {
				return "never"
			}
			return time.Since(t).Round(time.Second).String() + " ago"
		},
		"has": func(list []string, s string) bool { return slices.Contains(list, s) },
	}).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, err
	}
	// The lobby's key too (its rotated tokens): the cookies' names and
	// binds differ, so one never opens as another.
	key, err := serverKey(ctx, s.db, "page_show_once", 32)
	if err != nil {
		return nil, err
	}
	once, err := showonce.New(key)
	if err != nil {
		return nil, err
	}
	wb := &web{s: s, wa: wa, tmpl: tmpl, secure: u.Scheme == "https", cookie: "sync_session", csrf: http.NewCrossOriginProtection(), once: once}
	if wb.secure {
		wb.cookie = "__Host-sync_session"
	}
	if err := wb.csrf.AddTrustedOrigin(u.Scheme + "://" + u.Host); err != nil {
		return nil, err
	}
	return wb, nil
}

func (wb *web) routes(mux *http.ServeMux) {
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /signin", wb.page("signin"))
	mux.HandleFunc("GET /signup", wb.signupPage)
	mux.HandleFunc("GET /recover", wb.page("recover"))
	mux.HandleFunc("GET /account", wb.account)
	mux.HandleFunc("GET "+codesPath, wb.showRecoveryCodes)
	mux.HandleFunc("GET "+claimedPath, wb.showClaimedToken)
	// Each authorize may fetch a client metadata document and store a client.
	mux.Handle("GET /authorize", wb.s.limited(http.HandlerFunc(wb.authorize)))
	// Every state-changing browser request is checked for a cross-site
	// origin (Sec-Fetch-Site / Origin) before anything else.
	post := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, wb.csrf.Handler(wb.s.limited(h))) }
	post("POST /authorize", wb.authorize)
	post("POST /signout", wb.signout)
	post("POST /webauthn/signup/begin", wb.signupBegin)
	post("POST /webauthn/signup/finish", wb.signupFinish)
	post("POST /webauthn/login/begin", wb.loginBegin)
	post("POST /webauthn/login/finish", wb.loginFinish)
	post("POST /webauthn/autofill/begin", wb.loginBegin)
	post("POST /webauthn/autofill/finish", wb.loginFinish)
	post("POST /webauthn/recover/begin", wb.recoverBegin)
	post("POST /webauthn/add/begin", wb.addBegin)
	post("POST /webauthn/add/finish", wb.addFinish)
	post("POST /account/invite", wb.createInvite)
	post("POST /account/revoke", wb.revokeClient)
	post("POST /account/passkeys/delete", wb.deletePasskey)
	post("POST /account/passkeys/rename", wb.renamePasskey)
	post("POST "+codesPath, wb.newRecoveryCodes)
	post("POST /account/rooms/{action}", wb.roomAction)
}

// --- rendering and errors ---

func (wb *web) render(w http.ResponseWriter, status int, name string, data map[string]any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	// No http://[::1]:* source: Chromium rejects IPv6 literals in CSP
	// host sources (logging an error on every page) and ignores them.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; form-action 'self' https: http://localhost:* http://127.0.0.1:*")
	w.WriteHeader(status)
	if err := wb.tmpl.ExecuteTemplate(w, name+".html", data); err != nil {
		wb.s.log.Error("render page", "page", name, "err", err)
	}
}

func (wb *web) page(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		wb.render(w, http.StatusOK, name, map[string]any{"Next": safeNext(r.URL.Query().Get("next"))})
	}
}

func (wb *web) errorPage(w http.ResponseWriter, status int, title, msg string) {
	wb.render(w, status, "error", map[string]any{"Title": title, "Message": msg})
}

// apiError answers a page script's JSON call.
func apiError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"error": code, "message": msg})
}

// safeNext keeps post-sign-in redirects on this site: next must be a path
// on this origin. Browsers drop tabs and newlines from URLs and read a
// backslash as a slash, so "/\t/evil.example" would become
// "//evil.example": any control character or backslash is refused, not
// only the literal prefixes.
func safeNext(next string) string {
	const home = "/account"
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") {
		return home
	}
	for _, r := range next {
		if r < 0x20 || r == 0x7f || r == '\\' || (r >= 0x80 && r <= 0x9f) {
			return home
		}
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") {
		return home
	}
	return next
}

// --- browser sessions ---

func (wb *web) user(r *http.Request) *User {
	c, err := r.Cookie(wb.cookie)
	if err != nil || c.Value == "" {
		return nil
	}
	u, err := wb.s.acct.sessionUser(r.Context(), c.Value)
	if err != nil {
		return nil
	}
	return u
}

// PageKey is a key of size bytes named name, made once and shared by
// every server process on this database (smcp_server_keys), for other
// packages' pages to seal what a browser carries from one request to the
// next (a secret shown once, package showonce: the lobby's rotated tokens;
// oauth's own pages use the same "show_once" key).
func (s *Server) PageKey(ctx context.Context, name string, size int) ([]byte, error) {
	return serverKey(ctx, s.db, "page_"+name, size)
}

// SignedIn reports the person signed in on this browser (their session
// cookie), for other packages' pages.
func (s *Server) SignedIn(r *http.Request) (userID, username string, ok bool) {
	u := s.web.user(r)
	if u == nil {
		return "", "", false
	}
	return u.ID, u.Username, true
}

// signedIn returns the signed-in user, or sends the browser to sign in
// (back to the account page) and returns nil.
func (wb *web) signedIn(w http.ResponseWriter, r *http.Request) *User {
	u := wb.user(r)
	if u == nil {
		http.Redirect(w, r, "/signin?next=/account", http.StatusSeeOther)
	}
	return u
}

func (wb *web) signIn(w http.ResponseWriter, r *http.Request, userID string) error {
	id, err := wb.s.acct.newSession(r.Context(), userID)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: wb.cookie, Value: id, Path: "/", HttpOnly: true, Secure: wb.secure,
		SameSite: http.SameSiteLaxMode, MaxAge: int(sessionTTL.Seconds())})
	return nil
}

func (wb *web) signout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(wb.cookie); err == nil {
		_ = wb.s.acct.endSession(r.Context(), c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: wb.cookie, Value: "", Path: "/", HttpOnly: true, Secure: wb.secure, SameSite: http.SameSiteLaxMode, MaxAge: -1})
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// --- WebAuthn ceremony state: server-side, single use, 5 minutes ---

type ceremony struct {
	Kind     string               `json:"kind"`
	Data     webauthn.SessionData `json:"data"`
	Username string               `json:"username,omitempty"`
	Handle   []byte               `json:"handle,omitempty"`
	Invite   string               `json:"invite,omitempty"`
	UserID   string               `json:"user_id,omitempty"`
	Code     string               `json:"code,omitempty"`
}

func (wb *web) saveCeremony(w http.ResponseWriter, r *http.Request, c *ceremony) error {
	raw, err := json.Marshal(c)
	if err != nil {
		return err
	}
	id, err := wb.s.acct.saveCeremony(r.Context(), c.Kind, raw)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: ceremonyCookie(c.Kind), Value: id, Path: "/webauthn", HttpOnly: true, Secure: wb.secure,
		SameSite: http.SameSiteStrictMode, MaxAge: 300})
	return nil
}

// startCeremony answers a ceremony's begin call: it keeps the session
// data server-side (see saveCeremony) and sends the options to the page.
func (wb *web) startCeremony(w http.ResponseWriter, r *http.Request, options any, sess *webauthn.SessionData, err error, c *ceremony) {
	if err == nil {
		c.Data = *sess
		err = wb.saveCeremony(w, r, c)
	}
	if err != nil {
		wb.s.log.Error("start passkey ceremony", "kind", c.Kind, "err", err)
		apiError(w, 500, "server_error", "could not start the passkey ceremony; try again")
		return
	}
	writeJSON(w, 200, options)
}

// takeCeremony loads and deletes the ceremony: a second finish with the
// same state (a replay) finds nothing.
func (wb *web) takeCeremony(r *http.Request, kind string) (*ceremony, error) {
	ck, err := r.Cookie(ceremonyCookie(kind))
	if err != nil {
		return nil, errors.New("no passkey ceremony in progress; start again")
	}
	raw, err := wb.s.acct.takeCeremony(r.Context(), ck.Value, kind)
	if err != nil {
		return nil, errors.New("the passkey ceremony expired or was already used; start again")
	}
	var c ceremony
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

func decodeBody(r *http.Request, v any) error {
	return json.NewDecoder(http.MaxBytesReader(nil, r.Body, 64<<10)).Decode(v)
}
