// Package oauth is sync's OAuth 2.1 authorization server (ory/fosite) with
// passkey sign-in (go-webauthn) and the consent screen where a user picks
// the rooms a client may use. It also verifies access tokens for the MCP
// resource server. It knows rooms only through the RoomDirectory it is
// given (the lobby's listing of a user's rooms and its room actions).
package oauth

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ory/fosite"
	"github.com/ory/fosite/compose"

	"github.com/syncsubstrate/sync/lobby/roomdir"
	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate/httpmw"
)

// Session is what a grant carries: the user as Subject.
type Session = fosite.DefaultSession

// Options configure the authorization server.
type Options struct {
	// PublicURL is the issuer and the base of every endpoint (no trailing
	// slash). Required.
	PublicURL string
	// MCPPath is the protected resource's path. Default "/mcp".
	MCPPath string
	// AccessTokenTTL defaults to 12 h: MCP clients refresh unreliably, and
	// opaque tokens are checked against the database on every call, so
	// revocation takes effect at once however long the token would live.
	AccessTokenTTL time.Duration
	// RefreshTokenTTL defaults to 60 days; each refresh issues a new one.
	RefreshTokenTTL time.Duration
	// AuthorizeCodeTTL is how long an authorization code may wait to be
	// exchanged. Default 10 minutes.
	AuthorizeCodeTTL time.Duration
	// RedirectAllowList adds redirect URIs (exact, or a prefix ending in
	// "*") to the built-in policy (Claude's callbacks and loopback).
	RedirectAllowList []string
	// AllowPrivateMetadataFetch lets client metadata documents be fetched
	// from loopback and private addresses, and over http. Tests only: in
	// production it would open the server to SSRF.
	AllowPrivateMetadataFetch bool
	// MetadataFetchRoots, when set, are the certificate authorities trusted
	// when fetching client metadata documents. Tests only (they serve
	// documents from a local TLS server); default: the system's roots.
	MetadataFetchRoots *x509.CertPool
	// DisableMetadataDocuments turns client ID metadata documents off
	// (SYNC_CIMD=off): they are not advertised, so clients register
	// dynamically, and none is fetched (clients already stored keep their
	// stored document). Default: on.
	DisableMetadataDocuments bool
	// MetadataProxy, when set, is the HTTP(S) proxy client metadata
	// documents are fetched through (the operator's egress proxy, trusted
	// as such); the documents' hosts must still resolve to public
	// addresses. Default: direct.
	MetadataProxy *url.URL
	// Signup is "invite" (default), "open" or "closed".
	Signup string
	// Rooms lists a user's rooms for the consent screen.
	Rooms RoomDirectory
	// RatePerSecond limits the unauthenticated endpoints (registration,
	// token, passkey ceremonies) per client IP. Default 10, burst 3×;
	// negative disables.
	RatePerSecond float64
	// HTTP is the middleware shared with the other surfaces: RequireBearer
	// takes each request from the verified grant's rate budget (or the
	// client address's, when the token is not valid). Default: a stack of
	// its own with httpmw's defaults (rate limiting off when RatePerSecond
	// is negative).
	HTTP *httpmw.Stack
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// RoomDirectory is how the authorization server sees rooms: it lists a
// user's rooms and carries out the account page's room actions. Errors it
// returns are shown to the user as they are. *lobby.Lobby implements it.
// Its types are roomdir's, a leaf package: the authorization server does
// not import the lobby (nor, through it, the substrate and cel-go).
type RoomDirectory interface {
	// UserRooms lists the rooms a user belongs to, for the consent screen.
	UserRooms(ctx context.Context, userID string) ([]roomdir.Room, error)
	// CreateRoom makes a room the user owns and returns its id (a random
	// one when roomID is empty).
	CreateRoom(ctx context.Context, userID, roomID, label string) (string, error)
	// ClaimRoom makes the user an owner of a room, proven by its room token;
	// with rotate it also replaces the room token and returns the new one.
	ClaimRoom(ctx context.Context, userID, roomID, roomToken string, rotate bool) (string, error)
	// ShareRoom gives another user (by id) a role in a room the user owns.
	ShareRoom(ctx context.Context, userID, roomID, otherID, access string) error
	// LeaveRoom and DeleteRoom end the user's part in a room.
	LeaveRoom(ctx context.Context, userID, roomID string) error
	DeleteRoom(ctx context.Context, userID, roomID string) error
	// SetDefault makes a room the user's default: the one MCP sessions
	// focus when they have none.
	SetDefault(ctx context.Context, userID, roomID string) error
}

// Server is the authorization server.
type Server struct {
	opt      Options
	db       *store.DB
	store    *storage
	acct     accounts
	provider fosite.OAuth2Provider
	issuer   string
	resource string
	log      *slog.Logger
	web      *web
	limit    *httpmw.Limiter
	http     *httpmw.Stack
}

// New builds the server. The HMAC key for codes and tokens is created on
// first start and kept in the database, shared by every process.
func New(ctx context.Context, db *store.DB, opt Options) (*Server, error) {
	if opt.PublicURL == "" {
		return nil, errors.New("oauth: PublicURL is required")
	}
	opt.PublicURL = strings.TrimRight(opt.PublicURL, "/")
	if opt.MCPPath == "" {
		opt.MCPPath = "/mcp"
	}
	if opt.AccessTokenTTL <= 0 {
		opt.AccessTokenTTL = 12 * time.Hour
	}
	if opt.RefreshTokenTTL <= 0 {
		opt.RefreshTokenTTL = 60 * 24 * time.Hour
	}
	if opt.AuthorizeCodeTTL <= 0 {
		opt.AuthorizeCodeTTL = 10 * time.Minute
	}
	switch opt.Signup {
	case "":
		opt.Signup = "invite"
	case "invite", "open", "closed":
	default:
		return nil, fmt.Errorf("oauth: signup policy %q is not invite, open or closed", opt.Signup)
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	secret, err := serverKey(ctx, db, "oauth_hmac", 32)
	if err != nil {
		return nil, err
	}
	s := &Server{opt: opt, db: db, issuer: opt.PublicURL, resource: opt.PublicURL + opt.MCPPath, log: opt.Logger, acct: accounts{db}}
	if opt.RatePerSecond == 0 {
		opt.RatePerSecond = 10
	}
	if s.http = opt.HTTP; s.http == nil {
		s.http = httpmw.New(httpmw.Options{RatePerSecond: min(opt.RatePerSecond, 0), Logger: opt.Logger})
	}
	if opt.RatePerSecond > 0 {
		s.limit = httpmw.NewLimiter(opt.RatePerSecond, int(3*opt.RatePerSecond), s.http.Options().Peers)
	}
	builtin, err := loadBuiltinDocuments(builtinFS)
	if err != nil {
		return nil, fmt.Errorf("oauth: built-in client metadata document: %w", err)
	}
	s.store = &storage{db: db, audience: s.resource, log: opt.Logger, allow: opt.RedirectAllowList, builtin: builtin,
		noCIMD: opt.DisableMetadataDocuments, cimd: newCIMDFetcher(opt.AllowPrivateMetadataFetch, opt.MetadataFetchRoots, opt.MetadataProxy)}
	cfg := &fosite.Config{
		AccessTokenLifespan:   opt.AccessTokenTTL,
		RefreshTokenLifespan:  opt.RefreshTokenTTL,
		AuthorizeCodeLifespan: opt.AuthorizeCodeTTL,
		GlobalSecret:          secret,
		EnforcePKCE:           true,
		// Claude asks for no offline_access scope and still needs refresh.
		RefreshTokenScopes:  []string{},
		ClientSecretsHasher: sha256Hasher{},
		// Scopes are a ceiling the user sets on the consent screen; what a
		// client asks for is a suggestion, never a reason to fail.
		ScopeStrategy:            func([]string, string) bool { return true },
		AudienceMatchingStrategy: fosite.ExactAudienceMatchingStrategy,
		AccessTokenIssuer:        s.issuer,
		TokenURL:                 s.issuer + "/token",
		RedirectSecureChecker: func(_ context.Context, u *url.URL) bool {
			return u.Scheme == "https" || isLoopbackHost(u.Hostname())
		},
	}
	s.provider = compose.Compose(cfg, s.store, compose.NewOAuth2HMACStrategy(cfg),
		compose.OAuth2AuthorizeExplicitFactory,
		compose.OAuth2RefreshTokenGrantFactory,
		compose.OAuth2PKCEFactory,
		compose.OAuth2TokenIntrospectionFactory,
		compose.OAuth2TokenRevocationFactory,
	)
	if s.web, err = newWeb(s); err != nil {
		return nil, err
	}
	return s, nil
}

// serverKey returns the named key, creating it on first use.

// Issuer is the authorization server's issuer URL.
func (s *Server) Issuer() string { return s.issuer }

// Resource is the MCP resource URL tokens are bound to.
func (s *Server) Resource() string { return s.resource }

// ResourceMetadataURL is where the protected-resource metadata lives.
func (s *Server) ResourceMetadataURL() string {
	return s.issuer + "/.well-known/oauth-protected-resource" + s.opt.MCPPath
}

// Routes registers every endpoint of the authorization server on mux.
func (s *Server) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", s.metadata)
	mux.HandleFunc("GET /.well-known/oauth-protected-resource", s.resourceMetadata)
	mux.HandleFunc("GET /.well-known/oauth-protected-resource"+s.opt.MCPPath, s.resourceMetadata)
	mux.Handle("POST /register", s.limited(http.HandlerFunc(s.register)))
	mux.Handle("POST /token", s.limited(http.HandlerFunc(s.token)))
	mux.Handle("POST /revoke", s.limited(http.HandlerFunc(s.revoke)))
	s.web.routes(mux)
}

// limited applies the per-IP rate limit.
func (s *Server) limited(next http.Handler) http.Handler {
	if s.limit == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if wait, ok := s.limit.Allow(httpmw.AddressKey(httpmw.ClientIP(r))); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
			writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": "rate_limited",
				"error_description": "too many requests from this address; retry after the Retry-After seconds"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) { httpmw.WriteJSON(w, status, v) }

// ScopesSupported are the scope forms the consent screen grants, and
// offline_access: every grant gets a refresh token whether or not it is
// asked for (Claude asks for none), but clients that follow the OpenID
// convention look for it before asking for one.
var ScopesSupported = []string{"rooms:*", "rooms:*:observe", "rooms:*:read", "rooms:*:write", "create_rooms", "offline_access"}

// challengeScope is the scope the 401 challenge names (RFC 6750 §3): what
// a client should ask for to use /mcp. The consent screen decides what is
// granted; asking for it is only the client's suggestion.
const challengeScope = "rooms:* create_rooms offline_access"

func (s *Server) metadata(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Access-Control-Allow-Origin", "*")
	m := map[string]any{
		"issuer":                                         s.issuer,
		"authorization_endpoint":                         s.issuer + "/authorize",
		"token_endpoint":                                 s.issuer + "/token",
		"registration_endpoint":                          s.issuer + "/register",
		"revocation_endpoint":                            s.issuer + "/revoke",
		"response_types_supported":                       []string{"code"},
		"response_modes_supported":                       []string{"query"},
		"grant_types_supported":                          []string{"authorization_code", "refresh_token"},
		"code_challenge_methods_supported":               []string{"S256"},
		"token_endpoint_auth_methods_supported":          []string{"none", "client_secret_post", "client_secret_basic"},
		"revocation_endpoint_auth_methods_supported":     []string{"none", "client_secret_post", "client_secret_basic"},
		"scopes_supported":                               ScopesSupported,
		"authorization_response_iss_parameter_supported": true,
	}
	if !s.opt.DisableMetadataDocuments {
		m["client_id_metadata_document_supported"] = true
	}
	writeJSON(w, http.StatusOK, m)
}

func (s *Server) resourceMetadata(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Access-Control-Allow-Origin", "*")
	writeJSON(w, http.StatusOK, map[string]any{
		"resource":                 s.resource,
		"authorization_servers":    []string{s.issuer},
		"scopes_supported":         ScopesSupported,
		"bearer_methods_supported": []string{"header"},
		"resource_name":            "sync",
	})
}

// --- dynamic client registration (RFC 7591) ---

type registration struct {
	RedirectURIs            []string `json:"redirect_uris"`
	ClientName              string   `json:"client_name"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
	GrantTypes              []string `json:"grant_types"`
	ResponseTypes           []string `json:"response_types"`
	Scope                   string   `json:"scope"`
}

func regError(w http.ResponseWriter, code, desc string) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": code, "error_description": desc})
}

// register is cheap and idempotent in effect: Claude registers on every
// new connection, sometimes twice in a second, and each gets a client.
func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Access-Control-Allow-Origin", "*")
	var reg registration
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	if err := dec.Decode(&reg); err != nil {
		regError(w, "invalid_client_metadata", "the body must be a JSON client metadata document: "+err.Error())
		return
	}
	if len(reg.RedirectURIs) == 0 || len(reg.RedirectURIs) > 10 {
		regError(w, "invalid_redirect_uri", "give 1–10 redirect_uris")
		return
	}
	for _, u := range reg.RedirectURIs {
		if !redirectAllowed(u, s.opt.RedirectAllowList) {
			regError(w, "invalid_redirect_uri", fmt.Sprintf("redirect URI %q is not allowed: use https://claude.ai/api/mcp/auth_callback, a loopback http://localhost:<port>/… URI, or one the operator allowed", u))
			return
		}
	}
	if reg.TokenEndpointAuthMethod == "" {
		reg.TokenEndpointAuthMethod = "client_secret_basic" // RFC 7591 §2
	}
	switch reg.TokenEndpointAuthMethod {
	case "none", "client_secret_post", "client_secret_basic":
	default:
		regError(w, "invalid_client_metadata", "token_endpoint_auth_method must be none, client_secret_post or client_secret_basic")
		return
	}
	for _, g := range reg.GrantTypes {
		if g != "authorization_code" && g != "refresh_token" {
			regError(w, "invalid_client_metadata", fmt.Sprintf("grant type %q is not supported: use authorization_code and refresh_token", g))
			return
		}
	}
	for _, t := range reg.ResponseTypes {
		if t != "code" {
			regError(w, "invalid_client_metadata", "response type must be code")
			return
		}
	}
	name := strings.TrimSpace(reg.ClientName)
	if name == "" {
		name = "unnamed client"
	}
	if len(name) > 200 {
		name = name[:200]
	}
	id := "client_" + randomToken(16)
	var secret string
	var secretHash []byte
	if reg.TokenEndpointAuthMethod != "none" {
		secret = "secret_" + randomToken(32)
		secretHash, _ = sha256Hasher{}.Hash(r.Context(), []byte(secret))
	}
	if err := s.store.registerClient(r.Context(), id, secretHash, name, reg); err != nil {
		s.log.Error("client registration failed", "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "server_error", "error_description": "registration failed; retry"})
		return
	}
	out := map[string]any{
		"client_id":                  id,
		"client_id_issued_at":        time.Now().Unix(),
		"client_name":                name,
		"redirect_uris":              reg.RedirectURIs,
		"token_endpoint_auth_method": reg.TokenEndpointAuthMethod,
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
	}
	if secret != "" {
		out["client_secret"] = secret
		out["client_secret_expires_at"] = 0
	}
	writeJSON(w, http.StatusCreated, out)
}

func randomToken(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// --- token and revocation ---

func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	ctx := withGrantEnd(r.Context(), endNotYet)
	w.Header().Set("Access-Control-Allow-Origin", "*")
	ar, err := s.provider.NewAccessRequest(ctx, r, new(Session))
	if err != nil {
		s.provider.WriteAccessError(ctx, w, ar, s.endedRefresh(ctx, r, err))
		return
	}
	// RFC 8707: every grant here is bound to the one MCP resource; a token
	// request naming another is refused before anything is issued.
	if res := ar.GetRequestForm().Get("resource"); res != "" && canonical(res) != s.resource {
		s.provider.WriteAccessError(ctx, w, ar, &fosite.RFC6749Error{ErrorField: "invalid_target", CodeField: 400,
			DescriptionField: "The requested resource is not served here.", HintField: "Tokens here are for " + s.resource + "."})
		return
	}
	resp, err := s.provider.NewAccessResponse(ctx, ar)
	if err != nil {
		s.provider.WriteAccessError(ctx, w, ar, err)
		return
	}
	if err := s.store.clientUsed(ctx, ar.GetClient().GetID()); err != nil {
		s.log.Warn("could not note a client's use", "err", err)
	}
	s.provider.WriteAccessResponse(ctx, w, ar, resp)
}

func (s *Server) revoke(w http.ResponseWriter, r *http.Request) {
	ctx := withGrantEnd(r.Context(), endByClient)
	w.Header().Set("Access-Control-Allow-Origin", "*")
	err := s.provider.NewRevocationRequest(ctx, r)
	s.provider.WriteRevocationResponse(ctx, w, err)
}

// canonical trims a trailing slash, so "https://x/mcp/" names the same
// resource as "https://x/mcp".
func canonical(resource string) string { return strings.TrimRight(resource, "/") }

// --- token verification for the resource server ---

// TokenInfo is what a verified access token grants.
type TokenInfo struct {
	UserID     string
	Username   string
	ClientID   string
	ClientName string
	// GrantID identifies the grant; it stays the same across refreshes.
	GrantID string
	Scopes  []string
	Expiry  time.Time
}

// Verification errors.
var (
	ErrNoToken       = errors.New("no bearer token")
	ErrInvalidToken  = errors.New("the access token is invalid, expired or revoked")
	ErrWrongAudience = errors.New("the access token was issued for another resource")
)

// Verify checks a bearer access token for the MCP resource.
func (s *Server) Verify(ctx context.Context, token string) (*TokenInfo, error) {
	if token == "" {
		return nil, ErrNoToken
	}
	sess := new(Session)
	// The token use passed in is only a hint: fosite introspects refresh
	// tokens too and says which it found. Only access tokens authenticate.
	use, ar, err := s.provider.IntrospectToken(ctx, token, fosite.AccessToken, sess)
	if err != nil || use != fosite.AccessToken {
		// A token its grant's end made invalid says what ended it.
		if reason, ended := s.store.endOf(ctx, "access", token); ended {
			return nil, &GrantEndedError{reason}
		}
		return nil, ErrInvalidToken
	}
	if !ar.GetGrantedAudience().Has(s.resource) {
		return nil, ErrWrongAudience
	}
	name, _ := sess.Extra["client_name"].(string)
	return &TokenInfo{UserID: sess.Subject, Username: sess.Username, ClientID: ar.GetClient().GetID(), ClientName: name, GrantID: ar.GetID(),
		Scopes: ar.GetGrantedScopes(), Expiry: sess.GetExpiresAt(fosite.AccessToken)}, nil
}

type tokenInfoKey struct{}

// TokenInfoFrom returns the verified token of a request that passed
// RequireBearer.
func TokenInfoFrom(ctx context.Context) *TokenInfo {
	ti, _ := ctx.Value(tokenInfoKey{}).(*TokenInfo)
	return ti
}

// RequireBearer protects a handler: without a valid token for this
// resource it answers 401 with the challenge MCP clients follow to sign in;
// without the needed scope, 403 insufficient_scope.
func (s *Server) RequireBearer(scope string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ti, err := s.Verify(r.Context(), httpmw.Bearer(r))
		if err != nil {
			if !s.http.Limit(w, r, "") {
				return
			}
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="invalid_token", error_description=%q, scope=%q, resource_metadata=%q`,
				err.Error(), challengeScope, s.ResourceMetadataURL()))
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_token", "error_description": err.Error()})
			return
		}
		if scope != "" && !hasScope(ti.Scopes, scope) {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="insufficient_scope", scope=%q, resource_metadata=%q`,
				scope, s.ResourceMetadataURL()))
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "insufficient_scope", "error_description": "this needs scope " + scope})
			return
		}
		if !s.http.Limit(w, r, "grant:"+ti.GrantID) {
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenInfoKey{}, ti)))
	})
}

func hasScope(scopes []string, want string) bool {
	for _, s := range scopes {
		if s == want {
			return true
		}
	}
	return false
}

// Purge deletes what can no longer be used: tokens, codes and PKCE
// sessions expired more than a day ago, and registered clients unused for
// 30 days that hold no live token. It returns how many of each went.
func (s *Server) Purge(ctx context.Context) (tokens, clients int64, err error) {
	return s.store.purge(ctx)
}

// endedRefresh is a refresh refused because its grant ended (this very
// request's reuse, or an end before it) worded as what ended it and how
// to reconnect; any other refusal is err.
func (s *Server) endedRefresh(ctx context.Context, r *http.Request, err error) error {
	if r.PostFormValue("grant_type") != "refresh_token" {
		return err
	}
	reason, ended := endNotYet, false
	if e, ok := ctx.Value(endKey{}).(*grantEnd); ok && e.reason != endNotYet {
		reason, ended = e.reason, true
	} else {
		reason, ended = s.store.endOf(ctx, "refresh", r.PostFormValue("refresh_token"))
	}
	if !ended {
		return err
	}
	return &fosite.RFC6749Error{ErrorField: "invalid_grant", CodeField: http.StatusBadRequest, DescriptionField: reason.forClient()}
}

// LiveGrants reports which of ids still have a usable access or refresh
// token (lobby.GrantChecker: MCP sessions end with their grant).
func (s *Server) LiveGrants(ctx context.Context, ids []string) (map[string]bool, error) {
	return s.store.liveGrants(ctx, ids)
}

// RevokeGrant revokes every token of a grant (the account page's revoke).
func (s *Server) RevokeGrant(ctx context.Context, userID, grantID string) error {
	return s.store.revokeGrant(ctx, userID, grantID)
}

func decodeB64(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }
