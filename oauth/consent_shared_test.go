package oauth_test

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/oauth"
)

// The consent screen's "new rooms shared with me": none by default (the
// token's scope says nothing), a level up to write otherwise, remembered
// for a returning client.
func TestConsentNewSharedRooms(t *testing.T) {
	h := newHarness(t, oauth.Options{})
	alice := h.enrol("alice")
	h.room("plans", h.userID("alice"), "owner")
	c := h.register("none", "http://localhost/callback")

	page := alice.do("GET", h.authorizeURL(c, nil), nil, nil).body
	if !strings.Contains(page, `name="shared_rooms"`) || !strings.Contains(page, `<option value="none" selected>`) {
		t.Fatalf("the consent page lacks the shared-rooms choice defaulting to none:\n%s", page)
	}
	scopeOf := func(form url.Values) string {
		t.Helper()
		r := alice.postForm(h.authorizeURL(c, nil), form, nil)
		if r.status != 303 && r.status != 302 {
			t.Fatalf("consent post: %d %s", r.status, r.body)
		}
		loc, _ := url.Parse(r.header.Get("Location"))
		tok := h.exchange(c, loc.Query().Get("code")).json()
		return strings.Join(sorted(strings.Fields(tok["scope"].(string))), " ")
	}
	if got := scopeOf(url.Values{"decision": {"allow"}, "room": {"plans"}, "level_plans": {"write"}}); got != "rooms:plans:write" {
		t.Fatalf("default scope %q: shared rooms must stay off unless chosen", got)
	}
	// Stamped with the consent's time: rooms shared after it are new.
	before := time.Now().UnixMilli()
	got := scopeOf(url.Values{"decision": {"allow"}, "room": {"plans"}, "level_plans": {"write"}, "shared_rooms": {"read"}})
	stamp, ok := strings.CutPrefix(got, "rooms:plans:write shared_rooms:read:")
	if ms, err := strconv.ParseInt(stamp, 10, 64); !ok || err != nil || ms < before || ms > time.Now().UnixMilli() {
		t.Fatalf("scope with shared rooms at read: %q", got)
	}
	page = alice.do("GET", h.authorizeURL(c, nil), nil, nil).body
	if !strings.Contains(page, `<option value="read" selected>`) {
		t.Fatal("a returning client does not see its shared-rooms choice")
	}
}
