package oauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/ory/fosite"

	"github.com/syncsubstrate/sync/store"
)

// storage implements fosite's storage interfaces on PostgreSQL: clients,
// authorization codes, access and refresh tokens, PKCE sessions and
// revocation, with fosite's optional transactions.
type storage struct {
	db       *store.DB
	clients  clientCache
	cimd     *cimdFetcher
	allow    []string // the operator's redirect allow-list
	audience string   // the MCP resource every client may be granted
	noCIMD   bool     // client metadata documents turned off: none is fetched
	// builtin are the last-known-good copies of Claude's documents, by
	// exact client id, used when their fetch fails (cimdClient).
	builtin map[string]*registration
	log     *slog.Logger
}

type txKey struct{}

// refreshLinkKey carries, through one fosite refresh transaction, the
// hashed signature of the refresh token being rotated, so that the new
// refresh token records it as its parent.
type refreshLinkKey struct{}

type refreshLink struct{ parent string }

// endOf reports why the grant of a token (kind access or refresh) ended;
// false when it did not, or the token is unknown.
func (s *storage) endOf(ctx context.Context, kind, token string) (endReason, bool) {
	sig := token[strings.LastIndexByte(token, '.')+1:]
	var text string
	err := s.db.QueryRow(ctx, `SELECT e.reason FROM smcp_oauth_tokens t JOIN smcp_oauth_grant_ends e ON e.request_id = t.request_id
		WHERE t.kind = $1 AND t.signature = $2`, kind, hashSig(sig)).Scan(&text)
	if err != nil {
		return 0, false
	}
	return reasonOf(text), true
}

// querier is the pool, or the transaction carried in ctx.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (s *storage) q(ctx context.Context) querier {
	if tx, ok := ctx.Value(txKey{}).(pgx.Tx); ok {
		return tx
	}
	return s.db
}

// BeginTX, Commit and Rollback implement storage.Transactional: fosite runs
// a refresh (rotate, create access, create refresh) as one transaction.
func (s *storage) BeginTX(ctx context.Context) (context.Context, error) {
	ctx, tx, err := s.db.Begin(ctx)
	if err != nil {
		return ctx, err
	}
	return context.WithValue(context.WithValue(ctx, txKey{}, tx), refreshLinkKey{}, &refreshLink{}), nil
}

func (s *storage) Commit(ctx context.Context) error {
	if tx, ok := ctx.Value(txKey{}).(pgx.Tx); ok {
		return tx.Commit(ctx)
	}
	return nil
}

func (s *storage) Rollback(ctx context.Context) error {
	if tx, ok := ctx.Value(txKey{}).(pgx.Tx); ok {
		return tx.Rollback(ctx)
	}
	return nil
}

// --- clients ---

type loopbackKey struct{}

// withLoopbackRedirect lets GetClient accept one loopback redirect URI whose
// port differs from the registered one (RFC 8252 §7.3), after the
// authorize handler has checked it; fosite itself does so only for IP
// literals, not for "localhost".
func withLoopbackRedirect(ctx context.Context, uri string) context.Context {
	return context.WithValue(ctx, loopbackKey{}, uri)
}

// Client is a registered OAuth client.
type Client struct {
	ID           string
	Name         string
	RedirectURIs []string
	AuthMethod   string // none, client_secret_post or client_secret_basic
	SecretHash   []byte
	CreatedAt    time.Time
}

func (s *storage) getClient(ctx context.Context, id string) (*Client, error) {
	c := &Client{ID: id}
	err := s.q(ctx).QueryRow(ctx, `SELECT name, redirect_uris, auth_method, secret_hash, created_at FROM smcp_oauth_clients WHERE id = $1`, id).
		Scan(&c.Name, &c.RedirectURIs, &c.AuthMethod, &c.SecretHash, &c.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fosite.ErrNotFound
	}
	return c, err
}

func (s *storage) GetClient(ctx context.Context, id string) (fosite.Client, error) {
	c, err := s.client(ctx, id)
	if err != nil {
		if errors.Is(err, fosite.ErrNotFound) {
			// Claude re-registers on invalid_client (401).
			return nil, fosite.ErrInvalidClient.WithHint("The client is not registered here; register again.")
		}
		return nil, err // already invalid_client for a bad metadata document
	}
	return s.fositeClient(ctx, c), nil
}

