package oauth

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ory/fosite"

	"github.com/syncsubstrate/sync/lobby/roomdir"
)

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
		wb.unknownClient(w, q.Get("client_id"), cerr)
		return
	}
	ru := q.Get("redirect_uri")
	if ru != "" && !redirectAllowed(ru, s.opt.RedirectAllowList) {
		// Checked per request: a metadata document may list a URI this
		// server does not allow beside ones it does. Never redirected to.
		wb.errorPage(w, 400, "Redirect not allowed", "The application asked to send you back to "+ru+
			", which this server does not allow. Connect it again from its own settings; if it is yours, use https://claude.ai/api/mcp/auth_callback, a loopback http://localhost:<port>/… address, or ask the operator to allow it (SYNC_REDIRECT_ALLOW).")
		return
	}
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
	if errors.Is(err, fosite.ErrInvalidState) {
		// fosite's own code (invalid_state) is not one OAuth clients know,
		// so their error page would say nothing useful.
		err = fosite.ErrInvalidRequest.WithHint("The state parameter must be at least 8 characters long: send a longer random value, or none at all (PKCE protects the flow).")
	}
	if err != nil {
		wb.authorizeError(ctx, w, ar, err)
		return
	}
	// PKCE S256 is required; fosite would only notice after consent.
	if q.Get("code_challenge") == "" || q.Get("code_challenge_method") != "S256" {
		wb.authorizeError(ctx, w, ar, fosite.ErrInvalidRequest.WithHint("PKCE is required: send code_challenge with code_challenge_method=S256."))
		return
	}
	if res := q.Get("resource"); res != "" && canonical(res) != s.resource {
		wb.authorizeError(ctx, w, ar, &fosite.RFC6749Error{ErrorField: "invalid_target", CodeField: 400,
			DescriptionField: "The requested resource is not served here.", HintField: "Use resource=" + s.resource + "."})
		return
	}
	user := wb.user(r)
	if user == nil {
		wb.signedOut(w, r)
		return
	}
	rooms, err := s.opt.Rooms.UserRooms(ctx, user.ID)
	if err != nil {
		wb.errorPage(w, 500, "Something went wrong", "Your rooms could not be listed. Try again.")
		return
	}
	redirectHost := redirectHostOf(ar)
	clientKey := client.Name + "|" + redirectHost
	if r.Method == http.MethodGet {
		prev, _ := s.acct.consent(ctx, user.ID, clientKey)
		wb.renderConsent(w, user, client, redirectHost, rooms, strings.Fields(prev), r.URL.RequestURI())
		return
	}
	if r.PostForm.Get("decision") != "allow" {
		wb.authorizeError(ctx, w, ar, fosite.ErrAccessDenied.WithHint("The user denied access."))
		return
	}
	scopes, ok := wb.grantedScopes(w, r, rooms)
	if !ok {
		return
	}
	wb.grant(ctx, w, ar, user, client, clientKey, scopes, injected)
}

// signedOut answers an authorization request from someone signed out: a
// GET goes to the sign-in page and comes back; a consent posted after the
// session ended is refused.
func (wb *web) signedOut(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		wb.errorPage(w, 401, "Signed out", "Your session ended. Go back to the application and connect again.")
		return
	}
	http.Redirect(w, r, "/signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
}

// redirectHostOf is the host of the request's redirect URI ("" when it
// does not parse).
func redirectHostOf(ar fosite.AuthorizeRequester) string {
	if u, err := url.Parse(ar.GetRedirectURI().String()); err == nil {
		return u.Host
	}
	return ""
}

