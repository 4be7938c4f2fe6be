// A rotated token is shown once. The rotation form answers with a
// redirect (POST, 303, GET), so a reload of the page that shows the token
// does not send the form again (which rotated the token again and killed
// the one just shown). The token crosses the redirect sealed in a
// short-lived cookie (package oauth/showonce, which the account page's
// new recovery codes and rotating claims use too), never in a URL; the
// room page opens it and clears it, and leaves a marker in its place, so
// that the next load says the token was shown and how to get another
// instead of showing it again.

package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate"
)

const (
	newTokenCookie = "sync_new_token"
	shownCookie    = "sync_token_shown"
	// newTokenTTL is how long a sealed token waits for its showing: the
	// redirect is followed at once, so this only bounds a stray cookie.
	newTokenTTL = 2 * time.Minute
	// maxSealedToken keeps the cookie under browsers' 4 KB: the list of
	// agents keeping room authority is cut to fit (the page says how many
	// more, and GET /rooms/:id/agents lists them). It counts the token's
	// JSON: the seal's envelope, nonce and tag and base64 make it about
	// 4/3 of this plus 80.
	maxSealedToken = 2950
)

// newToken is a rotated token as the room page shows it.
type newToken struct {
	*substrate.RotatedToken
	// MoreAgents counts the agents keeping room authority left out of
	// the cookie's list.
	MoreAgents int `json:"more,omitempty"`
}

// sealedFor binds a sealed token to its person and room: a cookie copied
// to another person's browser, or to another room's path, opens nothing.
func sealedFor(userID, roomID string) string { return userID + "\x00" + roomID }

func (wb *Web) secureCookies(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(wb.opt.PublicURL, "https:")
}

func roomCookiePath(roomID string) string { return "/rooms/" + url.PathEscape(roomID) }

// showTokenOnce answers a rotation: the new token sealed in a cookie for
// the room page, and a redirect (303) to it.
func (wb *Web) showTokenOnce(w http.ResponseWriter, r *http.Request, userID, roomID string, rt *substrate.RotatedToken) {
	t := newToken{RotatedToken: rt}
	var raw []byte
	for {
		raw, _ = json.Marshal(t)
		if len(raw) <= maxSealedToken || len(t.TokenAgentsWithRoomAuthority) == 0 {
			break
		}
		cut := *t.RotatedToken
		n := len(cut.TokenAgentsWithRoomAuthority) / 2
		t.MoreAgents += len(cut.TokenAgentsWithRoomAuthority) - n
		cut.TokenAgentsWithRoomAuthority = cut.TokenAgentsWithRoomAuthority[:n]
		t.RotatedToken = &cut
	}
	sealed, err := wb.seal.Seal(t, sealedFor(userID, roomID), newTokenTTL)
	if err != nil {
		wb.fail(w, r, err)
		return
	}
	path := roomCookiePath(roomID)
	http.SetCookie(w, &http.Cookie{Name: newTokenCookie, Value: sealed, Path: path,
		MaxAge: int(newTokenTTL / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: wb.secureCookies(r)})
	http.SetCookie(w, &http.Cookie{Name: shownCookie, Value: "", Path: path, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, path+"#new-token", http.StatusSeeOther)
}

// takeNewToken puts the token the last rotation left for this person and
// room in data (NewToken), once. Its cookie is cleared and a marker left,
// so that the next load says instead that it was shown (TokenShown); a
// token that cannot be opened (sealed by a process with another
// ShowOnceKey, too old, another person's) is TokenNotShown: the token was
// rotated, and only another rotation shows one.
func (wb *Web) takeNewToken(w http.ResponseWriter, r *http.Request, userID, roomID string, data map[string]any) {
	path := roomCookiePath(roomID)
	if c, err := r.Cookie(newTokenCookie); err == nil {
		http.SetCookie(w, &http.Cookie{Name: newTokenCookie, Value: "", Path: path, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
		t, ok := wb.openToken(c.Value, userID, roomID)
		if !ok {
			data["TokenNotShown"] = true
			return
		}
		data["NewToken"] = t
		http.SetCookie(w, &http.Cookie{Name: shownCookie, Value: t.Which, Path: path, MaxAge: 600, HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: wb.secureCookies(r)})
		return
	}
	if c, err := r.Cookie(shownCookie); err == nil {
		http.SetCookie(w, &http.Cookie{Name: shownCookie, Value: "", Path: path, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
		if c.Value == "room" || c.Value == "view" {
			data["TokenShown"] = c.Value
		}
	}
}

func (wb *Web) openToken(value, userID, roomID string) (*newToken, bool) {
	var t newToken
	if !wb.seal.Open(value, sealedFor(userID, roomID), &t) || t.RotatedToken == nil || t.Room != roomID {
		return nil, false
	}
	return &t, true
}
