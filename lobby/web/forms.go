// Acting from the room page: forms posted to /web/rooms/{id}/…, checked
// for cross-site origins (Routes), run as the person's own agent.

package web

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
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
		wb.refused(w, r, roomID, action, errs.New(errs.InvalidField, "the form could not be read").WithHint("send the form again"))
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
			wb.refused(w, r, roomID, action, errs.New(errs.InvalidParam, "%s: %v", pname, err).With("param", pname).WithHint("fix the field and invoke %s again", action))
			return
		}
		if v != nil {
			params[pname] = v
		}
	}
	raw, _ := json.Marshal(params)
	res, err := wb.opt.Substrate.Invoke(r.Context(), p, roomID, action, raw)
	if err != nil {
		wb.refused(w, r, roomID, action, err)
		return
	}
	f := flash{Action: action, OK: true, Seq: res.Seq, Text: fmt.Sprintf("Done: %s went through (seq %d).", action, res.Seq)}
	wb.setFlash(w, r, roomID, f)
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
		wb.refused(w, r, roomID, sendMessage, errs.New(errs.InvalidField, "the message is empty").WithHint("write something, then send"))
		return
	}
	raw, _ := json.Marshal(map[string]any{"body": body})
	res, err := wb.opt.Substrate.Invoke(r.Context(), p, roomID, sendMessage, raw)
	if err != nil {
		wb.refused(w, r, roomID, sendMessage, err)
		return
	}
	wb.setFlash(w, r, roomID, flash{Action: sendMessage, OK: true, Seq: res.Seq, Text: "Sent."})
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
// for an owner, and redirects to the room page, which shows the new token
// this once (showonce.go): a reload rotates nothing.
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
	wb.showTokenOnce(w, r, userID, roomID, rt)
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

// sendMessage is the builtin the message box invokes.
const sendMessage = "_send_message"

// A form's outcome travels to the page it redirects to (POST, then a
// redirect, then GET: a reload shows the page again and never sends the
// form twice) in a short-lived cookie the page reads once: the flash.
// The page shows it next to the form that was used.
type flash struct {
	Action string `json:"a"`
	OK     bool   `json:"ok"`
	Seq    int64  `json:"s,omitempty"`
	// Text says what happened in a person's words.
	Text string `json:"t"`
	// Code is the refusal's stable code; Detail the developer's wording
	// (the message and hint), Clause and Read the false clause of the
	// precondition with what it read: shown on demand.
	Code   string            `json:"c,omitempty"`
	Detail string            `json:"d,omitempty"`
	Clause string            `json:"cl,omitempty"`
	Read   map[string]string `json:"r,omitempty"`
	From   string            `json:"f,omitempty"`
	// Typed are the form's fields as the person typed them (params by
	// name; the message box's "body"), kept by a refusal so that the form
	// shows them again to be fixed, not typed anew.
	Typed map[string]string `json:"p,omitempty"`
}

// typed is what the person typed into field name of the form whose
// refusal f is ("" when f is no refusal, or has none for it).
func typed(f *flash, name string) string {
	if f == nil || f.OK {
		return ""
	}
	return f.Typed[name]
}

const flashCookie = "sync_flash"

// formFrom is the id of the element holding the form used (sent by the
// page's script), where the browser lands after; else the action's card.
func formFrom(r *http.Request, action string) string {
	from := r.PostFormValue("from")
	if from == "" || len(from) > 100 || strings.IndexFunc(from, func(c rune) bool {
		return !(c == '-' || c == '_' || c == ':' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z')
	}) >= 0 {
		if action == sendMessage {
			return "h-messages"
		}
		return "action-" + action
	}
	return from
}

// setFlash answers a form: the outcome in the flash cookie, and a
// redirect (303) to the room page at the form used.
func (wb *Web) setFlash(w http.ResponseWriter, r *http.Request, roomID string, f flash) {
	f.From = formFrom(r, f.Action)
	raw, _ := json.Marshal(f)
	if len(raw) > 3000 { // a cookie holds about 4 KB: the details go first
		f.Detail, f.Read = shorten(f.Detail, 300), nil
		raw, _ = json.Marshal(f)
	}
	if len(raw) > 3000 { // then what was typed, which the text then says
		f.Typed = nil
		f.Text += " (What you typed was too long to keep: type it again.)"
		raw, _ = json.Marshal(f)
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: base64.RawURLEncoding.EncodeToString(raw), Path: "/rooms/" + url.PathEscape(roomID),
		MaxAge: 60, HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil || strings.HasPrefix(wb.opt.PublicURL, "https:")})
	http.Redirect(w, r, "/rooms/"+url.PathEscape(roomID)+"#"+f.From, http.StatusSeeOther)
}

// takeFlash reads (and clears) the flash the last form left for this
// room's page.
func (wb *Web) takeFlash(w http.ResponseWriter, r *http.Request, roomID string, data map[string]any) {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: "", Path: "/rooms/" + url.PathEscape(roomID), MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	raw, err := base64.RawURLEncoding.DecodeString(c.Value)
	var f flash
	if err != nil || json.Unmarshal(raw, &f) != nil {
		return
	}
	data["Flash"] = &f
	// An action without a form on the page (gone since, or never there)
	// has its answer shown at the top of the activity instead.
	if f.Action != sendMessage && !slices.ContainsFunc(asRows(data["Actions"]), func(a actionRow) bool { return a.ID == f.Action }) {
		data["FlashElsewhere"] = &f
	}
}

func asRows(v any) []actionRow { rows, _ := v.([]actionRow); return rows }

