package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/lobby/web"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/activity"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/httpmw"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// Attacks on the people's pages that must fail.

// Nobody reads a room that is not theirs: not by its page, not by its live
// stream; the answer does not even say the room exists.
func TestAttackOtherPersonsRoom(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "mallory")
	s.write("_shared", "plan", `"the secret plan"`)
	code, _, body := s.get("mallory", "/rooms/lab")
	if code != http.StatusNotFound || strings.Contains(body, "secret plan") {
		t.Fatalf("HOLE: mallory opens alice's room: %d %s", code, body)
	}
	if code, _, body := s.get("mallory", "/rooms/nosuchroom"); code != http.StatusNotFound || !strings.Contains(body, "You have no room by that name") {
		t.Fatalf("a missing room reads differently from another's: %d %s", code, body)
	}
	if code, _, _ := s.get("mallory", "/live/rooms/lab"); code != http.StatusNotFound {
		t.Fatalf("HOLE: mallory follows alice's room live: %d", code)
	}
	// Signed out: sent to sign in, and back.
	code, h, _ := s.get("", "/rooms/lab")
	if code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/signin?next=%2Frooms%2Flab") {
		t.Fatalf("signed out: %d %s", code, h.Get("Location"))
	}
	if code, h, _ := s.get("", "/"); code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/signin") {
		t.Fatalf("lobby signed out: %d %s", code, h.Get("Location"))
	}
}

// A person shared the room as an observer reads what an observer may:
// communal state, not an agent's private scope, and no entry its gate hides.
func TestAttackObserverReadsOnlyWhatObserversMay(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "olga")
	ctx := context.Background()
	s.share("olga", "observer")
	s.join("carol", "Carol")
	s.write("_shared", "board", `"public board"`)
	s.write("carol", "diary", `"carol's private diary"`)
	if _, err := s.svc.WriteState(ctx, s.admin, "lab", []substrate.Write{{Scope: "_shared", Key: "hidden", Value: []byte(`"gated away"`), Enabled: `self == "carol"`}}, false); err != nil {
		t.Fatal(err)
	}
	code, _, body := s.get("olga", "/rooms/lab")
	if code != 200 || !strings.Contains(body, "public board") {
		t.Fatalf("olga's page: %d %s", code, body)
	}
	for _, secret := range []string{"private diary", "gated away"} {
		if strings.Contains(body, secret) {
			t.Errorf("HOLE: an observer's page shows %q", secret)
		}
	}
	// The owner reads the whole room.
	if _, _, body := s.get("alice", "/rooms/lab"); !strings.Contains(body, "private diary") {
		t.Errorf("the owner's page lacks the private scope")
	}
}

// A view-token link reads the room without an account, and nothing else:
// not another room, not with a room or agent token in its place; its pages
// send no referrer (the token is in the URL).
func TestAttackViewTokenLink(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	s.write("_shared", "board", `"public board"`)
	code, h, body := s.get("", "/rooms/lab?view="+s.room.ViewToken)
	if code != 200 || !strings.Contains(body, "public board") || !strings.Contains(body, "read-only") {
		t.Fatalf("view link: %d %s", code, body)
	}
	if h.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("view link page Referrer-Policy %q", h.Get("Referrer-Policy"))
	}
	other, err := s.svc.CreateRoom(context.Background(), substrate.CreateRoomRequest{ID: "other"})
	if err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{
		"another room's view token": "/rooms/lab?view=" + other.ViewToken,
		"the room token":            "/rooms/lab?view=" + s.room.Token,
		"a made-up token":           "/rooms/lab?view=view_nonsense",
		"the view token elsewhere":  "/rooms/other?view=" + s.room.ViewToken,
	} {
		if code, _, body := s.get("", path); code != http.StatusNotFound || strings.Contains(body, "public board") {
			t.Errorf("HOLE: %s opens a page: %d", name, code)
		}
	}
}

// Values are data, never markup: a value, a key, an agent's name or a
// message cannot put script or HTML on the page.
func TestAttackMarkupInRoomData(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	ctx := context.Background()
	s.write("_shared", `<img src=x onerror=alert(1)>`, `"<script>alert(2)</script>"`)
	if _, err := s.svc.Join(ctx, s.admin, "lab", substrate.JoinRequest{ID: "evil", Name: `</td><script>alert(3)</script>`}); err != nil {
		t.Fatal(err)
	}
	_, _, body := s.get("alice", "/rooms/lab")
	for _, bad := range []string{"<script>alert", "<img src=x", "</td><script>"} {
		if strings.Contains(body, bad) {
			t.Errorf("HOLE: the page carries %q unescaped", bad)
		}
	}
}

// One person cannot hold the server's connections open without bound:
// live streams beyond MaxStreams are refused, and a closed one frees its
// place.
func TestAttackLiveStreamsAreBounded(t *testing.T) {
	s := newSite(t, web.Options{MaxStreams: 2}, "alice")
	s.stream("alice", "/live/rooms/lab", "")
	s.stream("alice", "/live/rooms/lab", "")
	if code, _, _ := s.get("alice", "/live/rooms/lab"); code != http.StatusTooManyRequests {
		t.Fatalf("HOLE: a third stream: %d", code)
	}
}