// grantedScopes reads the consent form: the rooms and their levels, room
// creation and the level for rooms shared later. A choice the user may not
// make gets an error page (ok false).
func (wb *web) grantedScopes(w http.ResponseWriter, r *http.Request, rooms []roomdir.Room) (scopes []string, ok bool) {
	byID := map[string]roomdir.Room{}
	for _, rm := range rooms {
		byID[rm.ID] = rm
	}
	for _, id := range r.PostForm["room"] {
		rm, found := byID[id]
		if !found {
			wb.errorPage(w, 403, "Not your room", "You can only grant access to rooms you belong to.")
			return nil, false
		}
		level := r.PostForm.Get("level_" + id)
		if !slices.Contains(roomdir.RoleLevels(rm.Access), level) {
			wb.errorPage(w, 400, "Level not allowed", "Your role in "+id+" does not allow that level of access.")
			return nil, false
		}
		scopes = append(scopes, "rooms:"+id+":"+level)
	}
	if r.PostForm.Get("create_rooms") == "on" {
		scopes = append(scopes, "create_rooms")
	}
	// "New rooms shared with me": none (the default, and what an absent
	// field means) or a level up to write, which the session enforces on
	// every call (lobby.Scope.SharedRooms), capped by the user's role.
	switch shared := r.PostForm.Get("shared_rooms"); {
	case shared == "" || shared == "none":
	case slices.Contains(roomdir.SharedRoomLevels, shared):
		// Stamped with the consent's time (Unix ms): rooms shared after
		// it are the new ones; the page listed the rest.
		scopes = append(scopes, "shared_rooms:"+shared+":"+strconv.FormatInt(time.Now().UnixMilli(), 10))
	default:
		wb.errorPage(w, 400, "Level not allowed", "New rooms shared with you can be allowed at none, observe, read or write.")
		return nil, false
	}
	return scopes, true
}

// grant answers the consent: the scopes and the audience granted, the
// consent remembered for the next time, the code sent to the client.
func (wb *web) grant(ctx context.Context, w http.ResponseWriter, ar fosite.AuthorizeRequester, user *User, client *Client, clientKey string, scopes []string, injected bool) {
	s := wb.s
	for _, sc := range scopes {
		ar.GrantScope(sc)
	}
	ar.GrantAudience(s.resource)
	if err := s.acct.saveConsent(ctx, user.ID, clientKey, strings.Join(scopes, " ")); err != nil {
		s.log.Warn("could not remember the consent", "err", err)
	}
	sess := &Session{Subject: user.ID, Username: user.Username, Extra: map[string]any{"client_name": client.Name}}
	resp, err := s.provider.NewAuthorizeResponse(ctx, ar, sess)
	if err != nil {
		wb.authorizeError(ctx, w, ar, err)
		return
	}
	resp.AddParameter("iss", s.issuer) // RFC 9207
	if injected {
		resp.GetParameters().Del("state")
	}
	s.provider.WriteAuthorizeResponse(ctx, w, ar, resp)
}

type consentRoom struct {
	roomdir.Room
	Levels  []string
	Checked bool
	Level   string
}

func (wb *web) renderConsent(w http.ResponseWriter, user *User, client *Client, redirectHost string, rooms []roomdir.Room, prev []string, action string) {
	var list []consentRoom
	for _, rm := range rooms {
		cr := consentRoom{Room: rm, Levels: roomdir.RoleLevels(rm.Access)}
		cr.Level = "write"
		if !slices.Contains(cr.Levels, "write") {
			cr.Level = "read"
		}
		// A first consent offers the person's default room, and nothing
		// broader: no other room, no new rooms, no rooms shared later.
		cr.Checked = len(prev) == 0 && rm.Default
		for _, p := range prev {
			if strings.HasPrefix(p, "rooms:"+rm.ID+":") {
				cr.Checked = true
				cr.Level = strings.TrimPrefix(p, "rooms:"+rm.ID+":")
			}
		}
		list = append(list, cr)
	}
	shared := "none"
	for _, p := range prev {
		if rest, ok := strings.CutPrefix(p, "shared_rooms:"); ok {
			if lvl, _, _ := strings.Cut(rest, ":"); slices.Contains(roomdir.SharedRoomLevels, lvl) {
				shared = lvl
			}
		}
	}
	wb.render(w, http.StatusOK, "consent", map[string]any{
		"Client": client.Name, "RedirectHost": redirectHost, "User": user.Username, "Rooms": list,
		"CreateRooms": slices.Contains(prev, "create_rooms"), "Action": action,
		"SharedLevels": roomdir.SharedRoomLevels, "Shared": shared,
	})
}

