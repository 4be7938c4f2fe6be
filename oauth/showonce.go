package oauth

import (
	"net/http"
	"time"
)

// A secret made by an account form (new recovery codes, a rotating
// claim's room token) is shown once, after a redirect (POST, 303, GET):
// the answer to the POST itself, which a reload sends again, would make
// another and kill the one shown. It crosses the redirect sealed in a
// short-lived cookie (package showonce) bound to the person, on the
// showing page's path only, never in a URL; the page clears it as it
// shows it, so a reload shows only how to get another.

const (
	codesPath     = "/account/recovery"
	codesCookie   = "sync_new_codes"
	claimedPath   = "/account/rooms/claimed"
	claimedCookie = "sync_claimed_token"
	// onceTTL bounds a cookie whose redirect was never followed.
	onceTTL = 2 * time.Minute
)

// showOnce seals v for bind into the cookie name on path, for the page
// the form redirects to. False if it could not be sealed.
func (wb *web) showOnce(w http.ResponseWriter, name, path, bind string, v any) bool {
	sealed, err := wb.once.Seal(v, bind, onceTTL)
	if err != nil {
		wb.s.log.Error("seal a secret to show once", "cookie", name, "err", err)
		return false
	}
	http.SetCookie(w, &http.Cookie{Name: name, Value: sealed, Path: path, MaxAge: int(onceTTL / time.Second),
		HttpOnly: true, Secure: wb.secure, SameSite: http.SameSiteStrictMode})
	return true
}

// takeOnce opens the cookie name into v and clears it. False if there was
// none, or it would not open (another person's, too old, sealed with
// another key).
func (wb *web) takeOnce(w http.ResponseWriter, r *http.Request, name, path, bind string, v any) bool {
	c, err := r.Cookie(name)
	if err != nil {
		return false
	}
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: path, MaxAge: -1, HttpOnly: true, Secure: wb.secure, SameSite: http.SameSiteStrictMode})
	return wb.once.Open(c.Value, bind, v)
}