// One client address cannot hold streams open without bound by bringing
// many credentials: view tokens of rooms it made (room creation is open
// by default) each have their own MaxStreams, the address has
// MaxStreamsPerAddress.
func TestAttackLiveStreamsAreBoundedPerAddress(t *testing.T) {
	s := newSite(t, web.Options{MaxStreams: 2, MaxStreamsPerAddress: 5}, "alice")
	opened := 0
	for i := 0; opened < 5; i++ {
		room, err := s.svc.CreateRoom(context.Background(), substrate.CreateRoomRequest{ID: fmt.Sprintf("r%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 2 && opened < 5; j++ {
			s.stream("", "/live/rooms/"+room.ID+"?view="+room.ViewToken, "")
			opened++
		}
	}
	room, err := s.svc.CreateRoom(context.Background(), substrate.CreateRoomRequest{ID: "one-more"})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, _ := s.get("", "/live/rooms/one-more?view="+room.ViewToken); code != http.StatusTooManyRequests {
		t.Fatalf("HOLE: a sixth stream from one address with a fresh view link: %d", code)
	}
}

// The scrubber replays every scope, private ones included: only the room's
// owners may use it, not an observer nor a view link. The console reads
// with the reader's authority, so an observer cannot evaluate its way into
// a private scope.
func TestAttackScrubberAndConsoleKeepAuthority(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "olga")
	s.share("olga", "observer")
	s.join("carol", "Carol")
	s.write("carol", "diary", `"carol's private diary"`)
	at := s.seq()
	for who, path := range map[string]string{
		"olga":      "/rooms/lab?at=" + at,
		"view link": "/rooms/lab?view=" + s.room.ViewToken + "&at=" + at,
	} {
		person := "olga"
		if who == "view link" {
			person = ""
		}
		code, _, body := s.get(person, path)
		if code != http.StatusForbidden || strings.Contains(body, "private diary") {
			t.Errorf("HOLE: %s replays the room: %d", who, code)
		}
	}
	// (A view link reads what its view token reads, the whole room; it is
	// the room's read-only link, given by its owner.)
	if _, _, body := s.get("olga", "/rooms/lab?eval="+url.QueryEscape("state.carol.diary")); strings.Contains(body, "private diary") || !strings.Contains(body, `id="eval-error"`) {
		t.Errorf("HOLE: an observer evaluates its way into a private scope: %s", body)
	}
}

// Acting from the pages is for people who may act in the room, from the
// room's own pages: not observers, not strangers, not a view link, not a
// form posted from another site; and nothing is written when refused.
func TestAttackActingFromThePage(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "olga", "mallory")
	ctx := context.Background()
	s.share("olga", "observer")
	if _, err := s.svc.RegisterAction(ctx, s.admin, "lab", substrate.ActionDef{ID: "wipe", Writes: []substrate.WriteTemplate{{Key: "wiped", Value: []byte(`true`)}}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		who, person string
		header      []string
		want        int
	}{
		{"an observer", "olga", nil, http.StatusForbidden},
		{"a stranger", "mallory", nil, http.StatusNotFound},
		{"nobody signed in", "", nil, http.StatusUnauthorized},
		{"a cross-site form", "alice", []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"another origin", "alice", []string{"Sec-Fetch-Site", "", "Origin", "https://evil.example"}, http.StatusForbidden},
	} {
		code, _ := s.post(c.person, "/web/rooms/lab/invoke/wipe", nil, c.header...)
		if code != c.want {
			t.Errorf("HOLE: %s invokes: %d, want %d", c.who, code, c.want)
		}
		code, _ = s.post(c.person, "/web/rooms/lab/message", url.Values{"body": {"spam"}}, c.header...)
		if code != c.want {
			t.Errorf("HOLE: %s sends a message: %d, want %d", c.who, code, c.want)
		}
	}
	if v := s.value("_shared", "wiped"); v != "" {
		t.Fatalf("HOLE: a refused invocation wrote %s", v)
	}
	if _, _, page := s.get("olga", "/rooms/lab"); strings.Contains(page, `action="/web/rooms/lab/invoke/wipe"`) || strings.Contains(page, `id="compose"`) {
		t.Error("an observer's page offers forms it cannot use")
	}
	if _, _, page := s.get("", "/rooms/lab?view="+s.room.ViewToken); strings.Contains(page, "/invoke/") || strings.Contains(page, `id="compose"`) {
		t.Error("a view link's page offers forms")
	}
}

// A view's markdown is the registrar's text on the reader's page: no raw
// HTML and no script links get through.
func TestAttackMarkdownSurfaceCarriesNoScript(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	md := "Hello <script>alert(1)</script> <img src=x onerror=alert(2)> [click](javascript:alert(3)) <a href=\"javascript:alert(4)\">x</a>"
	raw, _ := json.Marshal(md)
	if _, err := s.svc.RegisterView(context.Background(), s.admin, "lab", substrate.ViewDef{ID: "note", Expr: string(raw), Render: []byte(`{"type": "markdown"}`)}); err != nil {
		t.Fatal(err)
	}
	_, _, body := s.get("alice", "/rooms/lab")
	if !strings.Contains(body, `id="surface-note"`) {
		t.Fatalf("no markdown surface: %s", body)
	}
	// (The views section shows the value as escaped text, which is fine;
	// what must not appear is live markup.)
	for _, bad := range []string{"<script>alert", "<img", `href="javascript:`, "href=javascript:", `href="javascript&#58;`} {
		if strings.Contains(body, bad) {
			t.Errorf("HOLE: the markdown surface carries %q", bad)
		}
	}
}

// The loom page keeps the loom's and the room's authority: a stranger sees
// nothing, an observer and a view link read but run nothing, a participant
// without loom permission is refused by the loom itself, and node content
// is text, never markup.
func TestAttackLoomPage(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "olga", "paul", "mallory")
	ctx := context.Background()
	for who, access := range map[string]string{"olga": "observer", "paul": "participant"} {
		if err := s.lob.ShareRoom(ctx, "user_alice", "lab", "user_"+who, access); err != nil {
			t.Fatal(err)
		}
	}
	if code, body := s.post("alice", "/web/rooms/lab/loom", url.Values{"commands": {`→ new tree "t" "<script>alert(1)</script> root"`}}); code != 200 || strings.Contains(body, "<script>alert") {
		t.Fatalf("planting: %d", code)
	}
	if code, _, body := s.get("mallory", "/web/rooms/lab/loom"); code != http.StatusNotFound || strings.Contains(body, "root") {
		t.Errorf("HOLE: a stranger reads the loom: %d", code)
	}
	for who, person := range map[string]string{"an observer": "olga", "a view link": ""} {
		path := "/web/rooms/lab/loom?node=1"
		if person == "" {
			path += "&view=" + s.room.ViewToken
		}
		code, _, body := s.get(person, path)
		if code != 200 || !strings.Contains(body, "root") || strings.Contains(body, `method="post"`) {
			t.Errorf("%s's loom page: %d, forms offered: %v", who, code, strings.Contains(body, `method="post"`))
		}
		if strings.Contains(body, "<script>alert") {
			t.Errorf("HOLE: node content as markup on %s's page", who)
		}
	}
	if code, _ := s.post("olga", "/web/rooms/lab/loom", url.Values{"commands": {`→ add "observer was here"`}}); code != http.StatusForbidden {
		t.Errorf("HOLE: an observer runs loom commands: %d", code)
	}
	if code, _ := s.post("alice", "/web/rooms/lab/loom", url.Values{"commands": {`→ add "x"`}}, "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
		t.Errorf("HOLE: a cross-site form runs loom commands: %d", code)
	}
	code, body := s.post("paul", "/web/rooms/lab/loom", url.Values{"commands": {`→ switch to 1` + "\n" + `→ add "paul was here"`}})
	if code/100 == 2 && !strings.Contains(body, "✗") {
		t.Errorf("HOLE: a participant without loom_write adds to the tree: %d", code)
	}
	if _, _, page := s.get("alice", "/web/rooms/lab/loom?node=1"); strings.Contains(page, "paul was here") || strings.Contains(page, "observer was here") {
		t.Error("HOLE: a refused loom command wrote")
	}
}

// Bad input gets a 4xx page that says what was wrong, never a 500.
func TestAttackBadInputIsA4xx(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	for _, path := range []string{
		"/rooms/lab?at=999999",
		"/rooms/lab?at=-3",
		"/rooms/lab?eval=" + url.QueryEscape(strings.Repeat("1 + ", 20_000)+"1"),
		"/web/rooms/lab/loom?node=x",
		"/web/rooms/lab/loom?doc=" + url.QueryEscape(strings.Repeat("d", 500)),
	} {
		if code, _, body := s.get("alice", path); code/100 != 4 && !(code == 200 && strings.Contains(body, `id="eval-error"`)) {
			t.Errorf("%s: %d", path[:min(len(path), 60)], code)
		}
	}
	for path, form := range map[string]url.Values{
		"/web/rooms/lab/invoke/nosuchaction": nil,
		"/web/rooms/nosuchroom/invoke/x":     nil,
		"/web/rooms/lab/message":             {"body": {strings.Repeat("x", 100_000)}},
		"/web/rooms/lab/loom":                {"op": {"explode"}, "node": {"1"}},
	} {
		// A form the room refuses answers with a redirect to the page,
		// which says why at the form (never a 500, nothing applied).
		if code, _, page := s.postFollow("alice", path, form); code/100 != 4 && !(code == http.StatusSeeOther && strings.Contains(page, `class="feedback refused"`)) {
			t.Errorf("POST %s: %d", path, code)
		}
	}
}