// client returns a registered or metadata-document client. Clients never
// change once registered, so they are kept in memory for a while: every
// token verification looks its client up.
func (s *storage) client(ctx context.Context, id string) (*Client, error) {
	if c := s.clients.get(id); c != nil {
		return c, nil
	}
	var c *Client
	var err error
	if isCIMD(id) {
		c, err = s.cimdClient(ctx, id)
	} else {
		c, err = s.getClient(ctx, id)
	}
	if err == nil {
		s.clients.put(id, c)
	}
	return c, err
}

// clientCache keeps recently used clients for a minute (metadata-document
// clients are re-checked against their own max-age in the database after
// that).
type clientCache struct {
	mu sync.Mutex
	m  map[string]cachedClient
}

type cachedClient struct {
	c  *Client
	at time.Time
}

const clientCacheTTL = time.Minute

func (cc *clientCache) get(id string) *Client {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if e, ok := cc.m[id]; ok && time.Since(e.at) < clientCacheTTL {
		return e.c
	}
	return nil
}

func (cc *clientCache) put(id string, c *Client) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.m == nil || len(cc.m) > 10_000 {
		cc.m = map[string]cachedClient{} // Claude registers often; start over rather than grow
	}
	cc.m[id] = cachedClient{c: c, at: time.Now()}
}

func (s *storage) fositeClient(ctx context.Context, c *Client) fosite.Client {
	uris := append([]string{}, c.RedirectURIs...)
	if extra, ok := ctx.Value(loopbackKey{}).(string); ok && loopbackMatches(c.RedirectURIs, extra) {
		uris = append(uris, extra)
	}
	dc := &fosite.DefaultClient{
		ID:            c.ID,
		Secret:        c.SecretHash,
		RedirectURIs:  uris,
		GrantTypes:    []string{"authorization_code", "refresh_token"},
		ResponseTypes: []string{"code"},
		Audience:      []string{s.audience},
		Public:        c.AuthMethod == "none",
	}
	return &fosite.DefaultOpenIDConnectClient{DefaultClient: dc, TokenEndpointAuthMethod: c.AuthMethod}
}

// Client assertions (private_key_jwt) are not offered; fosite asks anyway.
func (s *storage) ClientAssertionJWTValid(context.Context, string) error { return nil }
func (s *storage) SetClientAssertionJWT(context.Context, string, time.Time) error {
	return nil
}

// --- requests (codes, tokens, PKCE) ---

type storedRequest struct {
	ID                string          `json:"id"`
	RequestedAt       time.Time       `json:"requested_at"`
	ClientID          string          `json:"client_id"`
	RequestedScope    []string        `json:"requested_scope"`
	GrantedScope      []string        `json:"granted_scope"`
	RequestedAudience []string        `json:"requested_audience"`
	GrantedAudience   []string        `json:"granted_audience"`
	Form              url.Values      `json:"form"`
	Session           json.RawMessage `json:"session"`
}

