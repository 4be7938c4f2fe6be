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

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"
	"github.com/jackc/pgx/v5"
	"github.com/ory/fosite"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/substrate/errs"
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
}

// ceremonyCookie names the cookie of a ceremony kind: an autofill sign-in
// waiting in the background and a button sign-in must not share one.
func ceremonyCookie(kind string) string { return "sync_webauthn_" + kind }

func newWeb(s *Server) (*web, error) {
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
	wb := &web{s: s, wa: wa, tmpl: tmpl, secure: u.Scheme == "https", cookie: "sync_session", csrf: http.NewCrossOriginProtection()}
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
	mux.HandleFunc("GET /authorize", wb.authorize)
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
	post("POST /account/recovery", wb.newRecoveryCodes)
	post("POST /account/rooms/{action}", wb.roomAction)
}

// --- rendering and errors ---

func (wb *web) render(w http.ResponseWriter, status int, name string, data map[string]any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; form-action 'self' https: http://localhost:* http://127.0.0.1:* http://[::1]:*")
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
	u, err := sessionUser(r.Context(), wb.s.db, c.Value)
	if err != nil {
		return nil
	}
	return u
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
	id, err := newSession(r.Context(), wb.s.db, userID)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: wb.cookie, Value: id, Path: "/", HttpOnly: true, Secure: wb.secure,
		SameSite: http.SameSiteLaxMode, MaxAge: int(sessionTTL.Seconds())})
	return nil
}

func (wb *web) signout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(wb.cookie); err == nil {
		_, _ = wb.s.db.Exec(r.Context(), `DELETE FROM smcp_sessions WHERE id_hash = $1`, hashSecret(c.Value))
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
	id := randomToken(24)
	raw, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if _, err := wb.s.db.Exec(r.Context(), `INSERT INTO smcp_webauthn_sessions (id_hash, kind, data, expires_at)
		VALUES ($1, $2, $3, now() + interval '5 minutes')`, hashSecret(id), c.Kind, raw); err != nil {
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
	var raw []byte
	err = wb.s.db.QueryRow(r.Context(), `DELETE FROM smcp_webauthn_sessions WHERE id_hash = $1 AND kind = $2 AND expires_at > now() RETURNING data`,
		hashSecret(ck.Value), kind).Scan(&raw)
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

// --- sign-up ---

func (wb *web) signupPage(w http.ResponseWriter, r *http.Request) {
	invite := r.URL.Query().Get("invite")
	if wb.s.opt.Signup == "closed" {
		wb.errorPage(w, http.StatusForbidden, "Sign-up is closed", "This server does not accept new accounts.")
		return
	}
	if wb.s.opt.Signup == "invite" {
		if invite == "" {
			wb.errorPage(w, http.StatusForbidden, "Invitation needed", "New accounts need an invite link from someone who already has an account.")
			return
		}
		if !wb.inviteValid(r.Context(), invite) {
			wb.errorPage(w, http.StatusGone, "This link has expired", "The sign-up link was already used or has expired. Ask for a new one.")
			return
		}
	}
	wb.render(w, http.StatusOK, "signup", map[string]any{"Invite": invite})
}

func (wb *web) inviteValid(ctx context.Context, tok string) bool {
	var ok bool
	_ = wb.s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM smcp_invites WHERE token_hash = $1 AND used_at IS NULL AND expires_at > now())`,
		hashSecret(tok)).Scan(&ok)
	return ok
}

func (wb *web) signupBegin(w http.ResponseWriter, r *http.Request) {
	var body struct{ Username, Invite string }
	if err := decodeBody(r, &body); err != nil {
		apiError(w, 400, "invalid_request", "send {username, invite}")
		return
	}
	username := strings.ToLower(strings.TrimSpace(body.Username))
	if !usernameRE.MatchString(username) {
		apiError(w, 400, "invalid_username", "a username is 3–64 characters: lower-case letters, digits, . _ -, starting and ending with a letter or digit")
		return
	}
	switch wb.s.opt.Signup {
	case "closed":
		apiError(w, 403, "signup_closed", "this server does not accept new accounts")
		return
	case "invite":
		if !wb.inviteValid(r.Context(), body.Invite) {
			apiError(w, 403, "invite_invalid", "the sign-up link was already used or has expired; ask for a new one")
			return
		}
	}
	var taken bool
	_ = wb.s.db.QueryRow(r.Context(), `SELECT EXISTS (SELECT 1 FROM smcp_users WHERE username = $1)`, username).Scan(&taken)
	if taken {
		apiError(w, 409, "username_taken", "that username is taken; choose another")
		return
	}
	u := &User{Username: username, Handle: []byte(randomToken(32))}
	creation, sess, err := wb.wa.BeginRegistration(u,
		webauthn.WithResidentKeyRequirement(protocol.ResidentKeyRequirementRequired),
		webauthn.WithAuthenticatorSelection(protocol.AuthenticatorSelection{ResidentKey: protocol.ResidentKeyRequirementRequired, UserVerification: protocol.VerificationPreferred}))
	wb.startCeremony(w, r, creation, sess, err, &ceremony{Kind: "signup", Username: username, Handle: u.Handle, Invite: body.Invite})
}

func (wb *web) signupFinish(w http.ResponseWriter, r *http.Request) {
	c, err := wb.takeCeremony(r, "signup")
	if err != nil {
		apiError(w, 400, "ceremony_expired", err.Error())
		return
	}
	u := &User{ID: "user_" + randomToken(12), Username: c.Username, Handle: c.Handle}
	cred, err := wb.wa.FinishRegistration(u, c.Data, r)
	if err != nil {
		apiError(w, 400, "passkey_rejected", "the passkey could not be verified: "+protocolMessage(err))
		return
	}
	var codes []string
	err = wb.s.db.InTx(r.Context(), func(ctx context.Context, tx pgx.Tx) error {
		if wb.s.opt.Signup == "invite" {
			tag, err := tx.Exec(ctx, `UPDATE smcp_invites SET used_at = now(), used_by = $2
				WHERE token_hash = $1 AND used_at IS NULL AND expires_at > now()`, hashSecret(c.Invite), u.ID)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return errInviteUsed
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO smcp_users (id, username, webauthn_handle) VALUES ($1, $2, $3)`, u.ID, u.Username, u.Handle); err != nil {
			return err
		}
		if err := insertCredential(ctx, tx, u.ID, cred, "passkey"); err != nil {
			return err
		}
		codes, err = recoveryCodes(ctx, tx, u.ID, 10)
		return err
	})
	switch {
	case errors.Is(err, errInviteUsed):
		apiError(w, 403, "invite_invalid", "the sign-up link was already used; ask for a new one")
		return
	case err != nil:
		apiError(w, 409, "signup_failed", "the account could not be created (is the username taken?); try another username")
		return
	}
	if err := wb.signIn(w, r, u.ID); err != nil {
		apiError(w, 500, "server_error", "account created, but signing in failed; sign in with your passkey")
		return
	}
	writeJSON(w, 200, map[string]any{"ok": true, "username": u.Username, "recovery_codes": codes})
}

