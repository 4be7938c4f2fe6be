package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-webauthn/webauthn/webauthn"
	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/store"
)

// accounts is the persistence of people's side of the authorization
// server: users, passkeys, browser sessions, invites, recovery codes,
// consents and passkey ceremonies. Handlers call its methods; they hold no
// SQL (as hydra keeps handlers apart from persistence). The OAuth tables
// fosite uses live in storage.go.
type accounts struct{ db *store.DB }

var (
	errNoUser     = errors.New("no such user")
	errInviteUsed = errors.New("invite used")
)

// sessionTTL is a browser session's lifetime.
const sessionTTL = 14 * 24 * time.Hour

// user loads the user where column = arg (id, username or
// webauthn_handle), with its passkeys.
func (a accounts) user(ctx context.Context, column string, arg any) (*User, error) {
	switch column {
	case "id", "username", "webauthn_handle":
	default:
		return nil, fmt.Errorf("oauth: no user lookup by %q", column)
	}
	u := &User{}
	err := a.db.QueryRow(ctx, `SELECT id, username, webauthn_handle FROM smcp_users WHERE `+column+` = $1`, arg).Scan(&u.ID, &u.Username, &u.Handle)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNoUser
	}
	if err != nil {
		return nil, err
	}
	rows, err := a.db.Query(ctx, `SELECT credential FROM smcp_credentials WHERE user_id = $1 ORDER BY created_at`, u.ID)
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

// usernameTaken reports whether an account has username.
func (a accounts) usernameTaken(ctx context.Context, username string) (bool, error) {
	var taken bool
	err := a.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM smcp_users WHERE username = $1)`, username).Scan(&taken)
	return taken, err
}

// userCount counts the accounts.
func (a accounts) userCount(ctx context.Context) (int, error) {
	var n int
	err := a.db.QueryRow(ctx, `SELECT count(*) FROM smcp_users`).Scan(&n)
	return n, err
}

// createUser makes an account with its first passkey and recovery codes in
// one transaction, spending invite when it is not empty (errInviteUsed if
// it was spent meanwhile).
func (a accounts) createUser(ctx context.Context, u *User, cred *webauthn.Credential, invite string, spendInvite bool) (codes []string, err error) {
	err = a.db.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if spendInvite {
			tag, err := tx.Exec(ctx, `UPDATE smcp_invites SET used_at = now(), used_by = $2
				WHERE token_hash = $1 AND used_at IS NULL AND expires_at > now()`, hashSecret(invite), u.ID)
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
	return codes, err
}

// addPasskey adds a passkey to a user, spending recovery code first when
// it is not empty (errInviteUsed if it is not an unused code of theirs).
func (a accounts) addPasskey(ctx context.Context, userID string, cred *webauthn.Credential, code string) error {
	return a.db.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if code != "" {
			tag, err := tx.Exec(ctx, `UPDATE smcp_recovery_codes SET used_at = now() WHERE user_id = $1 AND code_hash = $2 AND used_at IS NULL`,
				userID, hashSecret(code))
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return errInviteUsed
			}
		}
		return insertCredential(ctx, tx, userID, cred, "passkey "+time.Now().UTC().Format("2006-01-02"))
	})
}

func insertCredential(ctx context.Context, tx pgx.Tx, userID string, cred *webauthn.Credential, name string) error {
	raw, err := json.Marshal(cred)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO smcp_credentials (id, user_id, name, credential) VALUES ($1, $2, $3, $4)`, cred.ID, userID, name, raw)
	return err
}

// passkeyUsed stores a passkey's state after a sign-in (its counter).
func (a accounts) passkeyUsed(ctx context.Context, cred *webauthn.Credential) error {
	raw, err := json.Marshal(cred)
	if err != nil {
		return err
	}
	_, err = a.db.Exec(ctx, `UPDATE smcp_credentials SET credential = $2, last_used_at = now() WHERE id = $1`, cred.ID, raw)
	return err
}

// passkeyRow is a passkey as the account page lists it.
type passkeyRow struct {
	ID       []byte
	Name     string
	Created  time.Time
	LastUsed *time.Time
}

