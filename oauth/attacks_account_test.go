package oauth_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/descope/virtualwebauthn"

	"github.com/syncsubstrate/sync/oauth"
	"github.com/syncsubstrate/sync/oauth/oauthtest"
	"github.com/syncsubstrate/sync/substrate"
)

// Attacks through the account page's forms (the lobby page's forms post
// to the same routes).

// The last owner demotes herself with the share form (issue 41, 6): she
// named herself with a lesser role, and the room was left with no owner.
// Refused with a message naming the way out in the page's words; the
// lobby page's form (next=/) is refused alike, and she is still owner.
func TestAttackShareFormDemotesLastOwner(t *testing.T) {
	h := newHarness(t, oauth.Options{})
	alice := h.enrol("alice")
	if r := alice.postForm("/account/rooms/create", url.Values{"room": {"garden"}}, nil); r.status != 303 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	for _, next := range []string{"", "/"} {
		for _, role := range []string{"collaborator", "participant", "observer"} {
			form := url.Values{"room": {"garden"}, "username": {"alice"}, "access": {role}}
			if next != "" {
				form.Set("next", next)
			}
			r := alice.postForm("/account/rooms/share", form, nil)
			if r.status != 409 || !strings.Contains(r.body, "keeps an owner") || !strings.Contains(r.body, "Share form") || !strings.Contains(r.body, "Delete") {
				t.Fatalf("HOLE: the only owner made herself %s (next %q): %d %s", role, next, r.status, r.body)
			}
		}
	}
	var access string
	if err := h.db.QueryRow(context.Background(), `SELECT access FROM smcp_user_rooms WHERE user_id = $1 AND room_id = 'garden'`, h.userID("alice")).Scan(&access); err != nil || access != "owner" {
		t.Fatalf("HOLE: after the refusals alice is %q (%v)", access, err)
	}
	if page := alice.do("GET", "/account", nil, nil).body; !strings.Contains(page, "you are owner") {
		t.Fatal("the account page no longer shows her as owner")
	}
}