var errInviteUsed = errors.New("invite used")

func insertCredential(ctx context.Context, tx pgx.Tx, userID string, cred *webauthn.Credential, name string) error {
	raw, err := json.Marshal(cred)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO smcp_credentials (id, user_id, name, credential) VALUES ($1, $2, $3, $4)`, cred.ID, userID, name, raw)
	return err
}

func protocolMessage(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) && pe.Details != "" {
		return pe.Details
	}
	return err.Error()
}

// --- usernameless sign-in ---

// ceremonyKind is "autofill" for the conditional-mediation endpoints and
// "login" for the button.
func ceremonyKind(r *http.Request) string {
	if strings.HasPrefix(r.URL.Path, "/webauthn/autofill/") {
		return "autofill"
	}
	return "login"
}

func (wb *web) loginBegin(w http.ResponseWriter, r *http.Request) {
	assertion, sess, err := wb.wa.BeginDiscoverableLogin(webauthn.WithUserVerification(protocol.VerificationPreferred))
	wb.startCeremony(w, r, assertion, sess, err, &ceremony{Kind: ceremonyKind(r)})
}

func (wb *web) loginFinish(w http.ResponseWriter, r *http.Request) {
	c, err := wb.takeCeremony(r, ceremonyKind(r))
	if err != nil {
		apiError(w, 400, "ceremony_expired", err.Error())
		return
	}
	var found *User
	_, cred, err := wb.wa.FinishPasskeyLogin(func(_, handle []byte) (webauthn.User, error) {
		u, err := loadUser(r.Context(), wb.s.db, "webauthn_handle = $1", handle)
		found = u
		return u, err
	}, c.Data, r)
	if err != nil || found == nil {
		apiError(w, 401, "passkey_rejected", "that passkey is not recognised here: "+protocolMessage(err))
		return
	}
	raw, _ := json.Marshal(cred)
	_, _ = wb.s.db.Exec(r.Context(), `UPDATE smcp_credentials SET credential = $2, last_used_at = now() WHERE id = $1`, cred.ID, raw)
	if err := wb.signIn(w, r, found.ID); err != nil {
		apiError(w, 500, "server_error", "signing in failed; try again")
		return
	}
	writeJSON(w, 200, map[string]any{"ok": true, "username": found.Username})
}

// --- recovery: a one-time code lets a user add a passkey ---

func (wb *web) recoverBegin(w http.ResponseWriter, r *http.Request) {
	var body struct{ Username, Code string }
	if err := decodeBody(r, &body); err != nil {
		apiError(w, 400, "invalid_request", "send {username, code}")
		return
	}
	u, err := loadUser(r.Context(), wb.s.db, "username = $1", strings.ToLower(strings.TrimSpace(body.Username)))
	if err != nil {
		apiError(w, 401, "recovery_rejected", "that username and recovery code do not match")
		return
	}
	var ok bool
	_ = wb.s.db.QueryRow(r.Context(), `SELECT EXISTS (SELECT 1 FROM smcp_recovery_codes WHERE user_id = $1 AND code_hash = $2 AND used_at IS NULL)`,
		u.ID, hashSecret(strings.TrimSpace(body.Code))).Scan(&ok)
	if !ok {
		apiError(w, 401, "recovery_rejected", "that username and recovery code do not match")
		return
	}
	wb.beginAdd(w, r, u, strings.TrimSpace(body.Code))
}

func (wb *web) addBegin(w http.ResponseWriter, r *http.Request) {
	u := wb.user(r)
	if u == nil {
		apiError(w, 401, "signed_out", "sign in first")
		return
	}
	wb.beginAdd(w, r, u, "")
}

func (wb *web) beginAdd(w http.ResponseWriter, r *http.Request, u *User, code string) {
	creation, sess, err := wb.wa.BeginRegistration(u,
		webauthn.WithResidentKeyRequirement(protocol.ResidentKeyRequirementRequired),
		webauthn.WithExclusions(webauthn.Credentials(u.WebAuthnCredentials()).CredentialDescriptors()))
	wb.startCeremony(w, r, creation, sess, err, &ceremony{Kind: "add", UserID: u.ID, Code: code})
}

func (wb *web) addFinish(w http.ResponseWriter, r *http.Request) {
	c, err := wb.takeCeremony(r, "add")
	if err != nil {
		apiError(w, 400, "ceremony_expired", err.Error())
		return
	}
	u, err := loadUser(r.Context(), wb.s.db, "id = $1", c.UserID)
	if err != nil {
		apiError(w, 400, "ceremony_expired", "start again")
		return
	}
	cred, err := wb.wa.FinishRegistration(u, c.Data, r)
	if err != nil {
		apiError(w, 400, "passkey_rejected", "the passkey could not be verified: "+protocolMessage(err))
		return
	}
	err = wb.s.db.InTx(r.Context(), func(ctx context.Context, tx pgx.Tx) error {
		if c.Code != "" {
			tag, err := tx.Exec(ctx, `UPDATE smcp_recovery_codes SET used_at = now() WHERE user_id = $1 AND code_hash = $2 AND used_at IS NULL`,
				u.ID, hashSecret(c.Code))
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return errInviteUsed
			}
		}
		return insertCredential(ctx, tx, u.ID, cred, "passkey "+time.Now().UTC().Format("2006-01-02"))
	})
	if err != nil {
		apiError(w, 409, "passkey_rejected", "the passkey could not be added (recovery code already used?)")
		return
	}
	if err := wb.signIn(w, r, u.ID); err != nil {
		apiError(w, 500, "server_error", "signing in failed")
		return
	}
	writeJSON(w, 200, map[string]any{"ok": true})
}

// --- consent ---

func (wb *web) authorize(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	s := wb.s
	if err := r.ParseForm(); err != nil {
		wb.errorPage(w, 400, "Bad request", "The authorization request could not be read.")
		return
	}
	q := r.URL.Query()
	client, cerr := s.store.client(ctx, q.Get("client_id"))
	if cerr != nil {
		msg := "The application that sent you here is not registered with this server. Go back and connect it again."
		var fe *fosite.RFC6749Error
		if errors.As(cerr, &fe) && fe.HintField != "" && isCIMD(q.Get("client_id")) {
			msg = "The application's metadata could not be used: " + fe.HintField
		}
		wb.errorPage(w, 400, "Unknown application", msg)
		return
	}
	ru := q.Get("redirect_uri")
	if ru != "" && !slices.Contains(client.RedirectURIs, ru) && loopbackMatches(client.RedirectURIs, ru) {
		ctx = withLoopbackRedirect(ctx, ru)
	}
	// fosite insists on state; OAuth 2.1 with PKCE does not. A client that
	// sends none gets a server nonce that is dropped from the response.
	injected := q.Get("state") == ""
	if injected {
		r.Form.Set("state", "srv-"+randomToken(12))
	}
	ar, err := s.provider.NewAuthorizeRequest(ctx, r)
	if err != nil {
		s.provider.WriteAuthorizeError(ctx, w, ar, err)
		return
	}
	// PKCE S256 is required; fosite would only notice after consent.
	if q.Get("code_challenge") == "" || q.Get("code_challenge_method") != "S256" {
		s.provider.WriteAuthorizeError(ctx, w, ar, fosite.ErrInvalidRequest.WithHint("PKCE is required: send code_challenge with code_challenge_method=S256."))
		return
	}
	if res := q.Get("resource"); res != "" && canonical(res) != s.resource {
		s.provider.WriteAuthorizeError(ctx, w, ar, &fosite.RFC6749Error{ErrorField: "invalid_target", CodeField: 400,
			DescriptionField: "The requested resource is not served here.", HintField: "Use resource=" + s.resource + "."})
		return
	}
	user := wb.user(r)
	if user == nil {
		if r.Method != http.MethodGet {
			wb.errorPage(w, 401, "Signed out", "Your session ended. Go back to the application and connect again.")
			return
		}
		http.Redirect(w, r, "/signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		return
	}
	rooms, err := s.opt.Rooms.UserRooms(ctx, user.ID)
	if err != nil {
		wb.errorPage(w, 500, "Something went wrong", "Your rooms could not be listed. Try again.")
		return
	}
	redirectHost := ""
	if u, err := url.Parse(ar.GetRedirectURI().String()); err == nil {
		redirectHost = u.Host
	}
	clientKey := client.Name + "|" + redirectHost
	if r.Method == http.MethodGet {
		var prev string
		_ = s.db.QueryRow(ctx, `SELECT scope FROM smcp_consents WHERE user_id = $1 AND client_key = $2`, user.ID, clientKey).Scan(&prev)
		wb.renderConsent(w, user, client, redirectHost, rooms, strings.Fields(prev), r.URL.RequestURI())
		return
	}
	if r.PostForm.Get("decision") != "allow" {
		s.provider.WriteAuthorizeError(ctx, w, ar, fosite.ErrAccessDenied.WithHint("The user denied access."))
		return
	}
	var scopes []string
	byID := map[string]lobby.Room{}
	for _, rm := range rooms {
		byID[rm.ID] = rm
	}
	for _, id := range r.PostForm["room"] {
		rm, ok := byID[id]
		if !ok {
			wb.errorPage(w, 403, "Not your room", "You can only grant access to rooms you belong to.")
			return
		}
		level := r.PostForm.Get("level_" + id)
		if !slices.Contains(lobby.RoleLevels(rm.Access), level) {
			wb.errorPage(w, 400, "Level not allowed", "Your role in "+id+" does not allow that level of access.")
			return
		}
		scopes = append(scopes, "rooms:"+id+":"+level)
	}
	if r.PostForm.Get("create_rooms") == "on" {
		scopes = append(scopes, "create_rooms")
	}
	for _, sc := range scopes {
		ar.GrantScope(sc)
	}
	ar.GrantAudience(s.resource)
	_, _ = s.db.Exec(ctx, `INSERT INTO smcp_consents (user_id, client_key, scope) VALUES ($1, $2, $3)
		ON CONFLICT (user_id, client_key) DO UPDATE SET scope = EXCLUDED.scope, updated_at = now()`, user.ID, clientKey, strings.Join(scopes, " "))
	sess := &Session{Subject: user.ID, Username: user.Username, Extra: map[string]any{"client_name": client.Name}}
	resp, err := s.provider.NewAuthorizeResponse(ctx, ar, sess)
	if err != nil {
		s.provider.WriteAuthorizeError(ctx, w, ar, err)
		return
	}
	resp.AddParameter("iss", s.issuer) // RFC 9207
	if injected {
		resp.GetParameters().Del("state")
	}
	s.provider.WriteAuthorizeResponse(ctx, w, ar, resp)
}

type consentRoom struct {
	lobby.Room
	Levels  []string
	Checked bool
	Level   string
}

func (wb *web) renderConsent(w http.ResponseWriter, user *User, client *Client, redirectHost string, rooms []lobby.Room, prev []string, action string) {
	var list []consentRoom
	for _, rm := range rooms {
		cr := consentRoom{Room: rm, Levels: lobby.RoleLevels(rm.Access)}
		cr.Level = "write"
		if !slices.Contains(cr.Levels, "write") {
			cr.Level = "read"
		}
		for _, p := range prev {
			if strings.HasPrefix(p, "rooms:"+rm.ID+":") {
				cr.Checked = true
				cr.Level = strings.TrimPrefix(p, "rooms:"+rm.ID+":")
			}
		}
		list = append(list, cr)
	}
	wb.render(w, http.StatusOK, "consent", map[string]any{
		"Client": client.Name, "RedirectHost": redirectHost, "User": user.Username, "Rooms": list,
		"CreateRooms": len(prev) == 0 || slices.Contains(prev, "create_rooms"), "Action": action,
	})
}

// --- account ---

type grantView struct {
	GrantID, Client, Scope string
	Created                time.Time
}

func (wb *web) account(w http.ResponseWriter, r *http.Request) {
	u := wb.signedIn(w, r)
	if u == nil {
		return
	}
	ctx := r.Context()
	type passkey struct {
		ID       string
		Name     string
		Created  time.Time
		LastUsed *time.Time
	}
	var keys []passkey
	rows, err := wb.s.db.Query(ctx, `SELECT id, name, created_at, last_used_at FROM smcp_credentials WHERE user_id = $1 ORDER BY created_at`, u.ID)
	if err == nil {
		for rows.Next() {
			var k passkey
			var id []byte
			if rows.Scan(&id, &k.Name, &k.Created, &k.LastUsed) == nil {
				k.ID = b64(id)
				keys = append(keys, k)
			}
		}
		rows.Close()
	}
	var grants []grantView
	rows, err = wb.s.db.Query(ctx, `SELECT t.request_id, c.name, t.request->'granted_scope', min(t.created_at)
		FROM smcp_oauth_tokens t JOIN smcp_oauth_clients c ON c.id = t.client_id
		WHERE t.subject = $1 AND t.kind IN ('access', 'refresh') AND t.active AND (t.expires_at IS NULL OR t.expires_at > now())
		GROUP BY t.request_id, c.name, t.request->'granted_scope' ORDER BY 4 DESC`, u.ID)
	if err == nil {
		for rows.Next() {
			var g grantView
			var scope []string
			if rows.Scan(&g.GrantID, &g.Client, &scope, &g.Created) == nil {
				g.Scope = strings.Join(scope, " ")
				grants = append(grants, g)
			}
		}
		rows.Close()
	}
	rooms, _ := wb.s.opt.Rooms.UserRooms(ctx, u.ID)
	wb.render(w, http.StatusOK, "account", map[string]any{"User": u.Username, "Passkeys": keys, "Grants": grants, "Rooms": rooms,
		"Invite": r.URL.Query().Get("invite")})
}

func (wb *web) createInvite(w http.ResponseWriter, r *http.Request) {
	u := wb.signedIn(w, r)
	if u == nil {
		return
	}
	link, err := wb.s.InviteURL(r.Context(), u.ID)
	if err != nil {
		wb.errorPage(w, 500, "Something went wrong", "The invite could not be created. Try again.")
		return
	}
	http.Redirect(w, r, "/account?invite="+url.QueryEscape(link), http.StatusSeeOther)
}

func (wb *web) revokeClient(w http.ResponseWriter, r *http.Request) {
	u := wb.signedIn(w, r)
	if u == nil {
		return
	}
	if err := wb.s.RevokeGrant(r.Context(), u.ID, r.PostFormValue("grant")); err != nil {
		wb.errorPage(w, 404, "Nothing to revoke", "That connection no longer exists.")
		return
	}
	http.Redirect(w, r, "/account", http.StatusSeeOther)
}

func (wb *web) deletePasskey(w http.ResponseWriter, r *http.Request) {
	u := wb.signedIn(w, r)
	if u == nil {
		return
	}
	if len(u.Creds) <= 1 {
		wb.errorPage(w, 409, "That is your last passkey", "Add another passkey before removing this one, or you could not sign in again.")
		return
	}
	id, err := decodeB64(r.PostFormValue("id"))
	if err == nil {
		_, err = wb.s.db.Exec(r.Context(), `DELETE FROM smcp_credentials WHERE id = $1 AND user_id = $2`, id, u.ID)
	}
	if err != nil {
		wb.errorPage(w, 400, "Could not remove the passkey", "Try again from the account page.")
		return
	}
	http.Redirect(w, r, "/account", http.StatusSeeOther)
}

func (wb *web) renamePasskey(w http.ResponseWriter, r *http.Request) {
	u := wb.signedIn(w, r)
	if u == nil {
		return
	}
	name := strings.TrimSpace(r.PostFormValue("name"))
	if name == "" || len(name) > 64 {
		wb.errorPage(w, 400, "Name not accepted", "A passkey name is 1–64 characters.")
		return
	}
	id, err := decodeB64(r.PostFormValue("id"))
	if err == nil {
		_, err = wb.s.db.Exec(r.Context(), `UPDATE smcp_credentials SET name = $3 WHERE id = $1 AND user_id = $2`, id, u.ID, name)
	}
	if err != nil {
		wb.errorPage(w, 400, "Could not rename the passkey", "Try again from the account page.")
		return
	}
	http.Redirect(w, r, "/account", http.StatusSeeOther)
}

// newRecoveryCodes replaces the user's recovery codes and shows the new
// ones once.
func (wb *web) newRecoveryCodes(w http.ResponseWriter, r *http.Request) {
	u := wb.signedIn(w, r)
	if u == nil {
		return
	}
	var codes []string
	err := wb.s.db.InTx(r.Context(), func(ctx context.Context, tx pgx.Tx) error {
		var err error
		codes, err = recoveryCodes(ctx, tx, u.ID, 10)
		return err
	})
	if err != nil {
		wb.errorPage(w, 500, "Something went wrong", "New recovery codes could not be made. Your old ones still work.")
		return
	}
	wb.render(w, http.StatusOK, "codes", map[string]any{"Codes": codes})
}

// roomAction carries out the account page's room forms through the
// RoomDirectory.
func (wb *web) roomAction(w http.ResponseWriter, r *http.Request) {
	u := wb.signedIn(w, r)
	if u == nil {
		return
	}
	ctx, rooms := r.Context(), wb.s.opt.Rooms
	room := strings.TrimSpace(r.PostFormValue("room"))
	var err error
	switch r.PathValue("action") {
	case "create":
		_, err = rooms.CreateRoom(ctx, u.ID, room, strings.TrimSpace(r.PostFormValue("label")))
	case "claim":
		err = rooms.ClaimRoom(ctx, u.ID, room, strings.TrimSpace(r.PostFormValue("token")))
	case "share":
		var other string
		if other, err = wb.s.UserID(ctx, r.PostFormValue("username")); err == nil {
			err = rooms.ShareRoom(ctx, u.ID, room, other, r.PostFormValue("access"))
		}
	case "leave":
		err = rooms.LeaveRoom(ctx, u.ID, room)
	case "delete":
		err = rooms.DeleteRoom(ctx, u.ID, room)
	default:
		wb.errorPage(w, 404, "Unknown action", "That room action does not exist.")
		return
	}
	if err != nil {
		e := errs.From(err)
		msg := e.Message
		if e.Code == errs.Internal {
			wb.s.log.Error("room action failed", "action", r.PathValue("action"), "err", err)
		}
		if e.Hint != "" {
			msg += ". " + e.Hint + "."
		}
		wb.errorPage(w, e.Code.Status(), "That did not work", msg)
		return
	}
	http.Redirect(w, r, "/account", http.StatusSeeOther)
}
