// Acting from the room page: forms posted to /web/rooms/{id}/…, checked
// for cross-site origins (Routes), run as the person's own agent.

package web

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// invoke runs an action from its form, as the person's own agent in the
// room (lobby.PersonActor), with the params the form's fields give.
func (wb *Web) invoke(w http.ResponseWriter, r *http.Request) {
	roomID, action := r.PathValue("room"), r.PathValue("action")
	p, ok := wb.actor(w, r, roomID)
	if !ok {
		return
	}
	if err := r.ParseForm(); err != nil {
		wb.roomWithError(w, r, roomID, errs.New(errs.InvalidField, "the form could not be read").WithHint("send the form again"))
		return
	}
	params := map[string]any{}
	for name, vals := range r.PostForm {
		pname, ok := strings.CutPrefix(name, "p.")
		if !ok || len(vals) == 0 {
			continue
		}
		v, err := formValue(vals[len(vals)-1], r.PostForm.Get("t."+pname))
		if err != nil {
			wb.roomWithError(w, r, roomID, errs.New(errs.InvalidParam, "%s: %v", pname, err).With("param", pname).WithHint("fix the field and invoke %s again", action))
			return
		}
		if v != nil {
			params[pname] = v
		}
	}
	raw, _ := json.Marshal(params)
	if _, err := wb.opt.Substrate.Invoke(r.Context(), p, roomID, action, raw); err != nil {
		wb.roomWithError(w, r, roomID, err)
		return
	}
	http.Redirect(w, r, "/rooms/"+url.PathEscape(roomID)+"#action-"+url.PathEscape(action), http.StatusSeeOther)
}

// message sends a message to the room as the person's own agent.
func (wb *Web) message(w http.ResponseWriter, r *http.Request) {
	roomID := r.PathValue("room")
	p, ok := wb.actor(w, r, roomID)
	if !ok {
		return
	}
	body := strings.TrimSpace(r.PostFormValue("body"))
	if body == "" {
		wb.roomWithError(w, r, roomID, errs.New(errs.InvalidField, "the message is empty").WithHint("write something, then send"))
		return
	}
	raw, _ := json.Marshal(map[string]any{"body": body})
	if _, err := wb.opt.Substrate.Invoke(r.Context(), p, roomID, "_send_message", raw); err != nil {
		wb.roomWithError(w, r, roomID, err)
		return
	}
	http.Redirect(w, r, "/rooms/"+url.PathEscape(roomID)+"#h-messages", http.StatusSeeOther)
}

// actor is the signed-in person's acting authority in the room; view
// links never act.
func (wb *Web) actor(w http.ResponseWriter, r *http.Request, roomID string) (*substrate.Principal, bool) {
	userID, username, signed := wb.opt.SignedIn(r)
	if !signed {
		wb.errorPage(w, r, http.StatusUnauthorized, "Sign in to act", "Acting in a room needs you signed in.", false)
		return nil, false
	}
	p, err := wb.opt.Lobby.PersonActor(r.Context(), userID, username, roomID)
	if err != nil {
		wb.fail(w, r, err)
		return nil, false
	}
	return p, true
}

// roomWithError shows the room page again with what went wrong, in the
// error's status; a room the person cannot read is just the error.
func (wb *Web) roomWithError(w http.ResponseWriter, r *http.Request, roomID string, err error) {
	e := errs.From(err)
	if e.Code == errs.Internal {
		wb.fail(w, r, err)
		return
	}
	msg := e.Message
	if e.Hint != "" {
		msg += ". " + e.Hint + "."
	}
	wb.roomWith(w, r, roomID, e.Code.Status(), "Error", msg, err)
}

// roomWith shows the room page to the signed-in person with one more
// datum (key: value) in the given status; when the room cannot be read,
// it shows err (the failure that led here) instead.
func (wb *Web) roomWith(w http.ResponseWriter, r *http.Request, roomID string, status int, key string, value any, err error) {
	userID, username, _ := wb.opt.SignedIn(r)
	p, access, perr := wb.opt.Lobby.PersonPrincipal(r.Context(), userID, username, roomID)
	if perr != nil {
		wb.fail(w, r, cmp.Or(err, perr))
		return
	}
	data, derr := wb.roomData(r.Context(), p, roomID)
	if derr != nil {
		wb.fail(w, r, cmp.Or(err, derr))
		return
	}
	data["Who"], data["CanReplay"], data["CanAct"], data[key] = username+" ("+access+")", p.Admin(), canAct(access), value
	data["CanRotate"] = access == "owner"
	wb.render(w, r, status, "room", data, false)
}

// rotateToken replaces the room's room or view token (form field which)
// for an owner, and shows the room page with the new token, this once.
func (wb *Web) rotateToken(w http.ResponseWriter, r *http.Request) {
	roomID := r.PathValue("room")
	userID, username, signed := wb.opt.SignedIn(r)
	if !signed {
		wb.errorPage(w, r, http.StatusUnauthorized, "Sign in to rotate tokens", "Rotating a room's tokens needs you signed in as an owner.", false)
		return
	}
	rt, err := wb.opt.Lobby.RotateToken(r.Context(), userID, username, roomID, r.PostFormValue("which"))
	if err != nil {
		wb.roomWithError(w, r, roomID, err)
		return
	}
	wb.roomWith(w, r, roomID, http.StatusOK, "NewToken", rt, nil)
}

// formValue turns a form field into a param of the given type (the
// action's ParamSpec type, sent beside the field): numbers and booleans as
// such, objects, arrays and untyped values as JSON when they parse, text
// as text. An empty field is an absent param.
func formValue(v, typ string) (any, error) {
	if v == "" {
		return nil, nil
	}
	switch typ {
	case "string":
		return v, nil
	case "integer":
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a whole number", v)
		}
		return n, nil
	case "number":
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", v)
		}
		return f, nil
	case "boolean":
		return v == "true" || v == "on", nil
	}
	var x any
	if err := json.Unmarshal([]byte(v), &x); err == nil {
		return x, nil
	}
	if typ == "object" || typ == "array" {
		return nil, fmt.Errorf("%q is not JSON", v)
	}
	return v, nil
}
