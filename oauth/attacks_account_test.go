package oauth_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/oauth"
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