// cookieOf returns the value of the browser's cookie name for path.
func (b *browser) cookieOf(path, name string) string {
	u, _ := url.Parse(b.h.base + path)
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

// giveCookie puts a cookie copied from another browser into b's.
func (b *browser) giveCookie(path, name, value string) {
	u, _ := url.Parse(b.h.base + path)
	b.c.Jar.SetCookies(u, []*http.Cookie{{Name: name, Value: value, Path: path}})
}

// recoverWith adds a passkey to username's account with a recovery code,
// through the real endpoints, on a fresh browser.
func (h *harness) recoverWith(username, code string) reply {
	lost := h.browser()
	r := lost.postJSON("/webauthn/recover/begin", map[string]string{"username": username, "code": code})
	if r.status != 200 {
		return r
	}
	opts, err := virtualwebauthn.ParseAttestationOptions(r.body)
	if err != nil {
		h.t.Fatal(err)
	}
	lost.auth = virtualwebauthn.NewAuthenticatorWithOptions(virtualwebauthn.AuthenticatorOptions{UserHandle: []byte(opts.UserID)})
	lost.cred = oauthtest.NewCredential()
	att := virtualwebauthn.CreateAttestationResponse(lost.rp, lost.auth, lost.cred, *opts)
	lost.auth.AddCredential(lost.cred)
	return lost.postJSON("/webauthn/add/finish", att)
}

// shownCodes are the recovery codes a page shows.
func shownCodes(page string) []string {
	m := regexp.MustCompile(`id="codes-text">([^<]*)</pre>`).FindStringSubmatch(page)
	if m == nil {
		return nil
	}
	return strings.Fields(m[1])
}

// A reload of the page showing new recovery codes sent the form again
// (issue 41, 9c's flaw on the account page): new codes were made and the
// ones just shown were dead. Now the form redirects (303, nothing secret
// in the answer or its URL), the page shows the codes once, a reload
// shows them not and makes none, and the codes shown still work once.
// Another person's browser given the cookie opens nothing.
func TestAttackReloadNewRecoveryCodes(t *testing.T) {
	h := newHarness(t, oauth.Options{})
	alice := h.enrol("alice")
	bob := h.enrol("bob")
	codesOf := func() string {
		var n string
		if err := h.db.QueryRow(context.Background(), `SELECT string_agg(encode(code_hash, 'hex'), ',' ORDER BY code_hash) FROM smcp_recovery_codes WHERE user_id = $1`, h.userID("alice")).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	r := alice.postForm("/account/recovery", url.Values{}, nil)
	if r.status != 303 || r.header.Get("Location") != "/account/recovery" || strings.Contains(r.body, "codes-text") {
		t.Fatalf("HOLE: new recovery codes answered in the POST itself (a reload makes new ones): %d %q %s", r.status, r.header.Get("Location"), r.body)
	}
	sealed := alice.cookieOf("/account/recovery", "sync_new_codes")
	// Bob, given Alice's cookie, sees nothing of hers.
	bob.giveCookie("/account/recovery", "sync_new_codes", sealed)
	if page := bob.do("GET", "/account/recovery", nil, nil).body; strings.Contains(page, "codes-text") {
		t.Fatalf("HOLE: another person's browser opened the codes: %s", page)
	}
	page := alice.do("GET", "/account/recovery", nil, nil)
	shown := shownCodes(page.body)
	if page.status != 200 || len(shown) != 10 {
		t.Fatalf("the codes are not shown after the redirect: %d %v %s", page.status, shown, page.body)
	}
	before := codesOf()
	again := alice.do("GET", "/account/recovery", nil, nil)
	if again.status != 200 || strings.Contains(again.body, "codes-text") || strings.Contains(again.body, shown[0]) || !strings.Contains(again.body, "Make new recovery codes") {
		t.Fatalf("HOLE: a reload shows the codes again, or does not say how to get new ones: %d %s", again.status, again.body)
	}
	if codesOf() != before {
		t.Fatal("HOLE: a reload made new codes")
	}
	if r := h.recoverWith("alice", shown[0]); r.status != 200 {
		t.Fatalf("a code shown does not work after the reload: %d %s", r.status, r.body)
	}
	if r := h.recoverWith("alice", shown[0]); r.status != 401 {
		t.Fatalf("HOLE: a code worked twice: %d %s", r.status, r.body)
	}
}

// A claim with rotation answered with the new room token in the POST's
// own answer: a reload sent the claim again with the pasted token, dead
// by then, and failed confusingly. Now: 303, the token shown once, a
// reload shows it not and claims nothing, and says how to get another;
// another person's browser given the cookie opens nothing.
func TestAttackReloadClaimWithRotation(t *testing.T) {
	h := newHarness(t, oauth.Options{})
	alice := h.enrol("alice")
	bob := h.enrol("bob")
	made, err := h.svc.CreateRoom(context.Background(), substrate.CreateRoomRequest{ID: "leaked-room"})
	if err != nil {
		t.Fatal(err)
	}
	r := alice.postForm("/account/rooms/claim", url.Values{"room": {"leaked-room"}, "token": {made.Token}, "rotate": {"1"}, "next": {"/"}}, nil)
	if r.status != 303 || r.header.Get("Location") != "/account/rooms/claimed" || strings.Contains(r.body, "room_") {
		t.Fatalf("HOLE: the new room token answered in the POST itself (a reload claims again with a dead token): %d %q %s", r.status, r.header.Get("Location"), r.body)
	}
	sealed := alice.cookieOf("/account/rooms/claimed", "sync_claimed_token")
	bob.giveCookie("/account/rooms/claimed", "sync_claimed_token", sealed)
	if page := bob.do("GET", "/account/rooms/claimed", nil, nil).body; strings.Contains(page, `id="room-token"`) {
		t.Fatalf("HOLE: another person's browser opened the token: %s", page)
	}
	page := alice.do("GET", "/account/rooms/claimed", nil, nil)
	m := regexp.MustCompile(`id="room-token">(room_[^<]+)<`).FindStringSubmatch(page.body)
	if page.status != 200 || m == nil || !strings.Contains(page.body, `href="/"`) {
		t.Fatalf("the new token is not shown after the redirect: %d %s", page.status, page.body)
	}
	if _, err := h.svc.AuthenticateIn(context.Background(), "leaked-room", m[1]); err != nil {
		t.Fatalf("the token shown does not work: %v", err)
	}
	again := alice.do("GET", "/account/rooms/claimed", nil, nil)
	if again.status != 200 || strings.Contains(again.body, m[1]) || !strings.Contains(again.body, "Rotate") {
		t.Fatalf("HOLE: a reload shows the token again, or does not say how to get another: %d %s", again.status, again.body)
	}
	if _, err := h.svc.AuthenticateIn(context.Background(), "leaked-room", m[1]); err != nil {
		t.Fatalf("HOLE: a reload rotated the token shown: %v", err)
	}
}