func (a accounts) passkeys(ctx context.Context, userID string) ([]passkeyRow, error) {
	rows, err := a.db.Query(ctx, `SELECT id, name, created_at, last_used_at FROM smcp_credentials WHERE user_id = $1 ORDER BY created_at`, userID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []passkeyRow
	for rows.Next() {
		var k passkeyRow
		if err := rows.Scan(&k.ID, &k.Name, &k.Created, &k.LastUsed); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

func (a accounts) deletePasskey(ctx context.Context, userID string, id []byte) error {
	_, err := a.db.Exec(ctx, `DELETE FROM smcp_credentials WHERE id = $1 AND user_id = $2`, id, userID)
	return err
}

func (a accounts) renamePasskey(ctx context.Context, userID string, id []byte, name string) error {
	_, err := a.db.Exec(ctx, `UPDATE smcp_credentials SET name = $3 WHERE id = $1 AND user_id = $2`, id, userID, name)
	return err
}

// newSession starts a browser session and returns its secret.
func (a accounts) newSession(ctx context.Context, userID string) (string, error) {
	id := randomToken(32)
	_, err := a.db.Exec(ctx, `INSERT INTO smcp_sessions (id_hash, user_id, expires_at) VALUES ($1, $2, now() + $3 * interval '1 second')`,
		hashSecret(id), userID, sessionTTL.Seconds())
	return id, err
}

// sessionUser is the user of a live browser session.
func (a accounts) sessionUser(ctx context.Context, id string) (*User, error) {
	var userID string
	if err := a.db.QueryRow(ctx, `SELECT user_id FROM smcp_sessions WHERE id_hash = $1 AND expires_at > now()`, hashSecret(id)).Scan(&userID); err != nil {
		return nil, errNoUser
	}
	return a.user(ctx, "id", userID)
}

func (a accounts) endSession(ctx context.Context, id string) error {
	_, err := a.db.Exec(ctx, `DELETE FROM smcp_sessions WHERE id_hash = $1`, hashSecret(id))
	return err
}

// createInvite stores a one-time sign-up link secret and returns it.
func (a accounts) createInvite(ctx context.Context, kind, createdBy string, ttl time.Duration) (string, error) {
	tok := randomToken(24)
	var by *string
	if createdBy != "" {
		by = &createdBy
	}
	_, err := a.db.Exec(ctx, `INSERT INTO smcp_invites (token_hash, kind, created_by, expires_at) VALUES ($1, $2, $3, now() + $4 * interval '1 second')`,
		hashSecret(tok), kind, by, ttl.Seconds())
	return tok, err
}

func (a accounts) inviteValid(ctx context.Context, tok string) (bool, error) {
	var ok bool
	err := a.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM smcp_invites WHERE token_hash = $1 AND used_at IS NULL AND expires_at > now())`,
		hashSecret(tok)).Scan(&ok)
	return ok, err
}

// recoveryCodeValid reports whether code is an unused recovery code of
// the user (it is spent by addPasskey).
func (a accounts) recoveryCodeValid(ctx context.Context, userID, code string) (bool, error) {
	var ok bool
	err := a.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM smcp_recovery_codes WHERE user_id = $1 AND code_hash = $2 AND used_at IS NULL)`,
		userID, hashSecret(code)).Scan(&ok)
	return ok, err
}

// newRecoveryCodes replaces a user's recovery codes.
func (a accounts) newRecoveryCodes(ctx context.Context, userID string) (codes []string, err error) {
	err = a.db.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		codes, err = recoveryCodes(ctx, tx, userID, 10)
		return err
	})
	return codes, err
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

// consent is what the user last granted a client ("" if nothing).
func (a accounts) consent(ctx context.Context, userID, clientKey string) (string, error) {
	var scope string
	err := a.db.QueryRow(ctx, `SELECT scope FROM smcp_consents WHERE user_id = $1 AND client_key = $2`, userID, clientKey).Scan(&scope)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return scope, err
}

func (a accounts) saveConsent(ctx context.Context, userID, clientKey, scope string) error {
	// The new date is the proposed row's (its default, now()): Citus
	// refuses a function that is not immutable in DO UPDATE.
	_, err := a.db.Exec(ctx, `INSERT INTO smcp_consents (user_id, client_key, scope) VALUES ($1, $2, $3)
		ON CONFLICT (user_id, client_key) DO UPDATE SET scope = EXCLUDED.scope, updated_at = EXCLUDED.updated_at`, userID, clientKey, scope)
	return err
}

// saveCeremony keeps a passkey ceremony's state for five minutes under a
// new secret, which it returns.
func (a accounts) saveCeremony(ctx context.Context, kind string, data []byte) (string, error) {
	id := randomToken(24)
	_, err := a.db.Exec(ctx, `INSERT INTO smcp_webauthn_sessions (id_hash, kind, data, expires_at)
		VALUES ($1, $2, $3, now() + interval '5 minutes')`, hashSecret(id), kind, data)
	return id, err
}

// takeCeremony returns and deletes a live ceremony's state: a second take
// (a replay) finds nothing.
func (a accounts) takeCeremony(ctx context.Context, id, kind string) ([]byte, error) {
	var raw []byte
	err := a.db.QueryRow(ctx, `DELETE FROM smcp_webauthn_sessions WHERE id_hash = $1 AND kind = $2 AND expires_at > now() RETURNING data`,
		hashSecret(id), kind).Scan(&raw)
	return raw, err
}
