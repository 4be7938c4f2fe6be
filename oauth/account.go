package oauth

import (
	"net/http"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// --- account ---

type grantView struct {
	GrantID, Client, Scope string
	Created                time.Time
}

// endedGrant is a connection that ended, and why.
type endedGrant struct {
	Client, Reason string
	Ended          time.Time
}

func (wb *web) account(w http.ResponseWriter, r *http.Request) {
	u := wb.signedIn(w, r)
	if u == nil {
		return
	}
	wb.accountPage(w, r, u, "")
}

// accountPage draws the account page, with an invite link just made (or
// ""): it is shown in the answer to the form's POST, never put in a URL,
// where the browser's history and the server's access log would keep it.
func (wb *web) accountPage(w http.ResponseWriter, r *http.Request, u *User, invite string) {
	ctx := r.Context()
	type passkey struct {
		ID       string
		Name     string
		Created  time.Time
		LastUsed *time.Time
	}
	var keys []passkey
	rows, err := wb.s.acct.passkeys(ctx, u.ID)
	if err != nil {
		wb.s.log.Warn("list passkeys", "err", err)
	}
	for _, k := range rows {
		keys = append(keys, passkey{ID: b64(k.ID), Name: k.Name, Created: k.Created, LastUsed: k.LastUsed})
	}
	grants, err := wb.s.store.grants(ctx, u.ID)
	if err != nil {
		wb.s.log.Warn("list connected applications", "err", err)
	}
	ended, err := wb.s.store.endedGrants(ctx, u.ID)
	if err != nil {
		wb.s.log.Warn("list ended connections", "err", err)
	}
	rooms, _ := wb.s.opt.Rooms.UserRooms(ctx, u.ID)
	wb.render(w, http.StatusOK, "account", map[string]any{"User": u.Username, "Passkeys": keys, "Grants": grants, "Ended": ended, "Rooms": rooms,
		"Invite": invite, "Revoked": justRevoked(r, ended)})
}

// justRevoked is the application whose connection the person revoked
// just before this page (its newest ended connection, ended here), or "".
// The name comes from the server, never from the link.
func justRevoked(r *http.Request, ended []endedGrant) string {
	if r.URL.Query().Get("revoked") == "" || len(ended) == 0 || ended[0].Reason != endByYou.text() {
		return ""
	}
	return ended[0].Client
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
	wb.accountPage(w, r, u, link)
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
	// The page after says what the client will show and how to undo it:
	// Claude Code drops every sync tool without a word.
	http.Redirect(w, r, "/account?revoked=1", http.StatusSeeOther)
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
		err = wb.s.acct.deletePasskey(r.Context(), u.ID, id)
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
		err = wb.s.acct.renamePasskey(r.Context(), u.ID, id, name)
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
	codes, err := wb.s.acct.newRecoveryCodes(r.Context(), u.ID)
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
	// The form says where it was (the lobby's forms send "/"): the person
	// returns there, on this site only.
	next := safeNext(r.PostFormValue("next"))
	var err error
	switch r.PathValue("action") {
	case "create":
		_, err = rooms.CreateRoom(ctx, u.ID, room, strings.TrimSpace(r.PostFormValue("label")))
	case "claim":
		var token string
		token, err = rooms.ClaimRoom(ctx, u.ID, room, strings.TrimSpace(r.PostFormValue("token")), r.PostFormValue("rotate") != "")
		if err == nil && token != "" {
			wb.render(w, http.StatusOK, "roomtoken", map[string]any{"Room": room, "Token": token, "Next": next})
			return
		}
	case "share":
		var other string
		if other, err = wb.s.UserID(ctx, r.PostFormValue("username")); err == nil {
			err = rooms.ShareRoom(ctx, u.ID, room, other, r.PostFormValue("access"))
		}
	case "leave":
		err = rooms.LeaveRoom(ctx, u.ID, room)
	case "delete":
		// Deleting is for everyone in the room and cannot be undone: the
		// form asks the person to confirm by ticking the room's box.
		if r.PostFormValue("confirm") != room {
			wb.errorPage(w, http.StatusBadRequest, "Not deleted", "Deleting a room needs its box ticked, to confirm: go back, tick it and press Delete room again.")
			return
		}
		err = rooms.DeleteRoom(ctx, u.ID, room)
	case "default":
		err = rooms.SetDefault(ctx, u.ID, room)
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
		switch {
		case e.Code == errs.LastOwner:
			// The way out in the page's own words: its forms.
			msg += ". A room always keeps an owner: first share it with another person as owner (the Share form, role “owner”), then change your own role or leave; or delete the room with its Delete button on your account page."
		case e.Hint != "":
			msg += ". " + e.Hint + "."
		}
		wb.errorPage(w, e.Code.Status(), "That did not work", msg)
		return
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}
