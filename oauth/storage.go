package oauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
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
	allow    []string      // the operator's redirect allow-list
	audience string        // the MCP resource every client may be granted
	grace    time.Duration // how long a rotated refresh token still works
}

type txKey struct{}

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
	return context.WithValue(ctx, txKey{}, tx), nil
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
	_, err = s.q(ctx).Exec(ctx, `INSERT INTO smcp_oauth_tokens (signature, kind, request_id, client_id, subject, request, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, hashSig(sig), kind, req.GetID(), req.GetClient().GetID(), subject, raw, expires)
	return err
}

// hashSig stores signatures hashed once more: the HMAC signature does not
// reveal the token, and a hash of it keeps even that out of the database.
func hashSig(sig string) string {
	h := sha256.Sum256([]byte(sig))
	return string(b64(h[:]))
}

// get loads a stored request into a requester whose session is session.
// inactive reports a used code, a rotated or revoked token.
func (s *storage) get(ctx context.Context, kind, sig string, session fosite.Session) (req *fosite.Request, active bool, rotatedAt *time.Time, err error) {
	var raw []byte
	err = s.q(ctx).QueryRow(ctx, `SELECT request, active, rotated_at FROM smcp_oauth_tokens WHERE kind = $1 AND signature = $2`,
		kind, hashSig(sig)).Scan(&raw, &active, &rotatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil, fosite.ErrNotFound
	}
	if err != nil {
		return nil, false, nil, err
	}
	var sr storedRequest
	if err := json.Unmarshal(raw, &sr); err != nil {
		return nil, false, nil, err
	}
	client, err := s.GetClient(ctx, sr.ClientID)
	if err != nil {
		return nil, false, nil, err
	}
	if session != nil {
		if err := json.Unmarshal(sr.Session, session); err != nil {
			return nil, false, nil, err
		}
	}
	req = &fosite.Request{ID: sr.ID, RequestedAt: sr.RequestedAt, Client: client,
		RequestedScope: sr.RequestedScope, GrantedScope: sr.GrantedScope,
		RequestedAudience: sr.RequestedAudience, GrantedAudience: sr.GrantedAudience,
		Form: sr.Form, Session: session}
	return req, active, rotatedAt, nil
}

func (s *storage) remove(ctx context.Context, kind, sig string) error {
	_, err := s.q(ctx).Exec(ctx, `DELETE FROM smcp_oauth_tokens WHERE kind = $1 AND signature = $2`, kind, hashSig(sig))
	return err
}

func (s *storage) CreateAuthorizeCodeSession(ctx context.Context, code string, req fosite.Requester) error {
	return s.create(ctx, "code", code, req)
}

func (s *storage) GetAuthorizeCodeSession(ctx context.Context, code string, session fosite.Session) (fosite.Requester, error) {
	req, active, _, err := s.get(ctx, "code", code, session)
	if err != nil {
		return nil, err
	}
	if !active {
		// fosite then revokes every token this code issued.
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
	req, active, _, err := s.get(ctx, "access", sig, session)
	if err != nil {
		return nil, err
	}
	if !active {
		return req, fosite.ErrInactiveToken
	}
	return req, nil
}

func (s *storage) DeleteAccessTokenSession(ctx context.Context, sig string) error {
	return s.remove(ctx, "access", sig)
}

func (s *storage) CreateRefreshTokenSession(ctx context.Context, sig, _ string, req fosite.Requester) error {
	return s.create(ctx, "refresh", sig, req)
}

// GetRefreshTokenSession treats a refresh token rotated less than the grace
// window ago as still valid, so two racing refreshes (Claude's backend and
// its proxy do this) both succeed; after the window, presenting it is reuse
// and fosite revokes the whole grant.
func (s *storage) GetRefreshTokenSession(ctx context.Context, sig string, session fosite.Session) (fosite.Requester, error) {
	req, active, rotatedAt, err := s.get(ctx, "refresh", sig, session)
	if err != nil {
		return nil, err
	}
	if !active {
		if rotatedAt != nil && time.Since(*rotatedAt) < s.grace {
			return req, nil
		}
		return req, fosite.ErrInactiveToken
	}
	return req, nil
}

func (s *storage) DeleteRefreshTokenSession(ctx context.Context, sig string) error {
	return s.remove(ctx, "refresh", sig)
}

// RotateRefreshToken retires the presented refresh token (keeping its
// rotation time for the grace window). Other tokens of the grant, including
// those a racing refresh just issued, stay valid.
func (s *storage) RotateRefreshToken(ctx context.Context, _ string, sig string) error {
	_, err := s.q(ctx).Exec(ctx, `UPDATE smcp_oauth_tokens SET active = false, rotated_at = coalesce(rotated_at, now())
		WHERE kind = 'refresh' AND signature = $1`, hashSig(sig))
	return err
}

func (s *storage) RevokeRefreshToken(ctx context.Context, requestID string) error {
	_, err := s.q(ctx).Exec(ctx, `UPDATE smcp_oauth_tokens SET active = false, rotated_at = NULL WHERE kind = 'refresh' AND request_id = $1`, requestID)
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
	req, _, _, err := s.get(ctx, "pkce", sig, session)
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
	tag, err := s.db.Exec(ctx, `UPDATE smcp_oauth_tokens SET active = false, rotated_at = NULL
		WHERE request_id = $1 AND subject = $2`, grantID, userID)
	if err == nil && tag.RowsAffected() == 0 {
		return pgx.ErrNoRows
	}
	return err
}
