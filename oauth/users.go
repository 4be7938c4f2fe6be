package oauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"regexp"
	"strings"
	"time"

	"github.com/go-webauthn/webauthn/webauthn"

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

// EnsureEnrolment logs a one-time enrolment link when no user exists yet
// and sign-up is by invitation, so the first account can be made.
func (s *Server) EnsureEnrolment(ctx context.Context) (string, error) {
	if s.opt.Signup != "invite" {
		return "", nil
	}
	users, err := s.acct.userCount(ctx)
	if err != nil || users > 0 {
		return "", err
	}
	tok, err := s.acct.createInvite(ctx, "enrol", "", 24*time.Hour)
	if err != nil {
		return "", err
	}
	link := s.issuer + "/signup?invite=" + tok
	s.log.Warn("no account exists yet: create the first one (one use, 24 h) at " + link)
	return link, nil
}

// InviteURL makes an invite link for a new account.
func (s *Server) InviteURL(ctx context.Context, createdBy string) (string, error) {
	tok, err := s.acct.createInvite(ctx, "invite", createdBy, 7*24*time.Hour)
	if err != nil {
		return "", err
	}
	return s.issuer + "/signup?invite=" + tok, nil
}

// UserID is the id of the account named username (for sharing a room with
// it): errs.NotFound when there is none.
func (s *Server) UserID(ctx context.Context, username string) (string, error) {
	u, err := s.acct.user(ctx, "username", strings.ToLower(strings.TrimSpace(username)))
	if errors.Is(err, errNoUser) {
		return "", errs.New(errs.NotFound, "no user %q", username).WithHint("check the username; invite them first if they have no account")
	}
	if err != nil {
		return "", err
	}
	return u.ID, nil
}
