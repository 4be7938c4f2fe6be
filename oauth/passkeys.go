package oauth

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"
)

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
	ok, _ := wb.s.acct.inviteValid(ctx, tok)
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
	if taken, err := wb.s.acct.usernameTaken(r.Context(), username); err != nil || taken {
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
	codes, err := wb.s.acct.createUser(r.Context(), u, cred, c.Invite, wb.s.opt.Signup == "invite")
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
		u, err := wb.s.acct.user(r.Context(), "webauthn_handle", handle)
		found = u
		return u, err
	}, c.Data, r)
	if err != nil || found == nil {
		apiError(w, 401, "passkey_rejected", "that passkey is not recognised here: "+protocolMessage(err))
		return
	}
	_ = wb.s.acct.passkeyUsed(r.Context(), cred)
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
	u, err := wb.s.acct.user(r.Context(), "username", strings.ToLower(strings.TrimSpace(body.Username)))
	if err != nil {
		apiError(w, 401, "recovery_rejected", "that username and recovery code do not match")
		return
	}
	if ok, _ := wb.s.acct.recoveryCodeValid(r.Context(), u.ID, strings.TrimSpace(body.Code)); !ok {
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
	u, err := wb.s.acct.user(r.Context(), "id", c.UserID)
	if err != nil {
		apiError(w, 400, "ceremony_expired", "start again")
		return
	}
	cred, err := wb.wa.FinishRegistration(u, c.Data, r)
	if err != nil {
		apiError(w, 400, "passkey_rejected", "the passkey could not be verified: "+protocolMessage(err))
		return
	}
	err = wb.s.acct.addPasskey(r.Context(), u.ID, cred, c.Code)
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