// A person who leaves the room hears no more of it on a stream opened
// before: the next change ends the stream with "gone".
func TestAttackLiveStreamEndsWhenAccessEnds(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "bob")
	s.share("bob", "observer")
	ev := s.stream("bob", "/live/rooms/lab", "")
	s.liveSettled()
	if err := s.lob.LeaveRoom(context.Background(), "user_bob", "lab"); err != nil {
		t.Fatal(err)
	}
	s.write("_shared", "after", `"x"`)
	select {
	case e := <-ev:
		if !strings.Contains(e, "event: gone") {
			t.Fatalf("HOLE: bob, who left, still hears the room: %q", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream neither ended nor said gone")
	}
}

// The room page shows a loom scope only to a reader the loom would let run
// → view (→ read for documents), as every read path does (issue 25 item
// 3): a participant whose agent is denied loom_aware and doc_read sees
// neither nodes nor documents there.
func TestAttackRoomPageFollowsLoomPermissions(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "paul")
	ctx := context.Background()
	s.share("paul", "participant")
	if _, err := loom.Of(s.svc).Run(ctx, s.admin, "lab", `→ new tree "t" "NODE-SECRET root"`+"\n"+`→ write doc:"plan" append "DOC-SECRET line"`); err != nil {
		t.Fatal(err)
	}
	// Paul's agent (paul:web) comes with his first command from the page.
	if code, body := s.post("paul", "/web/rooms/lab/loom", url.Values{"commands": {"→ view 1"}}); code != 200 || !strings.Contains(body, "NODE-SECRET") {
		t.Fatalf("paul's first loom command: %d", code)
	}
	if _, _, body := s.get("paul", "/rooms/lab?internals=1"); !strings.Contains(body, "DOC-SECRET") || !strings.Contains(body, "_loom.doc") {
		t.Fatalf("with the default permissions paul's room page lacks the loom documents")
	}
	if _, err := loom.Of(s.svc).Run(ctx, s.admin, "lab", "→ deny paul:web loom_aware doc_read"); err != nil {
		t.Fatal(err)
	}
	if code, body := s.post("paul", "/web/rooms/lab/loom", url.Values{"commands": {"→ view 1"}}); code/100 == 2 && !strings.Contains(body, "✗") {
		t.Fatalf("→ view still runs for paul: %d", code)
	}
	code, _, body := s.get("paul", "/rooms/lab?internals=1")
	if code != 200 {
		t.Fatalf("paul's room page: %d", code)
	}
	for _, secret := range []string{"NODE-SECRET", "DOC-SECRET", `id="scope-_loom`, `id="internal-_loom`} {
		if strings.Contains(body, secret) {
			t.Errorf("HOLE: the room page shows paul, denied the loom, %q", secret)
		}
	}
	// The loom page reads for him without moving his agent, with his
	// permissions all the same.
	for _, path := range []string{"/web/rooms/lab/loom?node=1", "/web/rooms/lab/loom?doc=plan"} {
		if _, _, body := s.get("paul", path); strings.Contains(body, "NODE-SECRET") || strings.Contains(body, "DOC-SECRET") {
			t.Errorf("HOLE: %s shows paul, denied the loom, its content", path)
		}
	}
	if _, _, body := s.get("alice", "/rooms/lab?internals=1"); !strings.Contains(body, "DOC-SECRET") {
		t.Error("the owner's room page lacks the loom documents")
	}
}

