package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/go-webauthn/webauthn/webauthn"
	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// User is an account: a username and its passkeys.
type User struct {
	ID       string
	Username string
	Handle   []byte
	Creds    []webauthn.Credential
}

func (u *User) WebAuthnID() []byte                         { return u.Handle }
func (u *User) WebAuthnName() string                       { return u.Username }
func (u *User) WebAuthnDisplayName() string                { return u.Username }
func (u *User) WebAuthnCredentials() []webauthn.Credential { return u.Creds }

var usernameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{1,62}[a-z0-9]$`)

func hashSecret(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

func loadUser(ctx context.Context, q querier, where string, arg any) (*User, error) {
	u := &User{}
	err := q.QueryRow(ctx, `SELECT id, username, webauthn_handle FROM smcp_users WHERE `+where, arg).Scan(&u.ID, &u.Username, &u.Handle)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNoUser
	}
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, `SELECT credential FROM smcp_credentials WHERE user_id = $1 ORDER BY created_at`, u.ID)
	if err != nil {
		return nil, err
	}
	raws, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, err
	}
	for _, raw := range raws {
		var c webauthn.Credential
		if err := json.Unmarshal(raw, &c); err == nil {
			u.Creds = append(u.Creds, c)
		}
	}
	return u, nil
}

var errNoUser = errors.New("no such user")

// sessionTTL is a browser session's lifetime.
const sessionTTL = 14 * 24 * time.Hour

func newSession(ctx context.Context, db *store.DB, userID string) (string, error) {
	id := randomToken(32)
	_, err := db.Exec(ctx, `INSERT INTO smcp_sessions (id_hash, user_id, expires_at) VALUES ($1, $2, now() + $3 * interval '1 second')`,
		hashSecret(id), userID, sessionTTL.Seconds())
	return id, err
}

func sessionUser(ctx context.Context, db *store.DB, id string) (*User, error) {
	var userID string
	err := db.QueryRow(ctx, `SELECT user_id FROM smcp_sessions WHERE id_hash = $1 AND expires_at > now()`, hashSecret(id)).Scan(&userID)
	if err != nil {
		return nil, errNoUser
	}
	return loadUser(ctx, db, "id = $1", userID)
}

// CreateInvite makes a one-time sign-up link secret: kind "enrol" for the
// first account, "invite" for the rest. createdBy is empty for links made
// by the server or the syncd command.
func CreateInvite(ctx context.Context, db *store.DB, kind, createdBy string, ttl time.Duration) (string, error) {
	tok := randomToken(24)
	var by *string
	if createdBy != "" {
		by = &createdBy
	}
	_, err := db.Exec(ctx, `INSERT INTO smcp_invites (token_hash, kind, created_by, expires_at) VALUES ($1, $2, $3, now() + $4 * interval '1 second')`,
		hashSecret(tok), kind, by, ttl.Seconds())
	return tok, err
}

// EnsureEnrolment logs a one-time enrolment link when no user exists yet
// and sign-up is by invitation, so the first account can be made.
func (s *Server) EnsureEnrolment(ctx context.Context) (string, error) {
	if s.opt.Signup != "invite" {
		return "", nil
	}
	var users int
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM smcp_users`).Scan(&users); err != nil {
		return "", err
	}
	if users > 0 {
		return "", nil
	}
	tok, err := CreateInvite(ctx, s.db, "enrol", "", 24*time.Hour)
	if err != nil {
		return "", err
	}
	link := s.issuer + "/signup?invite=" + tok
	s.log.Warn("no account exists yet: create the first one (one use, 24 h) at " + link)
	return link, nil
}

// InviteURL makes an invite link for a new account.
func (s *Server) InviteURL(ctx context.Context, createdBy string) (string, error) {
	tok, err := CreateInvite(ctx, s.db, "invite", createdBy, 7*24*time.Hour)
	if err != nil {
		return "", err
	}
	return s.issuer + "/signup?invite=" + tok, nil
}

// recoveryCodes makes n one-time codes for user, replacing unused ones.
func recoveryCodes(ctx context.Context, tx pgx.Tx, userID string, n int) ([]string, error) {
	if _, err := tx.Exec(ctx, `DELETE FROM smcp_recovery_codes WHERE user_id = $1`, userID); err != nil {
		return nil, err
	}
	codes := make([]string, n)
	for i := range codes {
		codes[i] = fmt.Sprintf("%s-%s", randomToken(5), randomToken(5))
		if _, err := tx.Exec(ctx, `INSERT INTO smcp_recovery_codes (user_id, code_hash) VALUES ($1, $2)`, userID, hashSecret(codes[i])); err != nil {
			return nil, err
		}
	}
	return codes, nil
}

// UserID is the id of the account named username (for sharing a room with
// it): errs.NotFound when there is none.
func (s *Server) UserID(ctx context.Context, username string) (string, error) {
	u, err := loadUser(ctx, s.db, "username = $1", strings.ToLower(strings.TrimSpace(username)))
	if errors.Is(err, errNoUser) {
		return "", errs.New(errs.NotFound, "no user %q", username).WithHint("check the username; invite them first if they have no account")
	}
	if err != nil {
		return "", err
	}
	return u.ID, nil
}