// removeAndAdd is the next step for a client id this server does not
// accept: Claude keeps the client id it first used with a server (a
// dynamic registration or a metadata document) until the server is
// removed and added again, so connecting again alone sends the same id.
const removeAndAdd = "If it is Claude, remove this server in Claude and add it again (Claude.ai: Settings → Connectors; Claude Code: claude mcp remove, then claude mcp add): " +
	"Claude keeps the identity it first used here, so connecting again alone does not help."

// unknownClient answers an authorization request whose client this server
// does not accept: the page says what the person can do, the log which
// setting decides it.
func (wb *web) unknownClient(w http.ResponseWriter, id string, err error) {
	cimd := "on"
	if wb.s.opt.DisableMetadataDocuments {
		cimd = "off"
	}
	var fe *fosite.RFC6749Error
	hint := ""
	if errors.As(err, &fe) {
		hint = fe.HintField
	}
	var msg string
	switch {
	case !isCIMD(id):
		msg = "This server does not know the application that sent you here. " + removeAndAdd
		wb.s.log.Warn("authorization request from a client id this server does not know (a registration from before the database was reset, purged, or never made here)",
			"client_id", id, "SYNC_CIMD", cimd,
			"decided_by", "SYNC_CIMD: how Claude identifies itself when the server is added (on: its metadata document; off: dynamic registration); Claude keeps that id until the person removes the server in Claude and adds it again")
	case hint == errCIMDOff:
		msg = "This server does not accept client metadata documents, which is how the application that sent you here identifies itself. " + removeAndAdd
		wb.s.log.Warn("authorization request with a client metadata document refused: documents are off",
			"client_id", id, "SYNC_CIMD", cimd,
			"decided_by", "SYNC_CIMD=off refuses metadata-document client ids not stored before; set SYNC_CIMD=on, or the person removes the server in Claude and adds it again to register dynamically")
	case strings.HasPrefix(hint, errNotFetched):
		msg = "The application's metadata could not be used: " + hint + ". If it keeps failing, tell the operator of this server."
		wb.s.log.Warn("authorization request refused: the client metadata document could not be fetched",
			"client_id", id, "SYNC_CIMD", cimd,
			"decided_by", "outbound HTTPS to the document's host (SYNC_OUTBOUND_PROXY), or SYNC_CIMD=off to have Claude register dynamically (people who added the server before then remove it in Claude and add it again)")
	default:
		msg = "The application's metadata could not be used: " + hint
		if hint == "" {
			msg = "The application's metadata could not be used."
		}
	}
	wb.errorPage(w, 400, "Unknown application", msg)
}

// authorizeError answers an authorization request with an error: on the
// client's redirect URI when it is valid (fosite decides), with the
// issuer added there, which RFC 9207 requires on error responses too
// (this server advertises authorization_response_iss_parameter_supported).
func (wb *web) authorizeError(ctx context.Context, w http.ResponseWriter, ar fosite.AuthorizeRequester, err error) {
	wb.s.provider.WriteAuthorizeError(ctx, &issWriter{ResponseWriter: w, iss: wb.s.issuer}, ar, err)
}

// issWriter adds iss to the query of an error redirect as it is written.
type issWriter struct {
	http.ResponseWriter
	iss string
}

func (iw *issWriter) WriteHeader(code int) {
	if loc := iw.Header().Get("Location"); loc != "" && code >= 300 && code < 400 {
		if u, err := url.Parse(loc); err == nil && u.Query().Get("error") != "" && !u.Query().Has("iss") {
			q := u.Query()
			q.Set("iss", iw.iss)
			u.RawQuery = q.Encode()
			iw.Header().Set("Location", u.String())
		}
	}
	iw.ResponseWriter.WriteHeader(code)
}