// A model's thinking shows on the owner's room page folded (a details
// element, closed), and not at all through a view link (issue 25 item 6).
func TestAttackThinkingOnThePages(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	ctx := context.Background()
	ag, err := s.svc.Join(ctx, s.admin, "lab", substrate.JoinRequest{ID: "carol", Name: "Carol"})
	if err != nil {
		t.Fatal(err)
	}
	carol, err := s.svc.Authenticate(ctx, ag.Token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loom.Of(s.svc).Run(ctx, carol, "lab", "→ think\nTHOUGHT-SECRET <b>about</b> the scene\n←\n→ stash \"plan\" \"STASHED words\""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.svc.WriteState(ctx, carol, "lab", []substrate.Write{{Scope: "carol", Key: "note", Value: json.RawMessage(`"CAROL-NOTE"`)}}, true); err != nil {
		t.Fatal(err)
	}
	_, _, owner := s.get("alice", "/rooms/lab?internals=1") // thinking is an internal
	i := strings.Index(owner, "THOUGHT-SECRET")
	if i < 0 {
		t.Fatal("the owner's page lacks carol's thinking")
	}
	open := strings.LastIndex(owner[:i], `<details class="thought">`)
	if open < 0 || strings.Contains(owner[open:i], "</details>") || !strings.Contains(owner[open:i], "<summary>thinking (") {
		t.Fatalf("carol's thinking is not folded on the owner's page: %s", owner[max(0, i-300):i])
	}
	if strings.Contains(owner, "<b>about</b>") {
		t.Error("HOLE: thinking drawn as markup")
	}
	_, _, view := s.get("", "/rooms/lab?internals=1&view="+s.room.ViewToken)
	if strings.Contains(view, "THOUGHT-SECRET") {
		t.Error("HOLE: a view link reads carol's thinking")
	}
	// A stash is carol's working memory, read by carol and room
	// authority only (substrate/loom: TestAttackMemoryReadOnlyByItsAgent);
	// the rest of her scope a view link reads.
	if strings.Contains(view, "STASHED words") {
		t.Error("HOLE: a view link reads carol's stash")
	}
	if !strings.Contains(view, "CAROL-NOTE") {
		t.Error("a view link no longer reads carol's scope")
	}
}

// A view token's stream ends when the token stops being valid. Today the
// one way a view token is revoked is deleting its room (rotation, which
// isolates the token's own re-check, is tested with it): the stream
// opened with it says "gone" and ends, rather than following a room that
// no longer exists.
func TestAttackLiveViewStreamEndsWhenRoomDeleted(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	ev := s.stream("", "/live/rooms/lab?view="+s.room.ViewToken, "")
	s.liveSettled()
	if err := s.lob.DeleteRoom(context.Background(), "user_alice", "lab"); err != nil {
		t.Fatal(err)
	}
	select {
	case e, ok := <-ev:
		if ok && !strings.Contains(e, "event: gone") {
			t.Fatalf("HOLE: a view token of a deleted room still hears it: %q", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the view token's stream neither ended nor said gone after its room was deleted")
	}
}

// Issue 25 item 8 (and issue 35 item 1): a leaked view token read the room
// for as long as it existed. An owner rotates it (or the room token) from
// the room page; the old one is refused at once, and a live stream open
// with it ends at the rotation. Nobody but an owner may rotate.
func TestAttackRotatedViewTokenEndsLiveStream(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "bob")
	s.share("bob", "collaborator")
	s.write("_shared", "board", `"public board"`)
	// Alice has acted from the page before (her web agent exists), so the
	// rotation is the only change the stream sees.
	if code, _ := s.post("alice", "/web/rooms/lab/message", url.Values{"body": {"hello"}}); code != http.StatusSeeOther {
		t.Fatalf("alice's message: %d", code)
	}
	ev := s.stream("", "/live/rooms/lab?view="+s.room.ViewToken, "")
	s.liveSettled()

	if _, _, body := s.get("bob", "/rooms/lab"); strings.Contains(body, "tokens/rotate") {
		t.Fatal("a collaborator's page offers token rotation")
	}
	for _, who := range []string{"bob", ""} {
		if code, body := s.post(who, "/web/rooms/lab/tokens/rotate", url.Values{"which": {"view"}}); code/100 != 4 || strings.Contains(body, "view_") {
			t.Fatalf("HOLE: %q rotated the view token: %d", who, code)
		}
	}
	if code, _ := s.post("alice", "/web/rooms/lab/tokens/rotate", url.Values{"which": {"view"}}, "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
		t.Fatalf("HOLE: a cross-site form rotated the token: %d", code)
	}
	if code, body := s.post("alice", "/web/rooms/lab/tokens/rotate", url.Values{"which": {"everything"}}); code != 400 || !strings.Contains(body, "which") {
		t.Fatalf("which=everything: %d", code)
	}
	if _, _, body := s.get("alice", "/rooms/lab"); !strings.Contains(body, `action="/web/rooms/lab/tokens/rotate"`) {
		t.Fatal("the owner's page has no rotation form")
	}
	code, _, body := s.postFollow("alice", "/web/rooms/lab/tokens/rotate", url.Values{"which": {"view"}})
	i := strings.Index(body, "view_")
	if code != http.StatusSeeOther || !strings.Contains(body, "New view token") || i < 0 {
		t.Fatalf("rotating the view token: %d %s", code, body)
	}
	newView := body[i : i+strings.IndexByte(body[i:], '<')]
	select {
	case e := <-ev:
		if !strings.Contains(e, "event: gone") {
			t.Fatalf("HOLE: the rotated view token's stream still hears the room: %q", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the rotated view token's stream neither ended nor said gone")
	}
	if code, _, body := s.get("", "/rooms/lab?view="+s.room.ViewToken); code != http.StatusNotFound || strings.Contains(body, "public board") {
		t.Fatalf("HOLE: the old view link still opens the room: %d", code)
	}
	if code, _, body := s.get("", "/rooms/lab?view="+newView); code != 200 || !strings.Contains(body, "public board") {
		t.Fatalf("the new view link: %d", code)
	}
	// The room token too; the audit names the owner's agent, and the page
	// names the token agent holding "*" that the old token could have
	// made (not the owner's own agent, which also holds it).
	ctx := context.Background()
	if _, err := s.svc.Join(ctx, substrate.RoomPrincipal("lab"), "lab", substrate.JoinRequest{ID: "mole", Name: "mole"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.svc.UpdateAgent(ctx, substrate.RoomPrincipal("lab"), "lab", "mole", substrate.AgentUpdate{Grants: &[]string{"*"}}); err != nil {
		t.Fatal(err)
	}
	code, _, body = s.postFollow("alice", "/web/rooms/lab/tokens/rotate", url.Values{"which": {"room"}})
	if code != http.StatusSeeOther {
		t.Fatalf("rotating the room token: %d", code)
	}
	if i := strings.Index(body, `id="authority-agents"`); i < 0 || !strings.Contains(body[i:], "mole") || strings.Contains(body[i:strings.Index(body[i:], "</p>")+i], "alice:web") {
		t.Fatalf("HOLE: the page does not name the agents that keep room authority: %s", body)
	}
	if _, err := s.svc.Authenticate(context.Background(), s.room.Token); err == nil {
		t.Fatal("HOLE: the old room token still authenticates")
	}
	audit, err := s.svc.ReadState(context.Background(), substrate.RoomPrincipal("lab"), "lab", substrate.ReadQuery{Scope: "_audit", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(audit.Entries)
	if n := strings.Count(string(raw), `token_rotate`); n != 2 || !strings.Contains(string(raw), `alice:web`) {
		t.Fatalf("%d rotations audited: %s", n, raw)
	}
}

// Issue 25 item 7: in an open room anyone could take bob's web agent id
// (bob:web) under his name, and bob became bob:web-2. Nobody joins under an
// id with ":" without the room token; the room page says which account
// drives each agent (an agent the room token named bob:web-2 shows none);
// a person's agent gets no token and keeps its account's name.
func TestAttackImpersonatedPersonInOpenRoom(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "bob")
	ctx := context.Background()
	room, err := s.svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "square", OpenJoin: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.lob.ClaimRoom(ctx, "user_alice", "square", room.Token, false); err != nil {
		t.Fatal(err)
	}
	if err := s.lob.ShareRoom(ctx, "user_alice", "square", "user_bob", "participant"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.svc.Join(ctx, nil, "square", substrate.JoinRequest{ID: "bob:web", Name: "bob"}); !errs.Is(err, errs.Forbidden) {
		t.Fatalf("HOLE: an anonymous open join took bob:web: %v", err)
	}
	admin, _ := s.svc.Authenticate(ctx, room.Token)
	if _, err := s.svc.Join(ctx, admin, "square", substrate.JoinRequest{ID: "bob:web-2", Name: "bob"}); err != nil {
		t.Fatal(err)
	}
	// Bob acts from the page: his agent is bob:web.
	if code, _ := s.post("bob", "/web/rooms/square/message", url.Values{"body": {"hello"}}); code != http.StatusSeeOther {
		t.Fatalf("bob's message: %d", code)
	}
	_, _, page := s.get("alice", "/rooms/square")
	if !strings.Contains(page, `bob:web</span> <span class="account">· account bob</span>`) ||
		!strings.Contains(page, `bob:web-2</span> <span class="muted">· token, no account</span>`) {
		t.Fatalf("the page does not say which account drives which agent: %s", page)
	}
	// The room token neither renames bob's agent nor gets a token for it.
	if _, err := s.svc.UpdateAgent(ctx, admin, "square", "bob:web", substrate.AgentUpdate{Name: ptr("alice")}); !errs.Is(err, errs.Forbidden) {
		t.Fatalf("HOLE: bob's agent renamed: %v", err)
	}
	if _, err := s.svc.Join(ctx, admin, "square", substrate.JoinRequest{ID: "bob:web", Name: "bob"}); !errs.Is(err, errs.Forbidden) {
		t.Fatalf("HOLE: the room token got a token for bob's agent: %v", err)
	}
	env, err := s.svc.Context(ctx, admin, "square", substrate.ContextRequest{Depth: "full"})
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := env.Agents["bob:web"].(map[string]any); a["account"] != "bob" {
		t.Fatalf("the context does not say bob drives bob:web: %v", env.Agents)
	}
	if a, _ := env.Agents["bob:web-2"].(map[string]any); a["account"] != nil {
		t.Fatalf("the context gives the token agent an account: %v", env.Agents)
	}
}

func ptr[T any](v T) *T { return &v }

// A room that spent its expression budget answers the page with 429 and
// Retry-After, as the API does (review of issue 25 item 4): the page said
// so in words only, with no header a browser, proxy or script could act
// on.
func TestAttackBusyRoomPageSaysWhenToRetry(t *testing.T) {
	s := newSiteLimits(t, web.Options{}, substrate.Limits{RoomCostPerSecond: 30_000, GateQuantum: -1}, "alice")
	ctx := context.Background()
	var writes []substrate.Write
	for i := range 100 {
		writes = append(writes, substrate.Write{Scope: "_shared", Key: fmt.Sprintf("g%03d", i), Value: []byte(`1`),
			Enabled: `now > timestamp("2000-01-01T00:00:00Z")`})
	}
	if _, err := s.svc.WriteState(ctx, s.admin, "lab", writes, true); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		code, h, body := s.get("", "/rooms/lab?view="+s.room.ViewToken)
		if code == http.StatusOK {
			continue
		}
		if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" || !strings.Contains(body, "retry after") {
			t.Fatalf("a busy room's page: %d, Retry-After %q: %s", code, h.Get("Retry-After"), body)
		}
		return
	}
	t.Fatal("20 page loads of 100 now-gated entries on a budget of 30,000 per second: none refused")
}

// An IPv6 client holds a whole /64 (and picks any address in it), so the
// per-address bound counts the /64: varying its address does not open
// more live streams. Clients reach syncd through a trusted proxy here,
// which names them in X-Forwarded-For, as in production behind nginx.
func TestAttackLiveStreamsBoundPerIPv6Prefix(t *testing.T) {
	s := newSite(t, web.Options{MaxStreams: 2, MaxStreamsPerAddress: 4}, "alice")
	stack := httpmw.New(httpmw.Options{RatePerSecond: -1, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	proxied := httptest.NewServer(stack.Wrap(s.srv.Config.Handler))
	t.Cleanup(proxied.Close)
	open := func(room *substrate.CreatedRoom, client string) int {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", proxied.URL+"/live/rooms/"+room.ID+"?view="+room.ViewToken, nil)
		req.Header.Set("X-Forwarded-For", client)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		return res.StatusCode
	}
	newRoom := func(id string) *substrate.CreatedRoom {
		room, err := s.svc.CreateRoom(context.Background(), substrate.CreateRoomRequest{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		return room
	}
	// Four streams, each from a fresh address of one /64 and a fresh
	// view link (so MaxStreams per credential never binds).
	for i := range 4 {
		if code := open(newRoom(fmt.Sprintf("v6-%d", i)), fmt.Sprintf("2001:db8:1:2::%x", i+1)); code != http.StatusOK {
			t.Fatalf("stream %d: %d", i, code)
		}
	}
	if code := open(newRoom("v6-more"), "2001:db8:1:2:ffff:1:2:3"); code != http.StatusTooManyRequests {
		t.Fatalf("HOLE: a fifth stream from the same /64 with a fresh address: %d", code)
	}
	// Another /64 is another client.
	if code := open(newRoom("v6-other"), "2001:db8:1:3::1"); code != http.StatusOK {
		t.Fatalf("a client of another /64 was refused: %d", code)
	}
}

// What changed is told only as far as the reader may read: the activity
// feed, the live update (its patches and its spoken summary) and the
// past never name another agent's private keys, their values, or an
// entry whose gate hides it from the reader; the past (and its diff
// against now) is room authority's alone.
func TestAttackActivityFeedLeaksNothing(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "bob")
	s.share("bob", "participant")
	s.join("robot", "Robot")
	// bob's own agent exists once he has acted from the page.
	if code, _ := s.post("bob", "/web/rooms/lab/message", url.Values{"body": {"hi"}}); code != http.StatusSeeOther {
		t.Fatalf("bob's message: %d", code)
	}
	ev := s.stream("bob", "/live/rooms/lab?seq="+s.seq(), "")
	ctx := context.Background()
	if _, err := s.svc.WriteState(ctx, s.admin, "lab", []substrate.Write{
		{Scope: "robot", Key: "secret-plan", Value: []byte(`"s3cr3t-value"`)},
		{Scope: "_shared", Key: "hidden-gate", Value: []byte(`"gated-value"`), Enabled: "false"},
	}, true); err != nil {
		t.Fatal(err)
	}
	s.write("_shared", "visible", `"public"`)
	secrets := []string{"secret-plan", "s3cr3t", "hidden-gate", "gated-value"}
	// The live stream: the private batch moved nothing bob sees (no
	// event, or one without it); the public write is told.
	var told string
	for deadline := time.After(5 * time.Second); !strings.Contains(told, "visible"); {
		select {
		case e := <-ev:
			told += e
		case <-deadline:
			t.Fatalf("the public write never reached bob's stream: %s", told)
		}
	}
	for _, sec := range secrets {
		if strings.Contains(told, sec) {
			t.Errorf("HOLE: bob's live stream names %q: %s", sec, told)
		}
	}
	_, _, page := s.get("bob", "/rooms/lab")
	if !strings.Contains(page, `id="activity"`) || !strings.Contains(page, "_shared.visible") {
		t.Fatalf("bob's activity feed lacks the public write: %s", page)
	}
	for _, sec := range secrets {
		if strings.Contains(page, sec) {
			t.Errorf("HOLE: bob's page names %q", sec)
		}
	}
	// The owner sees it all.
	if _, _, page := s.get("alice", "/rooms/lab"); !strings.Contains(page, "robot.secret-plan") || !strings.Contains(page, "_shared.hidden-gate") {
		t.Error("the owner's activity feed lacks the private writes")
	}
	// The past, with its diff against now: not for bob.
	if code, _, page := s.get("bob", "/rooms/lab?at=2"); code == http.StatusOK || strings.Contains(page, "s3cr3t") {
		t.Errorf("HOLE: bob scrubs the past: %d", code)
	}
	// Directly, through the substrate: the same.
	p, _, err := s.lob.PersonPrincipal(ctx, "user_bob", "bob", "lab")
	if err != nil {
		t.Fatal(err)
	}
	acts, err := activity.Recent(ctx, s.svc, p, "lab", 0, 50)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(acts)
	for _, sec := range secrets {
		if strings.Contains(string(raw), sec) {
			t.Errorf("HOLE: activity.Recent tells bob %q: %s", sec, raw)
		}
	}
}

// An action form's choices come from a view (render hint "options"),
// and only from a view of this room that the page's reader reads (views
// read with their registrar's authority, so every live view of a room is
// its members'). A hint naming a view of another room, even one the
// person belongs to, must not fill the form: the choice picked would be
// written into this room, whose registrar could read it (exfiltration
// across rooms); nor may a disabled view. Those forms get a text field.
func TestAttackFormOptionsFromAViewOutsideTheRoom(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	ctx := context.Background()
	vault, err := s.svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "vault"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.lob.ClaimRoom(ctx, "user_alice", "vault", vault.Token, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.svc.RegisterView(ctx, substrate.RoomPrincipal("vault"), "vault", substrate.ViewDef{ID: "codes", Expr: `["v4ult-1", "v4ult-2"]`}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.svc.RegisterAction(ctx, s.admin, "lab", substrate.ActionDef{ID: "claim", Description: "Claim a task",
		Params: map[string]substrate.ParamSpec{"task": {Type: "string", Required: true}},
		Writes: []substrate.WriteTemplate{{Key: "claim", Value: []byte(`"${params.task}"`)}}}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []substrate.ViewDef{
		{ID: "hidden_ids", Expr: `["h1dden-1"]`, Enabled: `false`},
		{ID: "open_ids", Expr: `["task:1", "task:2"]`},
		{ID: "cross_form", Expr: `true`, Render: []byte(`{"type": "action-form", "action": "claim", "options": {"task": "vault/codes"}}`)},
		{ID: "dotted_form", Expr: `true`, Render: []byte(`{"type": "action-form", "action": "claim", "options": {"task": "vault.codes"}}`)},
		{ID: "hidden_form", Expr: `true`, Render: []byte(`{"type": "action-form", "action": "claim", "options": {"task": "hidden_ids"}}`)},
		{ID: "good_form", Expr: `true`, Render: []byte(`{"type": "action-form", "action": "claim", "options": {"task": "open_ids"}}`)},
	} {
		if _, err := s.svc.RegisterView(ctx, s.admin, "lab", v); err != nil {
			t.Fatal(err)
		}
	}
	code, _, body := s.get("alice", "/rooms/lab")
	if code != 200 {
		t.Fatalf("the room page: %d %s", code, body)
	}
	if strings.Contains(body, "v4ult") || strings.Contains(body, "h1dden") {
		t.Fatalf("HOLE: a form's options show a view from outside the room, or a disabled one: %s", body)
	}
	for _, form := range []string{"cross_form", "dotted_form", "hidden_form"} {
		if !strings.Contains(body, `<input id="s-`+form+`-p-claim-task" name="p.task" type="text"`) {
			t.Errorf("%s does not fall back to a text field: %s", form, body)
		}
	}
	if !strings.Contains(body, `<select id="s-good_form-p-claim-task" name="p.task" required><option value="task:1">task:1</option><option value="task:2">task:2</option></select>`) {
		t.Errorf("the form naming a view of the room does not offer its choices: %s", body)
	}
}

// The loom page's forms are composed into the loom's own commands and run
// as the person's agent, so the loom's permissions decide, not the page: a
// participant without loom_write, loom_generate, doc_read or doc_write
// forges each form's POST and is refused, and nothing is written; the page
// itself offers none of those forms and says why. Loom permissions are
// room authority's alone, whatever the form says.
func TestAttackLoomFormsWithoutPermission(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "paul")
	ctx := context.Background()
	s.share("paul", "participant")
	if _, err := loom.Of(s.svc).Run(ctx, s.admin, "lab", `→ new tree "t" "ROOT"`+"\n"+`→ add from:1 "SECOND"`+"\n"+`→ write doc:"plan" append "DOC-SECRET"`+"\n"+`→ continue from 2`); err != nil {
		t.Fatal(err)
	}
	// paul's agent exists once he acted; with the defaults he may look and
	// read documents only.
	if code, _ := s.post("paul", "/web/rooms/lab/loom", url.Values{"tree": {"1"}, "node": {"1"}, "op": {"switch"}}); code != 200 {
		t.Fatalf("paul standing at node 1: %d", code)
	}
	_, _, page := s.get("paul", "/web/rooms/lab/loom?tree=1&node=2")
	for _, absent := range []string{`id="branch-text"`, `id="continue-btn"`, `id="note-text"`, `id="doc-text"`, `id="tree-name"`, `id="fulfil-1"`, `id="perms"`} {
		if strings.Contains(page, absent) {
			t.Errorf("paul, without the permission, is offered %s", absent)
		}
	}
	for _, why := range []string{"loom_write is not enabled for you", "loom_generate is not enabled for you", "doc_write is not enabled for you"} {
		if !strings.Contains(page, why) {
			t.Errorf("paul's page does not say %q", why)
		}
	}
	forged := map[string]url.Values{
		"branch":   {"op": {"branch"}, "text": {"FORGED-BRANCH"}},
		"continue": {"op": {"continue"}, "n": {"2"}},
		"annotate": {"op": {"annotate"}, "text": {"FORGED-NOTE"}},
		"edit":     {"op": {"edit"}, "text": {"FORGED-EDIT"}},
		"link":     {"op": {"link"}, "target": {"1"}, "note": {"FORGED-LINK"}},
		"bookmark": {"op": {"bookmark"}, "label": {"FORGED-BM"}},
		"fulfil":   {"op": {"fulfil"}, "req": {"g1"}, "text": {"FORGED-FULFIL"}},
		"new":      {"op": {"new"}, "name": {"FORGED-TREE"}},
		"write":    {"op": {"write"}, "doc": {"plan"}, "text": {"FORGED-DOC"}},
		"permit":   {"op": {"permit"}, "agent": {"paul:web"}, "perm-loom_write": {"on"}, "perm-doc_write": {"on"}},
		"commands": {"commands": {`→ add from:2 "FORGED-CMD"`}},
	}
	for name, form := range forged {
		form.Set("tree", "1")
		form.Set("node", "2")
		code, body := s.post("paul", "/web/rooms/lab/loom", form)
		if code != http.StatusForbidden || !strings.Contains(body, "permission denied") {
			t.Errorf("HOLE: paul's forged %s form: %d", name, code)
		}
	}
	res, err := loom.Of(s.svc).Run(ctx, s.admin, "lab", "→ tree tree:1 depth:5\n→ list 2 annotations tree:1\n→ list 2 links tree:1\n→ bookmarks tree:1\n→ read doc:\"plan\"\n→ requests\n→ permit paul:web")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.Text, "FORGED") || !strings.Contains(res.Text, "g1:") || strings.Contains(res.Text, "paul:web (human): loom_aware, loom_write") {
		t.Errorf("HOLE: a refused form wrote: %s", res.Text)
	}
	// Denied doc_read, paul's page neither lists nor opens documents.
	if _, err := loom.Of(s.svc).Run(ctx, s.admin, "lab", "→ deny paul:web doc_read"); err != nil {
		t.Fatal(err)
	}
	if _, _, page := s.get("paul", "/web/rooms/lab/loom?tree=1&node=1&doc=plan"); strings.Contains(page, "DOC-SECRET") || !strings.Contains(page, "doc_read is not enabled for you") {
		t.Error("HOLE: paul, denied doc_read, reads the document on the loom page")
	}
	// Denied loom_aware, the page shows no tree, by URL or in its part.
	if _, err := loom.Of(s.svc).Run(ctx, s.admin, "lab", "→ deny paul:web loom_aware"); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/web/rooms/lab/loom?tree=1&node=2", "/web/rooms/lab/loom?tree=1&node=2&part=main", "/web/rooms/lab/loom?tree=1&node=2&as=prose"} {
		if _, _, page := s.get("paul", path); strings.Contains(page, "ROOT") || strings.Contains(page, "SECOND") || !strings.Contains(page, "loom_aware is not enabled") {
			t.Errorf("HOLE: paul, denied loom_aware, reads the tree at %s", path)
		}
	}
}

// A person reads no loom of a room they cannot see, by any of the page's
// URLs, its main part or its forms; a cross-site form is refused before it
// runs; a view link reads and offers no form.
func TestAttackLoomPageOtherRoomAndCrossSite(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "mallory")
	if _, err := loom.Of(s.svc).Run(context.Background(), s.admin, "lab", `→ new tree "t" "TREE-SECRET"`+"\n"+`→ write doc:"d" append "DOC-SECRET"`); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/web/rooms/lab/loom?tree=1&node=1", "/web/rooms/lab/loom?tree=1&node=1&part=main", "/web/rooms/lab/loom?doc=d", "/web/rooms/lab/loom?tree=1&as=prose"} {
		if code, _, body := s.get("mallory", path); code != http.StatusNotFound || strings.Contains(body, "SECRET") {
			t.Errorf("HOLE: a stranger reads %s: %d", path, code)
		}
	}
	if code, body := s.post("mallory", "/web/rooms/lab/loom", url.Values{"tree": {"1"}, "node": {"1"}, "op": {"branch"}, "text": {"x"}}); code != http.StatusNotFound || strings.Contains(body, "SECRET") {
		t.Errorf("HOLE: a stranger branches in another's room: %d", code)
	}
	for _, op := range []url.Values{
		{"tree": {"1"}, "node": {"1"}, "op": {"branch"}, "text": {"CSRF"}},
		{"op": {"write"}, "doc": {"d"}, "text": {"CSRF"}},
		{"op": {"permit"}, "agent": {"alice:web"}},
	} {
		for _, hdr := range [][]string{{"Sec-Fetch-Site", "cross-site"}, {"Sec-Fetch-Site", "", "Origin", "https://evil.example"}} {
			if code, _ := s.post("alice", "/web/rooms/lab/loom", op, hdr...); code != http.StatusForbidden {
				t.Errorf("HOLE: a cross-site %s form (%v): %d", op.Get("op"), hdr, code)
			}
		}
	}
	if res, _ := loom.Of(s.svc).Run(context.Background(), s.admin, "lab", "→ list 1 tree:1\n→ read doc:\"d\""); res == nil || strings.Contains(res.Text, "CSRF") {
		t.Error("HOLE: a cross-site form wrote")
	}
	code, _, body := s.get("", "/web/rooms/lab/loom?tree=1&node=1&view="+s.room.ViewToken)
	if code != 200 || !strings.Contains(body, "TREE-SECRET") || strings.Contains(body, `method="post"`) {
		t.Errorf("a view link's loom page: %d, forms offered: %v", code, strings.Contains(body, `method="post"`))
	}
}

// A view's enabled gate is decided for the person reading the page: a view
// gated away from bob's person agent (bob:web) is neither listed nor drawn
// as a surface on bob's page, and is on alice's, for whom it holds (the
// gate was evaluated once with its registrar's self, and bob read it).
func TestAttackGatedViewOnThePage(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "bob")
	ctx := context.Background()
	s.share("bob", "collaborator")
	// Bob's page reads as his person agent once he has one (acting makes it).
	if _, err := s.lob.PersonActor(ctx, "user_bob", "bob", "lab"); err != nil {
		t.Fatal(err)
	}
	for _, v := range []substrate.ViewDef{
		{ID: "plan", Expr: `"the s3cret plan"`, Enabled: `self != "bob:web"`},
		{ID: "plan_card", Expr: `"the s3cret card"`, Enabled: `self != "bob:web"`, Render: []byte(`{"type": "markdown"}`)},
		{ID: "board", Expr: `"public board"`},
	} {
		if _, err := s.svc.RegisterView(ctx, s.admin, "lab", v); err != nil {
			t.Fatal(err)
		}
	}
	for _, who := range []string{"alice", "bob", "alice"} {
		code, _, body := s.get(who, "/rooms/lab")
		if code != 200 || !strings.Contains(body, "public board") {
			t.Fatalf("%s's page: %d %s", who, code, body)
		}
		for _, secret := range []string{"s3cret plan", "s3cret card"} {
			if got := strings.Contains(body, secret); got != (who == "alice") {
				if who == "bob" {
					t.Errorf("HOLE: bob's page shows the view gated away from him: %q", secret)
				} else {
					t.Errorf("alice's page lacks the view gated open for her: %q", secret)
				}
			}
		}
	}
}

// A collaborator's usage is for those who see the loom (loom_aware), and
// only room authority or people with loom_write stop it: a forged stop
// form from anyone else is refused and the collaborator runs on.
func TestAttackLoomCollaboratorUsageAndStop(t *testing.T) {
	s, _ := collabSite(t)
	ctx := context.Background()
	// paul acts once (his agent exists), has the defaults: no loom_write.
	if code, _ := s.post("paul", "/web/rooms/lab/loom", url.Values{"tree": {"1"}, "node": {"1"}, "op": {"switch"}}); code != 200 {
		t.Fatalf("paul standing at node 1: %d", code)
	}
	for _, form := range []url.Values{
		{"tree": {"1"}, "node": {"1"}, "op": {"stop"}, "agent": {"claude"}},
		{"commands": {"→ stop claude"}},
	} {
		code, body := s.post("paul", "/web/rooms/lab/loom", form)
		if code != http.StatusForbidden || !strings.Contains(body, "permission denied") {
			t.Errorf("HOLE: paul's forged stop (%v): %d", form, code)
		}
	}
	us, err := loom.Of(s.svc).CollaboratorUsage(ctx, s.admin, "lab")
	if err != nil || len(us) != 1 || us[0].Stop != "" {
		t.Fatalf("HOLE: a refused stop reached the record: %+v %v", us, err)
	}
	// Denied loom_aware, paul sees no usage, on the page or its part.
	if _, err := loom.Of(s.svc).Run(ctx, s.admin, "lab", "→ deny paul:web loom_aware"); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/web/rooms/lab/loom", "/web/rooms/lab/loom?tree=1&node=1&part=main"} {
		if _, _, page := s.get("paul", path); strings.Contains(page, "collab-claude") || strings.Contains(page, "3311") || strings.Contains(page, "instruct") {
			t.Errorf("HOLE: paul, denied loom_aware, sees the collaborator's usage at %s", path)
		}
	}
}

// Live streams share renders (livefeed.go) only between readers who would
// see the same section: the owner (room authority) and an observer follow
// the same room in several tabs each, changes come that only the owner
// may see (an agent's private key, an entry whose gate hides it), and the
// observer's streams never carry any of
// them while the owner's carry each. Were the sharing keyed without the
// reader's authority, whichever stream read first would serve the other:
// the observer would be told the owner's secrets, or the owner would miss
// them.
func TestAttackLiveStreamsShareNoRenderAcrossAuthority(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "bob")
	s.share("bob", "observer")
	s.join("robot", "Robot")
	ctx := context.Background()
	seq := s.seq()
	type tab struct {
		who string
		ev  <-chan string
	}
	var tabs []tab
	for range 3 {
		for _, who := range []string{"alice", "bob"} {
			tabs = append(tabs, tab{who, s.stream(who, "/live/rooms/lab?seq="+seq, "")})
		}
	}
	for round := range 4 {
		secret := []string{fmt.Sprintf("s3cr3t-%d", round), fmt.Sprintf("gated-%d", round)}
		if _, err := s.svc.WriteState(ctx, s.admin, "lab", []substrate.Write{
			{Scope: "robot", Key: "plan", Value: []byte(`"` + secret[0] + `"`)},
			{Scope: "_shared", Key: "hidden", Value: []byte(`"` + secret[1] + `"`), Enabled: "false"},
			{Scope: "_shared", Key: "visible", Value: []byte(fmt.Sprintf(`"public-%d"`, round))},
		}, true); err != nil {
			t.Fatal(err)
		}
		s.write("_shared", "tick", fmt.Sprint(round))
		last := "id: " + s.seq() + "\n"
		for i, tb := range tabs {
			var told string
			for deadline := time.After(10 * time.Second); ; {
				select {
				case e := <-tb.ev:
					told += e + "\n"
				case <-deadline:
					t.Fatalf("round %d: %s's tab %d never reached %s: %s", round, tb.who, i, last, told)
				}
				if strings.Contains(told, last) {
					break
				}
			}
			for _, sec := range secret {
				switch has := strings.Contains(told, sec); {
				case tb.who == "bob" && has:
					t.Fatalf("HOLE: round %d: the observer's tab %d was told %q (an owner's render): %s", round, i, sec, told)
				case tb.who == "alice" && !has:
					t.Fatalf("round %d: the owner's tab %d was not told %q (an observer's render?): %s", round, i, sec, told)
				}
			}
		}
	}
	if reads, renders := web.LiveCounts(s.wb); reads == 0 || renders == 0 {
		t.Fatalf("no live renders counted: %d reads, %d renders", reads, renders)
	}
}

// A reload of the page that answered the token rotation sent the form
// again (issue 41, 9): the token just shown was rotated away, dead before
// it was copied. The rotation now answers with a redirect; the page it
// leads to shows the token once (it never is in a URL), a reload shows it
// neither again nor rotates it, and says how to get another. The sealed
// cookie that carries it is another person's nothing.
func TestAttackReloadRotatesTheTokenAgain(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "bob")
	s.share("bob", "owner")
	ctx := context.Background()
	base, _ := url.Parse(s.srv.URL)
	jar, _ := cookiejar.New(nil)
	jar.SetCookies(base, []*http.Cookie{{Name: "test_person", Value: "alice", Path: "/"}})
	browser := &http.Client{Jar: jar, Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	load := func(c *http.Client, path string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", s.srv.URL+path, nil)
		req.Header.Set("Accept", "text/html")
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, res.StatusCode, b)
		}
		return string(b)
	}
	req, _ := http.NewRequest("POST", s.srv.URL+"/web/rooms/lab/tokens/rotate", strings.NewReader(url.Values{"which": {"view"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "text/html")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	res, err := browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(res.Body)
	res.Body.Close()
	loc := res.Header.Get("Location")
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/rooms/lab") {
		t.Fatalf("HOLE: the rotation answered %d (Location %q): a reload of its answer sends the form again and rotates the token shown", res.StatusCode, loc)
	}
	var sealed *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == "sync_new_token" {
			sealed = c
		}
	}
	if strings.Contains(loc, "view_") || strings.Contains(string(answer), "view_") || sealed == nil || strings.Contains(sealed.Value, "view_") || !sealed.HttpOnly {
		t.Fatalf("HOLE: the new token travels in the clear: Location %q, body %q, cookie %+v", loc, answer, sealed)
	}
	page := load(browser, loc)
	i := strings.Index(page, "view_")
	if i < 0 || !strings.Contains(page, "New view token") {
		t.Fatalf("the page after the rotation does not show the new token: %s", page)
	}
	shown := page[i : i+strings.IndexByte(page[i:], '<')]
	if _, err := s.svc.AuthenticateIn(ctx, "lab", shown); err != nil {
		t.Fatalf("the token shown does not work: %v", err)
	}
	// The reload: the token is not shown again, nor rotated.
	again := load(browser, loc)
	if strings.Contains(again, shown) || strings.Contains(again, "New view token") {
		t.Fatal("HOLE: a reload shows the token again")
	}
	if !strings.Contains(again, "was shown once") || !strings.Contains(again, "Rotate the view token again") {
		t.Fatalf("the reload does not say the token was shown, nor how to get another: %s", again)
	}
	if _, err := s.svc.AuthenticateIn(ctx, "lab", shown); err != nil {
		t.Fatalf("HOLE: after a reload the token just shown is dead: %v", err)
	}
	if third := load(browser, loc); strings.Contains(third, "was shown once") || strings.Contains(third, shown) {
		t.Fatal("the note (or the token) is shown on every load")
	}
	audit, err := s.svc.ReadState(ctx, substrate.RoomPrincipal("lab"), "lab", substrate.ReadQuery{Scope: "_audit", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := json.Marshal(audit.Entries); strings.Count(string(raw), "token_rotate") != 1 {
		t.Fatalf("HOLE: %d rotations for one form sent", strings.Count(string(raw), "token_rotate"))
	}
	// Alice's sealed cookie in another owner's browser opens nothing.
	bobJar, _ := cookiejar.New(nil)
	bobJar.SetCookies(base, []*http.Cookie{{Name: "test_person", Value: "bob", Path: "/"}, {Name: "sync_new_token", Value: sealed.Value, Path: "/rooms/lab"}})
	if p := load(&http.Client{Jar: bobJar, Timeout: 5 * time.Second}, "/rooms/lab"); strings.Contains(p, shown) || !strings.Contains(p, "could not be shown here") {
		t.Fatalf("HOLE: another person's browser opens the sealed token: %s", p)
	}
}

// Issue 41.1: one value of some 40 KB nested 9,900 levels (stored
// before values' nesting was bounded) made the room page indent all of
// it before cutting it to 2,000 bytes: 1.3 s and about a gigabyte a load.
// A page costs what it shows: formatting stops when its budget is spent
// and at the depth it shows, so the page allocates no more than a few
// megabytes, and shows the value's beginning.
func TestAttackDeepLegacyValueCostsThePageWhatItShows(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	s.legacyValue("_shared", "deep", deepJSON(9900))
	s.write("_shared", "after", `"still shown"`)
	s.get("alice", "/rooms/lab") // caches warm
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	code, _, page := s.get("alice", "/rooms/lab")
	runtime.ReadMemStats(&after)
	if code != 200 || !strings.Contains(page, "still shown") || !strings.Contains(page, html.EscapeString(`[{"k":[{"k":`)) {
		t.Fatalf("the page does not show the room: %d %.500s", code, page)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 8<<20 {
		t.Fatalf("HOLE: one room page with one deep value allocated %d MB (client and server)", n>>20)
	}
	if len(page) > 1<<20 {
		t.Fatalf("HOLE: the page is %d KB", len(page)>>10)
	}
}