func (s *storage) create(ctx context.Context, kind, sig string, req fosite.Requester) error {
	var parent *string
	if l, ok := ctx.Value(refreshLinkKey{}).(*refreshLink); ok && kind == "refresh" && l.parent != "" {
		parent = &l.parent
	}
	sess, err := json.Marshal(req.GetSession())
	if err != nil {
		return err
	}
	sr := storedRequest{ID: req.GetID(), RequestedAt: req.GetRequestedAt(), ClientID: req.GetClient().GetID(),
		RequestedScope: req.GetRequestedScopes(), GrantedScope: req.GetGrantedScopes(),
		RequestedAudience: req.GetRequestedAudience(), GrantedAudience: req.GetGrantedAudience(),
		Form: req.GetRequestForm(), Session: sess}
	raw, err := json.Marshal(sr)
	if err != nil {
		return err
	}
	var subject *string
	var expires *time.Time
	if ds, ok := req.GetSession().(*Session); ok {
		if ds.Subject != "" {
			subject = &ds.Subject
		}
		tt := map[string]fosite.TokenType{"code": fosite.AuthorizeCode, "access": fosite.AccessToken, "refresh": fosite.RefreshToken, "pkce": fosite.AuthorizeCode}[kind]
		if t := ds.GetExpiresAt(tt); !t.IsZero() {
			expires = &t
		}
	}
	_, err = s.q(ctx).Exec(ctx, `INSERT INTO smcp_oauth_tokens (signature, kind, request_id, client_id, subject, request, expires_at, parent)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, hashSig(sig), kind, req.GetID(), req.GetClient().GetID(), subject, raw, expires, parent)
	return err
}

// hashSig stores signatures hashed once more: the HMAC signature does not
// reveal the token, and a hash of it keeps even that out of the database.
func hashSig(sig string) string {
	h := sha256.Sum256([]byte(sig))
	return string(b64(h[:]))
}

// tokenState is what get reads besides the request: inactive is a used
// code, a rotated or revoked token; a rotated refresh token has rotatedAt,
// and successorUsed once a token issued for it has been used in turn.
type tokenState struct {
	active        bool
	rotatedAt     *time.Time
	successorUsed bool
}

// get loads a stored request into a requester whose session is session.
func (s *storage) get(ctx context.Context, kind, sig string, session fosite.Session) (req *fosite.Request, st tokenState, err error) {
	var raw []byte
	err = s.q(ctx).QueryRow(ctx, `SELECT request, active, rotated_at, successor_used FROM smcp_oauth_tokens WHERE kind = $1 AND signature = $2`,
		kind, hashSig(sig)).Scan(&raw, &st.active, &st.rotatedAt, &st.successorUsed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, st, fosite.ErrNotFound
	}
	if err != nil {
		return nil, st, err
	}
	var sr storedRequest
	if err := json.Unmarshal(raw, &sr); err != nil {
		return nil, st, err
	}
	client, err := s.GetClient(ctx, sr.ClientID)
	if err != nil {
		return nil, st, err
	}
	if session != nil {
		if err := json.Unmarshal(sr.Session, session); err != nil {
			return nil, st, err
		}
	}
	req = &fosite.Request{ID: sr.ID, RequestedAt: sr.RequestedAt, Client: client,
		RequestedScope: sr.RequestedScope, GrantedScope: sr.GrantedScope,
		RequestedAudience: sr.RequestedAudience, GrantedAudience: sr.GrantedAudience,
		Form: sr.Form, Session: session}
	return req, st, nil
}

func (s *storage) remove(ctx context.Context, kind, sig string) error {
	_, err := s.q(ctx).Exec(ctx, `DELETE FROM smcp_oauth_tokens WHERE kind = $1 AND signature = $2`, kind, hashSig(sig))
	return err
}

func (s *storage) CreateAuthorizeCodeSession(ctx context.Context, code string, req fosite.Requester) error {
	return s.create(ctx, "code", code, req)
}

func (s *storage) GetAuthorizeCodeSession(ctx context.Context, code string, session fosite.Session) (fosite.Requester, error) {
	req, st, err := s.get(ctx, "code", code, session)
	if err != nil {
		return nil, err
	}
	if !st.active {
		// fosite then revokes every token this code issued.
		noteEnd(ctx, endCodeReplay)
		return req, fosite.ErrInvalidatedAuthorizeCode
	}
	return req, nil
}

func (s *storage) InvalidateAuthorizeCodeSession(ctx context.Context, code string) error {
	_, err := s.q(ctx).Exec(ctx, `UPDATE smcp_oauth_tokens SET active = false WHERE kind = 'code' AND signature = $1`, hashSig(code))
	return err
}

func (s *storage) CreateAccessTokenSession(ctx context.Context, sig string, req fosite.Requester) error {
	return s.create(ctx, "access", sig, req)
}

func (s *storage) GetAccessTokenSession(ctx context.Context, sig string, session fosite.Session) (fosite.Requester, error) {
	req, st, err := s.get(ctx, "access", sig, session)
	if err != nil {
		return nil, err
	}
	if !st.active {
		return req, fosite.ErrInactiveToken
	}
	return req, nil
}

func (s *storage) DeleteAccessTokenSession(ctx context.Context, sig string) error {
	return s.remove(ctx, "access", sig)
}

// CreateRefreshTokenSession stores a refresh token and notes it as the
// parent of the access token issued with it (for an access token, parent
// is that refresh token), so that retiring a refresh token that was never
// used can retire its access token too.
func (s *storage) CreateRefreshTokenSession(ctx context.Context, sig, accessSig string, req fosite.Requester) error {
	if err := s.create(ctx, "refresh", sig, req); err != nil {
		return err
	}
	if accessSig == "" {
		return nil
	}
	_, err := s.q(ctx).Exec(ctx, `UPDATE smcp_oauth_tokens SET parent = $1 WHERE kind = 'access' AND signature = $2`, hashSig(sig), hashSig(accessSig))
	return err
}

// GetRefreshTokenSession keeps a rotated refresh token valid until one of
// its successors has been used: a client whose refresh response was lost,
// or two racing refreshes (Claude's backend and its proxy; Claude Code's
// processes), present the previous token again and must not lose the
// connection. Once a successor has been used, the client demonstrably has
// the new token, so presenting the old one means a copy is in other hands:
// fosite then revokes the whole grant.
func (s *storage) GetRefreshTokenSession(ctx context.Context, sig string, session fosite.Session) (fosite.Requester, error) {
	req, st, err := s.get(ctx, "refresh", sig, session)
	if err != nil {
		return nil, err
	}
	if !st.active {
		if st.rotatedAt != nil && !st.successorUsed || revoking(ctx) {
			// At /revoke any token of the grant asks for its end (RFC
			// 7009): an older one is no reason to leave the grant working.
			return req, nil
		}
		switch {
		case st.rotatedAt != nil:
			noteEnd(ctx, endReuse)
			s.log.Warn("a refresh token was reused after its successor had been used; revoking the grant", "grant", req.GetID(), "client", req.GetClient().GetID())
		case st.successorUsed:
			noteEnd(ctx, endReuse)
			s.log.Warn("a refresh token was used after another successor of the same token had been used; revoking the grant", "grant", req.GetID(), "client", req.GetClient().GetID())
		default:
			// The grant ended before: its refusal says why (fosite
			// deletes this token before the refusal is written).
			var text string
			if s.q(ctx).QueryRow(ctx, `SELECT reason FROM smcp_oauth_grant_ends WHERE request_id = $1`, req.GetID()).Scan(&text) == nil {
				noteEnd(ctx, reasonOf(text))
			}
		}
		return req, fosite.ErrInactiveToken
	}
	return req, nil
}

// DeleteRefreshTokenSession removes a reused refresh token (fosite, before
// revoking its grant), under the grant's lock like every other change to
// a grant's refresh tokens.
func (s *storage) DeleteRefreshTokenSession(ctx context.Context, sig string) error {
	var grant string
	err := s.q(ctx).QueryRow(ctx, `SELECT request_id FROM smcp_oauth_tokens WHERE kind = 'refresh' AND signature = $1`, hashSig(sig)).Scan(&grant)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := s.lockGrant(ctx, grant); err != nil {
		return err
	}
	return s.remove(ctx, "refresh", sig)
}

// grantLockClass is the first key of the transaction advisory locks that
// serialise changes to one grant's refresh tokens (the two-key form, apart
// from store's migration lock).
const grantLockClass = 0x0a17

// lockGrant takes a grant's lock for the rest of the transaction. Every
// change to a grant's refresh tokens (rotation, reuse, revocation) takes
// it first and only it, so they never wait on each other's row locks in
// opposite orders, and each sees the others' committed outcome: a check
// made before fosite's transaction (GetRefreshTokenSession) is made again
// under it.
func (s *storage) lockGrant(ctx context.Context, grant string) error {
	_, err := s.q(ctx).Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, grantLockClass, grant)
	return err
}

// RotateRefreshToken retires the presented refresh token (it stays usable
// until a successor is used) and, since presenting it proves the client
// holds it, ends the grace of its own parent and retires the parent's
// other successors: of the tokens minted from one token (racing refreshes,
// a lost response, or a copy in other hands), the first one used carries
// the grant on, and using another afterwards is reuse. Without that, a
// copy of a token presented before its owner's next refresh would carry a
// second branch of the grant for as long as the grant lives.
//
// fosite checked the token before this transaction; under the grant's
// lock the check is made again, so a replay racing its successor's first
// use cannot slip between them (it is refused, and its retry revokes).
func (s *storage) RotateRefreshToken(ctx context.Context, _ string, sig string) error {
	h := hashSig(sig)
	var grant string
	var parent *string
	err := s.q(ctx).QueryRow(ctx, `SELECT request_id, parent FROM smcp_oauth_tokens WHERE kind = 'refresh' AND signature = $1`, h).Scan(&grant, &parent)
	if errors.Is(err, pgx.ErrNoRows) {
		return fosite.ErrNotFound
	}
	if err != nil {
		return err
	}
	if err := s.lockGrant(ctx, grant); err != nil {
		return err
	}
	// rotated_at keeps its first value. It is dated by a statement of its
	// own, not coalesce(rotated_at, now()), which Citus refuses (and an
	// array in its place crashed Citus 13.2's coordinator); a row without
	// it can only have matched below by being active.
	if _, err := s.q(ctx).Exec(ctx, `UPDATE smcp_oauth_tokens SET rotated_at = now()
		WHERE kind = 'refresh' AND signature = $1 AND active AND rotated_at IS NULL`, h); err != nil {
		return err
	}
	tag, err := s.q(ctx).Exec(ctx, `UPDATE smcp_oauth_tokens SET active = false
		WHERE kind = 'refresh' AND signature = $1 AND (active OR (rotated_at IS NOT NULL AND NOT successor_used))`, h)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fosite.ErrInactiveToken
	}
	if parent != nil {
		if _, err := s.q(ctx).Exec(ctx, `UPDATE smcp_oauth_tokens SET successor_used = true
			WHERE kind = 'refresh' AND signature = $1 AND NOT successor_used`, *parent); err != nil {
			return err
		}
		// The parent's other successors, never used: retired with the
		// access tokens issued with them (a copy's holder keeps nothing),
		// and marked (successor_used on a token never rotated) so that
		// presenting one is recognised as reuse. One statement: the
		// access tokens are other rows than the successors it retires.
		if _, err := s.q(ctx).Exec(ctx, `WITH siblings AS (UPDATE smcp_oauth_tokens SET active = false, successor_used = true
				WHERE request_id = $1 AND kind = 'refresh' AND parent = $2 AND signature <> $3 AND active RETURNING signature)
			UPDATE smcp_oauth_tokens SET active = false WHERE request_id = $1 AND kind = 'access' AND parent IN (SELECT signature FROM siblings)`,
			grant, *parent, h); err != nil {
			return err
		}
	}
	if l, ok := ctx.Value(refreshLinkKey{}).(*refreshLink); ok {
		l.parent = h
	}
	return nil
}

// RevokeRefreshToken ends a grant's refresh tokens (fosite calls it on
// refresh-token reuse, a replayed code and RFC 7009 revocation) and
// records why, for the account page.
func (s *storage) RevokeRefreshToken(ctx context.Context, requestID string) error {
	return s.inTx(ctx, func(ctx context.Context) error {
		// Under the grant's lock for the whole revocation: a rotation
		// committing while the update waited would otherwise leave its new
		// refresh token outside the update's snapshot, alive.
		if err := s.lockGrant(ctx, requestID); err != nil {
			return err
		}
		if _, err := s.q(ctx).Exec(ctx, `UPDATE smcp_oauth_tokens SET active = false, rotated_at = NULL WHERE kind = 'refresh' AND request_id = $1`, requestID); err != nil {
			return err
		}
		reason := endUnspecified
		if e, ok := ctx.Value(endKey{}).(*grantEnd); ok && e.reason != endNotYet {
			reason = e.reason
		}
		return s.recordEnd(ctx, requestID, reason)
	})
}

// inTx runs fn in the transaction ctx carries, or else in a new one (fosite
// calls some storage methods, /revoke's among them, outside any).
func (s *storage) inTx(ctx context.Context, fn func(ctx context.Context) error) error {
	if _, ok := ctx.Value(txKey{}).(pgx.Tx); ok {
		return fn(ctx)
	}
	return s.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return fn(context.WithValue(ctx, txKey{}, tx))
	})
}

// recordEnd notes why a grant ended; the first reason stays.
func (s *storage) recordEnd(ctx context.Context, requestID string, reason endReason) error {
	_, err := s.q(ctx).Exec(ctx, `INSERT INTO smcp_oauth_grant_ends (request_id, subject, client_name, reason)
		SELECT t.request_id, t.subject, coalesce(c.name, t.client_id), $2 FROM smcp_oauth_tokens t
		LEFT JOIN smcp_oauth_clients c ON c.id = t.client_id
		WHERE t.request_id = $1 AND t.subject IS NOT NULL LIMIT 1
		ON CONFLICT (request_id) DO NOTHING`, requestID, reason.text())
	return err
}

func (s *storage) RevokeAccessToken(ctx context.Context, requestID string) error {
	_, err := s.q(ctx).Exec(ctx, `UPDATE smcp_oauth_tokens SET active = false WHERE kind = 'access' AND request_id = $1`, requestID)
	return err
}

func (s *storage) CreatePKCERequestSession(ctx context.Context, sig string, req fosite.Requester) error {
	return s.create(ctx, "pkce", sig, req)
}

func (s *storage) GetPKCERequestSession(ctx context.Context, sig string, session fosite.Session) (fosite.Requester, error) {
	req, _, err := s.get(ctx, "pkce", sig, session)
	return req, err
}

func (s *storage) DeletePKCERequestSession(ctx context.Context, sig string) error {
	return s.remove(ctx, "pkce", sig)
}

// sha256Hasher hashes client secrets with SHA-256: they are 256 random
// bits, so a slow hash protects nothing and would make every token request
// (and Claude's frequent registrations) slow.
type sha256Hasher struct{}

func (sha256Hasher) Hash(_ context.Context, data []byte) ([]byte, error) {
	h := sha256.Sum256(data)
	return h[:], nil
}

func (sha256Hasher) Compare(_ context.Context, hash, data []byte) error {
	h := sha256.Sum256(data)
	if subtle.ConstantTimeCompare(hash, h[:]) != 1 {
		return fosite.ErrInvalidClient
	}
	return nil
}

// --- what the server asks of the OAuth tables beyond fosite's interfaces ---

func serverKey(ctx context.Context, db *store.DB, name string, size int) ([]byte, error) {
	fresh := make([]byte, size)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	var key []byte
	err := db.QueryRow(ctx, `WITH ins AS (INSERT INTO smcp_server_keys (name, value) VALUES ($1, $2)
			ON CONFLICT (name) DO NOTHING RETURNING value)
		SELECT value FROM ins UNION ALL SELECT value FROM smcp_server_keys WHERE name = $1 LIMIT 1`, name, fresh).Scan(&key)
	if err != nil {
		return nil, fmt.Errorf("oauth: server key: %w", err)
	}
	return key, nil
}

// registerClient stores a dynamically registered client.
func (s *storage) registerClient(ctx context.Context, id string, secretHash []byte, name string, reg registration) error {
	meta, _ := json.Marshal(reg)
	_, err := s.db.Exec(ctx, `INSERT INTO smcp_oauth_clients (id, secret_hash, name, redirect_uris, auth_method, metadata)
		VALUES ($1, $2, $3, $4, $5, $6)`, id, secretHash, name, reg.RedirectURIs, reg.TokenEndpointAuthMethod, meta)
	return err
}

// clientUsed notes that a client obtained a token now.
func (s *storage) clientUsed(ctx context.Context, id string) error {
	_, err := s.db.Exec(ctx, `UPDATE smcp_oauth_clients SET last_used_at = now() WHERE id = $1`, id)
	return err
}

// grants lists a user's live grants with their client, for the account
// page.
func (s *storage) grants(ctx context.Context, userID string) ([]grantView, error) {
	rows, err := s.db.Query(ctx, `SELECT t.request_id, c.name, t.request->'granted_scope', min(t.created_at)
		FROM smcp_oauth_tokens t JOIN smcp_oauth_clients c ON c.id = t.client_id
		WHERE t.subject = $1 AND t.kind IN ('access', 'refresh') AND t.active AND (t.expires_at IS NULL OR t.expires_at > now())
		GROUP BY t.request_id, c.name, t.request->'granted_scope' ORDER BY 4 DESC`, userID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []grantView
	for rows.Next() {
		var g grantView
		var scope []string
		if err := rows.Scan(&g.GrantID, &g.Client, &scope, &g.Created); err != nil {
			return nil, err
		}
		g.Scope = strings.Join(scope, " ")
		out = append(out, g)
	}
	return out, rows.Err()
}

// clientIdle is how long a registered client may go unused, holding no
// live token, before Purge deletes it: clients register anew (Claude does
// on invalid_client), so a registration nobody uses is only clutter.
const clientIdle = 30 * 24 * time.Hour

// tokenRetention is how long expired tokens and codes are kept (refresh
// reuse detection and the account page read recent ones).
const tokenRetention = 24 * time.Hour

// purge deletes what can no longer be used: tokens, codes and PKCE
// sessions expired more than a day ago, and registered clients unused for
// 30 days that hold no live token. It returns how many of each went.
func (s *storage) purge(ctx context.Context) (tokens, clients int64, err error) {
	tag, err := s.db.Exec(ctx, `DELETE FROM smcp_oauth_tokens WHERE expires_at < now() - make_interval(secs => $1)`,
		tokenRetention.Seconds())
	if err != nil {
		return 0, 0, err
	}
	tokens = tag.RowsAffected()
	if _, err := s.db.Exec(ctx, `DELETE FROM smcp_oauth_grant_ends WHERE ended_at < now() - make_interval(days => $1)`, grantEndDays); err != nil {
		return tokens, 0, err
	}
	tag, err = s.db.Exec(ctx, `DELETE FROM smcp_oauth_clients c
		WHERE coalesce(c.last_used_at, c.created_at) < now() - make_interval(secs => $1)
		AND NOT EXISTS (SELECT 1 FROM smcp_oauth_tokens t WHERE t.client_id = c.id AND t.active
			AND t.kind IN ('access', 'refresh') AND (t.expires_at IS NULL OR t.expires_at > now()))`, clientIdle.Seconds())
	if err != nil {
		return tokens, 0, err
	}
	return tokens, tag.RowsAffected(), nil
}

// liveGrants reports which of ids still have a usable access or refresh
// token (lobby.GrantChecker: MCP sessions end with their grant).
func (s *storage) liveGrants(ctx context.Context, ids []string) (map[string]bool, error) {
	rows, err := s.db.Query(ctx, `SELECT DISTINCT request_id FROM smcp_oauth_tokens
		WHERE request_id = ANY($1) AND kind IN ('access', 'refresh') AND active AND (expires_at IS NULL OR expires_at > now())`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	live := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		live[id] = true
	}
	return live, rows.Err()
}

// revokeGrant revokes every token of a grant.
func (s *storage) revokeGrant(ctx context.Context, userID, grantID string) error {
	return s.inTx(ctx, func(ctx context.Context) error {
		if err := s.lockGrant(ctx, grantID); err != nil {
			return err
		}
		tag, err := s.q(ctx).Exec(ctx, `UPDATE smcp_oauth_tokens SET active = false, rotated_at = NULL
			WHERE request_id = $1 AND subject = $2`, grantID, userID)
		if err == nil && tag.RowsAffected() == 0 {
			return pgx.ErrNoRows
		}
		if err != nil {
			return err
		}
		return s.recordEnd(ctx, grantID, endByYou)
	})
}

// grantEndDays is how long /account says why a connection ended; the
// hourly purge drops older reasons.
const grantEndDays = 30

// endedGrants lists why a user's connections ended in the last 30 days,
// newest first, for the account page.
func (s *storage) endedGrants(ctx context.Context, userID string) ([]endedGrant, error) {
	rows, err := s.db.Query(ctx, `SELECT client_name, reason, ended_at FROM smcp_oauth_grant_ends
		WHERE subject = $1 AND ended_at > now() - make_interval(days => $2) ORDER BY ended_at DESC LIMIT 20`, userID, grantEndDays)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []endedGrant
	for rows.Next() {
		var g endedGrant
		if err := rows.Scan(&g.Client, &g.Reason, &g.Ended); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, rows.Err()
}