// refused answers a form the room refused: what went wrong in words, at
// the form. A failure of ours is the error page.
func (wb *Web) refused(w http.ResponseWriter, r *http.Request, roomID, action string, err error) {
	e := errs.From(err)
	if e.Code == errs.Internal {
		wb.fail(w, r, err)
		return
	}
	params := map[string]string{}
	for name, vals := range r.PostForm {
		if pname, ok := strings.CutPrefix(name, "p."); ok && len(vals) > 0 {
			params[pname] = vals[len(vals)-1]
		}
	}
	f := flash{Action: action, Code: string(e.Code), Text: plainRefusal(action, e, params), Typed: maps.Clone(params)}
	if action == sendMessage {
		f.Typed = map[string]string{"body": r.PostFormValue("body")}
	}
	f.Detail = e.Message
	if e.Hint != "" {
		f.Detail += ". " + e.Hint + "."
	}
	if c, ok := e.Details["clause"].(string); ok {
		f.Clause = c
		if read, ok := e.Details["read"].(map[string]any); ok {
			f.Read = map[string]string{}
			for k, v := range read {
				f.Read[k] = textCut(v, 200)
			}
		}
	}
	wb.setFlash(w, r, roomID, f)
}

// plainRefusal says why the room refused, as a person would: the stable
// code and the CEL stay available beside it, on demand.
func plainRefusal(action string, e *errs.Error, params map[string]string) string {
	name := action
	if action == sendMessage {
		name = "the message"
	}
	switch e.Code {
	case errs.PreconditionFailed:
		if c, ok := e.Details["clause"].(string); ok {
			if words := clauseWords(c, e.Details["read"], params); words != "" {
				return fmt.Sprintf("You can't %s right now: %s.", action, words)
			}
		}
		if c, ok := e.Details["clause"].(string); ok {
			// A clause the sentence above cannot read is said as it is,
			// with the short values it read.
			s := fmt.Sprintf("You can't %s right now: it needs %s, which is not the case", action, c)
			if read, ok := e.Details["read"].(map[string]any); ok {
				var facts []string
				for _, k := range slices.Sorted(maps.Keys(read)) {
					if v := textOf(read[k]); len(v) <= 80 {
						facts = append(facts, personPath(k, params)+" is "+v)
					}
				}
				if len(facts) > 0 {
					s += " (" + strings.Join(facts, ", ") + ")"
				}
			}
			return s + "."
		}
		return fmt.Sprintf("You can't %s right now: what it requires is not the case yet.", action)
	case errs.ActionCooldown:
		for _, key := range []string{"cooldown", "timer"} {
			if t, ok := e.Details[key].(map[string]any); ok {
				until, _ := t["until"].(string)
				if until == "" {
					until, _ = t["expires_at"].(string)
				}
				if until != "" {
					return fmt.Sprintf("%s is cooling down: it can be used again %s.", action, when(until))
				}
			}
		}
		return fmt.Sprintf("%s was used a moment ago and is cooling down: try again shortly.", action)
	case errs.ActionDisabled:
		return fmt.Sprintf("%s is switched off in this room for now.", action)
	case errs.InvalidParam, errs.InvalidField:
		msg := e.Message
		if e.Hint != "" {
			msg += " (" + e.Hint + ")"
		}
		return fmt.Sprintf("Please check the form: %s.", msg)
	case errs.Forbidden, errs.ScopeDenied, errs.ReadOnlyToken:
		return fmt.Sprintf("You are not allowed to do %s in this room.", name)
	case errs.RoomBusy:
		return "The room is busy right now: try again in a moment."
	case errs.ActionNotFound:
		return fmt.Sprintf("This room has no action %q (any more): reload the page to see the ones it has.", action)
	}
	msg := e.Message
	if e.Hint != "" {
		msg += ". " + e.Hint
	}
	return fmt.Sprintf("That did not work: %s.", msg)
}

// clauseWords reads the simplest false clauses (a comparison of what the
// state holds with a literal) as a sentence; others give "".
func clauseWords(clause string, read any, params map[string]string) string {
	for _, op := range []struct{ sym, want string }{{"==", "to be"}, {"!=", "not to be"}, {">=", "to be at least"}, {"<=", "to be at most"}, {">", "to be more than"}, {"<", "to be less than"}} {
		lhs, rhs, ok := strings.Cut(clause, " "+op.sym+" ")
		if !ok || strings.ContainsAny(lhs, "()&|?") || strings.ContainsAny(rhs, "()&|?") {
			continue
		}
		lhs, rhs = strings.TrimSpace(lhs), strings.TrimSpace(rhs)
		s := fmt.Sprintf("it needs %s %s %s", personPath(lhs, params), op.want, strings.Trim(rhs, `"'`))
		if m, ok := read.(map[string]any); ok {
			if v, ok := m[lhs]; ok {
				s += ", and it is " + textCut(v, 80)
			} else {
				s += ", and it is not set"
			}
		}
		return s
	}
	return ""
}

// entryField is state.scope[key].field (or scope.key.field).
var entryField = regexp.MustCompile(`^state\.\w+(?:\[\s*([^\]]+?)\s*\]|\.([\w:-]+))\.(\w+)$`)

// personPath reads a path of the state as a person would: "the status
// of task:010" for state._shared[params.task].status invoked with
// task "task:010".
func personPath(path string, params map[string]string) string {
	if m := entryField.FindStringSubmatch(path); m != nil {
		key := m[2]
		if m[1] != "" {
			key = strings.Trim(m[1], `"'`)
			if p, ok := strings.CutPrefix(key, "params."); ok {
				if v, ok := params[p]; ok {
					key = v
				}
			}
		}
		return "the " + m[3] + " of " + key
	}
	if p, ok := strings.CutPrefix(path, "params."); ok {
		return "the " + p + " you gave"
	}
	return strings.TrimPrefix(path, "state.")
}
