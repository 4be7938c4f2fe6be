package web_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/lobby/web"
	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/httpmw/proxytest"
	"github.com/syncsubstrate/sync/substrate/loom"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// site is the pages over a real database, with people who are "signed in"
// by a test cookie naming them (real sign-in is oauth's, tested there and
// end to end in cmd/syncd).
type site struct {
	t     testing.TB
	srv   *httptest.Server
	svc   *substrate.Service
	lob   *lobby.Lobby
	room  *substrate.CreatedRoom
	admin *substrate.Principal
	db    *store.DB
	wb    *web.Web
	// opened counts the live streams the test opened (stream, or by hand):
	// liveSettled waits until that many have started.
	opened int64
}

func newSite(t *testing.T, opt web.Options, people ...string) *site {
	t.Helper()
	return newSiteTB(t, opt, people...)
}

func newSiteTB(t testing.TB, opt web.Options, people ...string) *site {
	t.Helper()
	return newSiteLimits(t, opt, substrate.Limits{}, people...)
}

// newSiteLimits is newSite with the substrate's limits set.
func newSiteLimits(t testing.TB, opt web.Options, lim substrate.Limits, people ...string) *site {
	t.Helper()
	db := pgtest.New(t)
	ctx := context.Background()
	for _, u := range people {
		if _, err := db.Exec(ctx, `INSERT INTO smcp_users (id, username, webauthn_handle) VALUES ($1, $2, $3)`, "user_"+u, u, []byte(u)); err != nil {
			t.Fatal(err)
		}
	}
	svc := substrate.New(db, substrate.Options{Features: testFeatures, Limits: lim, Wait: substrate.WaitOptions{Recheck: time.Hour}})
	t.Cleanup(svc.Close)
	lob := lobby.New(db, svc)
	opt.Lobby, opt.Substrate = lob, svc
	opt.SignedIn = func(r *http.Request) (string, string, bool) {
		c, err := r.Cookie("test_person")
		if err != nil {
			return "", "", false
		}
		return "user_" + c.Value, c.Value, true
	}
	wb, err := web.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	wb.Routes(mux)
	mux.HandleFunc("/rooms/", func(w http.ResponseWriter, r *http.Request) {
		if web.IsPage(r) {
			wb.RoomPage(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"api": true}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	// Alice owns "lab", made over the API and claimed with its room token.
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "lab"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lob.ClaimRoom(ctx, "user_alice", "lab", room.Token, false); err != nil {
		t.Fatal(err)
	}
	admin, err := svc.Authenticate(ctx, room.Token)
	if err != nil {
		t.Fatal(err)
	}
	return &site{t: t, srv: srv, svc: svc, lob: lob, room: room, admin: admin, db: db, wb: wb}
}

// get fetches a page as person ("" for nobody), as a browser navigation.
func (s *site) get(person, path string) (int, http.Header, string) {
	s.t.Helper()
	req, _ := http.NewRequest("GET", s.srv.URL+path, nil)
	req.Header.Set("Accept", "text/html,application/xhtml+xml")
	if person != "" {
		req.AddCookie(&http.Cookie{Name: "test_person", Value: person})
	}
	res, err := (&http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

// share gives person access to alice's room "lab".
func (s *site) share(person, access string) {
	s.t.Helper()
	if err := s.lob.ShareRoom(context.Background(), "user_alice", "lab", "user_"+person, access); err != nil {
		s.t.Fatal(err)
	}
}

// join adds an agent to "lab" with the room token.
func (s *site) join(id, name string) {
	s.t.Helper()
	if _, err := s.svc.Join(context.Background(), s.admin, "lab", substrate.JoinRequest{ID: id, Name: name}); err != nil {
		s.t.Fatal(err)
	}
}

func (s *site) write(scope, key, value string) {
	s.t.Helper()
	if _, err := s.svc.WriteState(context.Background(), s.admin, "lab", []substrate.Write{{Scope: scope, Key: key, Value: []byte(value)}}, false); err != nil {
		s.t.Fatal(err)
	}
}

// The room page draws the room as its owner reads it: agents, state by
// scope with versions, actions with availability, views and messages.
func TestRoomPageDrawsTheRoom(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	ctx := context.Background()
	if _, err := s.svc.Join(ctx, s.admin, "lab", substrate.JoinRequest{ID: "robot", Name: "Robot One"}); err != nil {
		t.Fatal(err)
	}
	s.write("_shared", "phase", `"planning"`)
	s.write("_shared", "phase", `"building"`)
	if _, err := s.svc.RegisterAction(ctx, s.admin, "lab", substrate.ActionDef{ID: "finish", Description: "End the build",
		If: `state._shared.phase == "done"`, Writes: []substrate.WriteTemplate{{Key: "phase", Value: []byte(`"done"`)}}}); err != nil {
		t.Fatal(err)
	}
	code, h, body := s.get("alice", "/rooms/lab")
	if code != 200 {
		t.Fatalf("room page: %d %s", code, body)
	}
	for _, want := range []string{"Robot One", "phase", "&#34;building&#34;", `<td data-label="Version">2</td>`, "finish", "End the build", "Not available to you now", "/web/live.js",
		`Why not: <code>state._shared.phase == &#34;done&#34;</code> · <code>state._shared.phase</code> is <code>building</code>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the room page lacks %q", want)
		}
	}
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	if strings.Contains(body, "<script>") {
		t.Error("the page carries an inline script")
	}
	// The lobby lists the room, its agents, its roles filled and free,
	// and when it was last active.
	s.write("_shared", "roles", `{"judge": {"filled_by": null}, "scribe": {"filled_by": "robot"}}`)
	code, _, body = s.get("alice", "/")
	for _, want := range []string{`href="/rooms/lab"`, "Robot One", `judge <span class="muted">(free)</span>`, `scribe <span class="muted">(filled)</span>`, "last active"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("the lobby lacks %q (%d)", want, code)
		}
	}
}

// A REST client keeps the API at /rooms/{id}: a bearer token, or a request
// that does not ask for HTML, never gets the page.
func TestRoomPathStaysTheAPIForClients(t *testing.T) {
	for _, c := range []struct {
		accept, auth string
		page         bool
	}{
		{"text/html", "", true},
		{"application/json", "", false},
		{"", "", false},
		{"text/html", "Bearer room_x", false},
	} {
		r := httptest.NewRequest("GET", "/rooms/lab", nil)
		if c.accept != "" {
			r.Header.Set("Accept", c.accept)
		}
		if c.auth != "" {
			r.Header.Set("Authorization", c.auth)
		}
		if got := web.IsPage(r); got != c.page {
			t.Errorf("Accept %q, Authorization %q: page %v, want %v", c.accept, c.auth, got, c.page)
		}
	}
	for _, p := range []string{"/rooms/lab/state", "/rooms/"} {
		r := httptest.NewRequest("GET", p, nil)
		r.Header.Set("Accept", "text/html")
		if web.IsPage(r) {
			t.Errorf("%s is taken for the page", p)
		}
	}
}

// A change committed to the room reaches an open live stream, and a
// stream reconnecting with the last seq it saw is told at once when the
// room moved past it.
func TestLiveStreamFollowsCommits(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	events := s.stream("alice", "/live/rooms/lab", "")
	s.liveSettled() // the page (no seq) shows the room as first read: write after
	s.write("_shared", "x", "1")
	ev := next(t, events, 5*time.Second)
	if !strings.Contains(ev, "event: change") || !strings.Contains(ev, "id: ") {
		t.Fatalf("first event: %q", ev)
	}
	// Reconnecting from seq 1 (the room's creation): the room is past it.
	again := s.stream("alice", "/live/rooms/lab", "1")
	if ev := next(t, again, 5*time.Second); !strings.Contains(ev, "event: change") {
		t.Fatalf("resume from seq 1: %q", ev)
	}
}

// stream opens a live stream and returns its events (blank-line separated
// blocks, comments and the retry line dropped).
func (s *site) stream(person, path, lastID string) <-chan string {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s.t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", s.srv.URL+path, nil)
	req.AddCookie(&http.Cookie{Name: "test_person", Value: person})
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(res.Body)
		s.t.Fatalf("live stream: %d %s", res.StatusCode, b)
	}
	s.opened++
	out := make(chan string, 16)
	go func() {
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		// A real-size room's section is one data line of a few hundred KB.
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		var block []string
		for sc.Scan() {
			line := sc.Text()
			if line != "" {
				if !strings.HasPrefix(line, ":") && !strings.HasPrefix(line, "retry:") {
					block = append(block, line)
				}
				continue
			}
			if len(block) > 0 {
				out <- strings.Join(block, "\n")
				block = nil
			}
		}
	}()
	return out
}

// liveSettled waits until every stream the test opened has sent its first
// section and answered every change it was woken for: from then on, reads
// and renders counted (LiveCounts) are work begun later, never a late
// first section or the tail of an earlier change. A slow machine waits
// longer; it never measures too early.
func (s *site) liveSettled() {
	s.t.Helper()
	pgtest.Eventually(s.t, 30*time.Second, func() bool {
		started, unsent := web.LiveSettled(s.wb)
		return started >= s.opened && unsent == 0
	}, "live streams to settle: [started, wakes unanswered] = %v, want [%d 0]",
		func() any { started, unsent := web.LiveSettled(s.wb); return []int64{started, int64(unsent)} }, s.opened)
}

func next(t testing.TB, events <-chan string, d time.Duration) string {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(d):
		t.Fatalf("no event within %v", d)
		return ""
	}
}

// nextAt skips events until the one whose id is seq and returns it; what
// it waits for is named in a failure.
func nextAt(t testing.TB, events <-chan string, seq, what string) string {
	t.Helper()
	want := "id: " + seq + "\n"
	deadline := time.After(10 * time.Second)
	for {
		select {
		case e := <-events:
			if strings.HasPrefix(e, want) {
				return e
			}
		case <-deadline:
			t.Fatalf("%s: no event at seq %s within 10 s", what, seq)
			return ""
		}
	}
}

// The audit scrubber shows the state as it was at an earlier seq; the CEL
// console evaluates with the reader's authority.
func TestScrubberAndConsole(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	s.write("_shared", "phase", `"planning"`)
	planning := s.seq()
	s.write("_shared", "phase", `"shipped"`)
	code, _, body := s.get("alice", "/rooms/lab?at="+planning)
	state := body[strings.Index(body, `id="state"`)+1:]
	if code != 200 || !strings.Contains(body, "as it was at <strong>seq "+planning) || !strings.Contains(state, "&#34;planning&#34;") || strings.Contains(state, "shipped") {
		t.Fatalf("scrubbed to seq %s: %d %s", planning, code, body)
	}
	if code, _, body := s.get("alice", "/rooms/lab?at=zero"); code != 400 || !strings.Contains(body, "is not a seq") {
		t.Fatalf("a bad seq: %d %s", code, body)
	}
	code, _, body = s.get("alice", "/rooms/lab?eval="+url.QueryEscape(`state._shared.phase + "!"`))
	if code != 200 || !strings.Contains(body, "&#34;shipped!&#34;") {
		t.Fatalf("console: %d %s", code, body)
	}
	if _, _, body := s.get("alice", "/rooms/lab?eval="+url.QueryEscape(`state._shared.phase +`)); !strings.Contains(body, `id="eval-error"`) {
		t.Fatalf("a broken expression shows no error: %s", body)
	}
}

func (s *site) seq() string {
	s.t.Helper()
	room, err := s.svc.GetRoom(context.Background(), s.admin, "lab")
	if err != nil {
		s.t.Fatal(err)
	}
	return strconv.FormatInt(room.Seq, 10)
}

// postFollow sends a form as person and follows its redirect with the
// cookie it set (the flash), as a browser would: the status and
// Location of the form's answer, and the page it led to.
func (s *site) postFollow(person, path string, form url.Values) (int, string, string) {
	s.t.Helper()
	req, _ := http.NewRequest("POST", s.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.AddCookie(&http.Cookie{Name: "test_person", Value: person})
	client := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	res.Body.Close()
	loc := res.Header.Get("Location")
	if res.StatusCode != http.StatusSeeOther {
		return res.StatusCode, loc, ""
	}
	get, _ := http.NewRequest("GET", s.srv.URL+loc, nil)
	get.Header.Set("Accept", "text/html")
	get.AddCookie(&http.Cookie{Name: "test_person", Value: person})
	for _, c := range res.Cookies() {
		get.AddCookie(c)
	}
	page, err := client.Do(get)
	if err != nil {
		s.t.Fatal(err)
	}
	defer page.Body.Close()
	b, _ := io.ReadAll(page.Body)
	return res.StatusCode, loc, string(b)
}

// post sends a form as person, from the page (same origin).
func (s *site) post(person, path string, form url.Values, header ...string) (int, string) {
	s.t.Helper()
	req, _ := http.NewRequest("POST", s.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "text/html")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if person != "" {
		req.AddCookie(&http.Cookie{Name: "test_person", Value: person})
	}
	res, err := (&http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func (s *site) value(scope, key string) string {
	s.t.Helper()
	st, err := s.svc.ReadState(context.Background(), s.admin, "lab", substrate.ReadQuery{Scope: scope, Key: key})
	if err != nil || len(st.Entries) == 0 {
		return ""
	}
	return string(st.Entries[0].Value) + " by " + st.Entries[0].Writer
}

// A person acts from the page as their own agent, <username>:web: an
// action from its form (params typed by the action's spec), a message from
// the compose box; a refusal comes back on the page with the reason.
func TestActFromThePage(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "paul")
	ctx := context.Background()
	s.share("paul", "participant")
	if _, err := s.svc.RegisterAction(ctx, s.admin, "lab", substrate.ActionDef{ID: "move", Description: "Mark a cell",
		Params: map[string]substrate.ParamSpec{"cell": {Type: "integer", Required: true}},
		If:     `params.cell >= 0 && params.cell <= 8`,
		Writes: []substrate.WriteTemplate{{Key: "last", Value: []byte(`"${params.cell}"`)}}}); err != nil {
		t.Fatal(err)
	}
	_, _, page := s.get("paul", "/rooms/lab")
	if !strings.Contains(page, `action="/web/rooms/lab/invoke/move"`) || !strings.Contains(page, `name="p.cell"`) || !strings.Contains(page, `type="number"`) {
		t.Fatalf("the action has no form: %s", page)
	}
	code, _ := s.post("paul", "/web/rooms/lab/invoke/move", url.Values{"p.cell": {"4"}, "t.cell": {"integer"}})
	if code != http.StatusSeeOther || s.value("_shared", "last") != "4 by paul:web" {
		t.Fatalf("invoking from the form: %d, _shared.last %q", code, s.value("_shared", "last"))
	}
	// A refusal answers with a redirect too (a reload never sends the
	// form again); the page it leads to says why, at the form, in words,
	// with the false clause on demand.
	code, loc, body := s.postFollow("paul", "/web/rooms/lab/invoke/move", url.Values{"p.cell": {"9"}, "t.cell": {"integer"}})
	if code != http.StatusSeeOther || loc != "/rooms/lab#action-move" || !strings.Contains(body, `class="feedback refused"`) || !strings.Contains(body, `data-code="precondition_failed"`) ||
		!strings.Contains(body, "You can&#39;t move right now") || !strings.Contains(body, "params.cell") || s.value("_shared", "last") != "4 by paul:web" {
		t.Fatalf("a refused invocation: %d %s %s", code, loc, body)
	}
	if _, _, again := s.get("paul", "/rooms/lab"); strings.Contains(again, "feedback") {
		t.Fatal("the refusal is shown again on the next visit")
	}
	code, _, body = s.postFollow("paul", "/web/rooms/lab/invoke/move", url.Values{"p.cell": {"four"}, "t.cell": {"integer"}})
	if code != http.StatusSeeOther || !strings.Contains(body, "not a whole number") || !strings.Contains(body, `data-code="invalid_param"`) {
		t.Fatalf("a mistyped param: %d %s", code, body)
	}
	code, loc, body = s.postFollow("paul", "/web/rooms/lab/invoke/move", url.Values{"p.cell": {"5"}, "t.cell": {"integer"}, "from": {"surface-board"}})
	if code != http.StatusSeeOther || loc != "/rooms/lab#surface-board" || !strings.Contains(body, `class="feedback ok"`) || !strings.Contains(body, "Done: move went through") {
		t.Fatalf("a successful invocation's confirmation: %d %s %s", code, loc, body)
	}
	code, _ = s.post("paul", "/web/rooms/lab/message", url.Values{"body": {"hello from the page"}})
	if _, _, page := s.get("alice", "/rooms/lab"); code != http.StatusSeeOther || !strings.Contains(page, "hello from the page") || !strings.Contains(page, "paul:web") {
		t.Fatalf("a message from the page: %d %s", code, page)
	}
}

// Views with a render hint are drawn as surfaces: a metric, markdown, a
// table, a feed, a watch of state entries, buttons for actions, a choice
// whose buttons invoke an action with each value.
func TestSurfacesDrawViewsByRenderHints(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	ctx := context.Background()
	s.write("_shared", "phase", `"voting"`)
	s.write("_shared", "tasks", `[{"id": "t1", "title": "Paint"}, {"id": "t2", "title": "Frame"}]`)
	if _, err := s.svc.RegisterAction(ctx, s.admin, "lab", substrate.ActionDef{ID: "vote",
		Params: map[string]substrate.ParamSpec{"option": {Type: "string", Required: true}},
		Writes: []substrate.WriteTemplate{{Key: "vote", Value: []byte(`"${params.option}"`)}}}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []substrate.ViewDef{
		{ID: "open_tasks", Expr: `size(state._shared.tasks)`, Render: []byte(`{"type": "metric", "label": "Open tasks", "unit": "tasks", "order": 1}`)},
		{ID: "plan", Expr: `"# The plan\n\nShip **today**."`, Render: []byte(`{"type": "markdown", "order": 2}`)},
		{ID: "task_table", Expr: `state._shared.tasks`, Render: []byte(`{"type": "table", "columns": [{"key": "title", "label": "Task"}], "order": 3}`)},
		{ID: "phase_watch", Expr: `true`, Render: []byte(`{"type": "watch", "keys": ["_shared.phase", "_shared.missing"], "order": 4}`)},
		{ID: "ballot", Expr: `["red", "blue"]`, Render: []byte(`{"type": "choice", "action": "vote", "param": "option", "label": "Vote", "order": 5}`)},
	} {
		if _, err := s.svc.RegisterView(ctx, s.admin, "lab", v); err != nil {
			t.Fatal(err)
		}
	}
	code, _, body := s.get("alice", "/rooms/lab")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	for _, want := range []string{`id="surface-open_tasks"`, `Open tasks`, `<p class="metric-value">2 <span class="muted">tasks</span>`,
		`<h4>The plan</h4>`, `<strong>today</strong>`, `<th scope="col">Task</th>`, `<td data-label="Task">Paint</td>`,
		`<dt>_shared.phase</dt><dd>voting</dd>`, `not set`, `action="/web/rooms/lab/invoke/vote"`, `<button>red</button>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the surfaces lack %q", want)
		}
	}
	// A choice's button invokes its action with that value.
	if code, _ := s.post("alice", "/web/rooms/lab/invoke/vote", url.Values{"p.option": {`"blue"`}}); code != http.StatusSeeOther || s.value("_shared", "vote") != `"blue" by alice:web` {
		t.Fatalf("voting from the choice: %d, %q", code, s.value("_shared", "vote"))
	}
}

// The loom page works the room's loom with the same → commands as
// sync_loom: a tree planted from its form, a branch and an annotation from
// the node's forms, the tree drawn as an ARIA tree, the node read back
// with its annotations, continuations and presence.
func TestLoomPage(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	code, body := s.post("alice", "/web/rooms/lab/loom", url.Values{"op": {"new"}, "name": {"house"}, "text": {"The house stood empty."}})
	if code != 200 || !strings.Contains(body, "planted tree 1") || !strings.Contains(body, `id="loom-url" data-url="/web/rooms/lab/loom?tree=1&amp;node=1"`) {
		t.Fatalf("planting: %d %s", code, body)
	}
	code, body = s.post("alice", "/web/rooms/lab/loom", url.Values{"tree": {"1"}, "node": {"1"}, "op": {"branch"}, "text": {`A door "creaked" \ open.`}})
	if code != 200 || !strings.Contains(body, "✓") || !strings.Contains(body, `data-url="/web/rooms/lab/loom?tree=1&amp;node=2"`) {
		t.Fatalf("branching from the form does not land on the new node: %d %s", code, body)
	}
	if code, body = s.post("alice", "/web/rooms/lab/loom", url.Values{"tree": {"1"}, "node": {"1"}, "op": {"annotate"}, "text": {"too quiet"}}); code != 200 {
		t.Fatalf("annotating: %d %s", code, body)
	}
	code, _, page := s.get("alice", "/web/rooms/lab/loom?tree=1&node=1")
	for _, want := range []string{"The house stood empty.", "A door &#34;creaked&#34; \\ open.", "too quiet", `action="/web/rooms/lab/loom"`,
		`role="tree"`, `role="treeitem" id="t-1"`, `aria-selected="true"`, `role="group"`, `id="kids"`, `name="tree" value="1"`} {
		if code != 200 || !strings.Contains(page, want) {
			t.Errorf("the loom page lacks %q (%d)", want, code)
		}
	}
	// Who is where: alice, on the branch she last worked.
	if !strings.Contains(page, "Who is where") || !strings.Contains(page, `● alice:web</span> <span class="muted">(human)</span> on branch 1`) {
		t.Errorf("the loom page shows no presence: %s", page)
	}
	// A person's nodes are a human's (models' carry ›).
	if !strings.Contains(page, "alice:web</span>") || strings.Contains(page, "alice:web›") {
		t.Errorf("alice's nodes are not marked as a person's: %s", page)
	}
	// Documents: written from the form, read on the page.
	if code, body := s.post("alice", "/web/rooms/lab/loom", url.Values{"op": {"write"}, "doc": {"notes"}, "text": {"Remember the door."}}); code != 200 || !strings.Contains(body, "✓") {
		t.Fatalf("writing a document: %d %s", code, body)
	}
	if code, _, page := s.get("alice", "/web/rooms/lab/loom?doc=notes"); code != 200 || !strings.Contains(page, "Remember the door.") {
		t.Errorf("reading a document: %d %s", code, page)
	}
	if code, _, _ := s.get("alice", "/web/rooms/lab/loom?doc="+url.QueryEscape(`x" → add "y`)); code != 400 {
		t.Errorf("a document name that smuggles a command: %d", code)
	}
	// A node's text may run over several paragraphs and hold curly
	// quotes, which a command line cannot carry: the form's command gets
	// them back after parsing, the node holds them as written.
	code, body = s.post("alice", "/web/rooms/lab/loom", url.Values{"tree": {"1"}, "node": {"1"}, "op": {"branch"}, "text": {"She said “stay”.\r\n\nHe \"did\" not."}})
	if code != 200 || !strings.Contains(body, "She said “stay”.\n\nHe &#34;did&#34; not.</div>") {
		t.Fatalf("a text over two paragraphs: %d %s", code, body)
	}
	if code, body := s.post("alice", "/web/rooms/lab/loom", url.Values{"tree": {"1"}, "node": {"1"}, "op": {"branch"}, "text": {"odd \ue000 char"}}); code != 400 || !strings.Contains(body, "cannot carry") {
		t.Fatalf("a text with the form's stand-in character: %d", code)
	}
	// The command box still runs any command.
	if code, body := s.post("alice", "/web/rooms/lab/loom", url.Values{"commands": {"→ tree summary"}}); code != 200 || !strings.Contains(body, "3 nodes") {
		t.Fatalf("the command box: %d %s", code, body)
	}
	// The page's main part alone (what its script swaps in).
	if code, _, part := s.get("alice", "/web/rooms/lab/loom?tree=1&node=2&part=main"); code != 200 || strings.Contains(part, "<html") || !strings.Contains(part, `id="loom-url"`) {
		t.Errorf("the main part: %d %s", code, part)
	}
	// On the room page the loom's own scopes (its machinery) are folded
	// away under Internals, sent only when asked for (?internals); the
	// room's other scopes are folded behind their counts, there.
	s.write("_shared", "note", `"hello"`)
	_, _, room := s.get("alice", "/rooms/lab")
	if !strings.Contains(room, `<details id="internals" class="internals"><summary>`) || strings.Contains(room, `id="internal-_loom"`) || !strings.Contains(room, `internals=1#internals`) || !strings.Contains(room, `<details id="scope-_shared">`) {
		t.Errorf("the room page does not fold the loom's scopes alone: %s", room)
	}
	_, _, room = s.get("alice", "/rooms/lab?internals=1")
	if !strings.Contains(room, `<details id="internals" class="internals" open><summary>`) || strings.Index(room, `id="internal-_loom"`) < strings.Index(room, `id="internals"`) || !strings.Contains(room, `<details id="scope-_shared">`) {
		t.Errorf("the room page asked for its internals does not show them: %s", room)
	}
}

// "Branch from N" branches from the node on screen: the page showed tree
// 1 while the person's agent stood in tree 2, and the branch went under
// tree 2's node of that number, text the person never saw. Every form
// names its tree, the URL names tree and node, and a page with no tree
// named opens where the person stands.
func TestLoomBranchFromTheNodeOnScreen(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	run := func(cmds string) {
		t.Helper()
		if code, body := s.post("alice", "/web/rooms/lab/loom", url.Values{"commands": {cmds}}); code != 200 || strings.Contains(body, "✗") {
			t.Fatalf("%s: %d %s", cmds, code, body)
		}
	}
	run(`→ new tree "one" "ONE-ROOT"` + "\n" + `→ add "ONE-2"` + "\n" + `→ add "ONE-3"`)
	run(`→ new tree "two" "TWO-ROOT"` + "\n" + `→ add "TWO-2"` + "\n" + `→ add "TWO-3"`)
	// alice's agent stands in tree 2 now; with no tree named, the page
	// opens there.
	if _, _, page := s.get("alice", "/web/rooms/lab/loom"); !strings.Contains(page, `<h2 id="h-tree">Tree 2: two</h2>`) || !strings.Contains(page, "TWO-3") {
		t.Fatalf("the page does not open where alice stands")
	}
	// She opens tree 1's node 3 by its URL and branches from it.
	_, _, page := s.get("alice", "/web/rooms/lab/loom?tree=1&node=3")
	if !strings.Contains(page, "ONE-3") || !strings.Contains(page, `<input type="hidden" name="tree" value="1"><input type="hidden" name="node" value="3"><input type="hidden" name="op" value="branch">`) {
		t.Fatalf("tree 1's node 3 is not on screen with its branch form: %s", page)
	}
	code, body := s.post("alice", "/web/rooms/lab/loom", url.Values{"tree": {"1"}, "node": {"3"}, "op": {"branch"}, "text": {"UNDER-ONE-3"}})
	if code != 200 || !strings.Contains(body, `data-url="/web/rooms/lab/loom?tree=1&amp;node=4"`) {
		t.Fatalf("the branch did not land at tree 1's node 4: %d %s", code, body)
	}
	var tree1, tree2 string
	_, _, tree1 = s.get("alice", "/web/rooms/lab/loom?tree=1&node=4")
	_, _, tree2 = s.get("alice", "/web/rooms/lab/loom?tree=2&node=3")
	if !strings.Contains(tree1, "UNDER-ONE-3") || !strings.Contains(tree1, `<a id="go-parent" href="/web/rooms/lab/loom?tree=1&amp;node=3">`) {
		t.Errorf("the new node is not under tree 1's node 3: %s", tree1)
	}
	if strings.Contains(tree2, "UNDER-ONE-3") {
		t.Errorf("the branch went under tree 2's node 3, which was not on screen")
	}
	// A form that names no tree is refused, not guessed.
	if code, body := s.post("alice", "/web/rooms/lab/loom", url.Values{"node": {"3"}, "op": {"branch"}, "text": {"x"}}); code != 400 || !strings.Contains(body, "needs a tree and a node") {
		t.Errorf("a form without its tree: %d", code)
	}
	// A tree or node that does not exist is a 404 that names the trees.
	if code, _, page := s.get("alice", "/web/rooms/lab/loom?tree=9"); code != 404 || !strings.Contains(page, "tree 9 does not exist") {
		t.Errorf("tree 9: %d", code)
	}
	if code, _, page := s.get("alice", "/web/rooms/lab/loom?tree=1&node=99"); code != 404 || !strings.Contains(page, "node 99 does not exist") {
		t.Errorf("node 99: %d", code)
	}
}

// An entry's timer is a countdown badge the page's script keeps ticking,
// from the server's expiry time.
func TestTimerIsACountdown(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	if _, err := s.svc.WriteState(context.Background(), s.admin, "lab", []substrate.Write{{Scope: "_shared", Key: "offer", Value: []byte(`"half price"`), Timer: &substrate.Timer{MS: 600_000}}}, false); err != nil {
		t.Fatal(err)
	}
	_, _, body := s.get("alice", "/rooms/lab")
	if !strings.Contains(body, `<time class="countdown" datetime="`) || !strings.Contains(body, `data-effect="delete"`) {
		t.Fatalf("no countdown for the timed entry: %s", body)
	}
}

// An owner sees every entry, those their gate hides marked disabled and
// gated ones marked so; nobody else sees a disabled entry.
func TestDisabledEntriesMarkedForOwners(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "olga")
	ctx := context.Background()
	s.share("olga", "observer")
	if _, err := s.svc.WriteState(ctx, s.admin, "lab", []substrate.Write{
		{Scope: "_shared", Key: "later", Value: []byte(`"not yet"`), Enabled: `"go" in state._shared`},
		{Scope: "_shared", Key: "now", Value: []byte(`"open"`), Enabled: `true`},
	}, true); err != nil {
		t.Fatal(err)
	}
	_, _, body := s.get("alice", "/rooms/lab")
	if !strings.Contains(body, `class="disabled"><td data-label="Key">later <span class="badge">disabled</span>`) || !strings.Contains(body, `now <span class="badge">gated</span>`) {
		t.Fatalf("the owner's page does not mark the gated entries: %s", body)
	}
	if _, _, body := s.get("olga", "/rooms/lab"); strings.Contains(body, "not yet") {
		t.Fatal("HOLE: an observer sees a disabled entry")
	}
	// The REST read is unchanged for the room token.
	st, err := s.svc.ReadState(ctx, s.admin, "lab", substrate.ReadQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range st.Entries {
		if e.Key == "later" || e.Gated || e.Disabled {
			t.Fatalf("a plain read shows %+v", e)
		}
	}
}

// Append logs show as feeds, newest last; the audit log too, for owners.
func TestLogsAsFeeds(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "olga")
	ctx := context.Background()
	s.share("olga", "observer")
	for _, line := range []string{`"first entry"`, `"second entry"`} {
		if _, err := s.svc.WriteState(ctx, s.admin, "lab", []substrate.Write{{Scope: "_shared", Value: []byte(line), Append: true}}, false); err != nil {
			t.Fatal(err)
		}
	}
	_, _, body := s.get("alice", "/rooms/lab")
	first, second := strings.Index(body, "first entry"), strings.Index(body, "second entry")
	if first < 0 || second < first || !strings.Contains(body, `<h3>_audit <span class="muted">(`) {
		t.Fatalf("the owner's page shows no log feeds: %s", body)
	}
	if _, _, body := s.get("olga", "/rooms/lab"); !strings.Contains(body, "second entry") || strings.Contains(body, "<h3>_audit</h3>") {
		t.Fatalf("an observer's feeds: %s", body)
	}
}

// A live stream outlives a proxy's read timeout: behind the README's nginx
// and Caddy snippets with a 1 s read timeout, an idle stream kept open by
// its keep-alive comments still carries a change after 3.5 s, and tells
// nginx not to buffer it (X-Accel-Buffering: no).
func TestLiveStreamSurvivesProxyReadTimeout(t *testing.T) {
	s := newSite(t, web.Options{Heartbeat: 300 * time.Millisecond}, "alice")
	upstream := strings.TrimPrefix(s.srv.URL, "http://")
	for _, p := range []struct {
		name  string
		start func(testing.TB, string, proxytest.Options) string
	}{{"nginx", proxytest.Nginx}, {"caddy", proxytest.Caddy}} {
		t.Run(p.name, func(t *testing.T) {
			proxy := p.start(t, upstream, proxytest.Options{ReadTimeout: time.Second})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", proxy+"/live/rooms/lab", nil)
			req.AddCookie(&http.Cookie{Name: "test_person", Value: "alice"})
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("live stream through %s: %d %v", p.name, res.StatusCode, res.Header)
			}
			if p.name == "caddy" && res.Header.Get("X-Accel-Buffering") != "no" {
				// nginx consumes the header; Caddy passes it on.
				t.Fatalf("X-Accel-Buffering %q", res.Header.Get("X-Accel-Buffering"))
			}
			lines := make(chan string, 64)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(res.Body)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			keepAlives := 0
			quiet := time.After(3500 * time.Millisecond)
		idle:
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("the proxy closed the idle stream after %d keep-alives", keepAlives)
					}
					if strings.HasPrefix(l, ": keep-alive") {
						keepAlives++
					}
				case <-quiet:
					break idle
				}
			}
			s.write("_shared", "after-idle-"+p.name, "1")
			deadline := time.After(5 * time.Second)
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("stream closed before the change arrived (%d keep-alives)", keepAlives)
					}
					if strings.HasPrefix(l, "event: change") {
						if keepAlives < 3 {
							t.Fatalf("%d keep-alives in 3.5 s at a 300 ms interval", keepAlives)
						}
						return
					}
				case <-deadline:
					t.Fatal("no change event within 5 s after the idle period")
				}
			}
		})
	}
}

// Many pages follow one room on a pool of two connections while writes
// land concurrently: every stream renders its reader's page at each
// change and ends at the room's last seq (no stream waits on a
// connection another holds).
func TestLiveStreamsManyOnTinyPool(t *testing.T) {
	s := newSite(t, web.Options{MaxStreams: 64}, "alice")
	seq := s.seq()
	var streams []<-chan string
	for i := range 24 {
		path := "/live/rooms/lab?seq=" + seq
		who := "alice"
		if i%3 == 0 {
			path, who = "/live/rooms/lab?seq="+seq+"&view="+s.room.ViewToken, ""
		}
		streams = append(streams, s.stream(who, path, ""))
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { s.write("_shared", fmt.Sprintf("k%d", i), strconv.Itoa(i)) })
	}
	wg.Wait()
	last := "id: " + s.seq() + "\n"
	for i, ev := range streams {
		deadline := time.After(15 * time.Second)
	follow:
		for {
			select {
			case e := <-ev:
				if strings.HasPrefix(e, last) {
					if !strings.Contains(e, `"patches"`) && !strings.Contains(e, `"html"`) {
						t.Fatalf("stream %d: an event without content: %s", i, e)
					}
					break follow
				}
			case <-deadline:
				t.Fatalf("stream %d never reached %s", i, last)
			}
		}
	}
}

// The room page as a person reads it (issue 30): a timer says how long is
// left and when, in words, not RFC 3339 with microseconds; JSON shows
// ">" and "&" as themselves, not Go's \u003e escapes; the live line is
// shown only by the script that keeps it true (no "Connecting…" forever
// without JavaScript); surface groups come in their declared order with
// titles for people; a board hint draws lanes of cards.
func TestRoomPageReadsForPeople(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	ctx := context.Background()
	if _, err := s.svc.WriteState(ctx, s.admin, "lab", []substrate.Write{
		{Scope: "_shared", Key: "offer", Value: []byte(`"half price"`), Timer: &substrate.Timer{MS: 600_000}},
		{Scope: "_shared", Key: "rule", Value: []byte(`{"when": "points > 3 && owner != none"}`)},
		{Scope: "_shared", Key: "tasks", Value: []byte(`[{"id": "t1", "title": "Paint", "status": "todo"}, {"id": "t2", "title": "Sand", "status": "done"}, {"id": "t3", "title": "Prime", "status": "todo"}]`)},
	}, false); err != nil {
		t.Fatal(err)
	}
	for _, v := range []substrate.ViewDef{
		{ID: "board", Expr: `state._shared.tasks`, Render: []byte(`{"type": "board", "group_by": "status", "lanes": ["todo", "doing", "done"], "order": 5, "group": "task_flow"}`)},
		{ID: "count", Expr: `size(state._shared.tasks)`, Render: []byte(`{"type": "metric", "label": "Tasks", "order": 1, "group": "progress"}`)},
		{ID: "zzz_first", Expr: `1`, Render: []byte(`{"type": "metric", "label": "First", "order": 0, "group": "Zed Team"}`)},
	} {
		if _, err := s.svc.RegisterView(ctx, s.admin, "lab", v); err != nil {
			t.Fatal(err)
		}
	}
	_, _, body := s.get("alice", "/rooms/lab")
	if !regexp.MustCompile(`data-effect="delete">expires in (9m 5[0-9]s|10m 0s) \(at \d\d:\d\d:\d\d UTC\)</time>`).MatchString(body) {
		t.Errorf("the timer does not read as a time left and a time of day: %s", body)
	}
	if strings.Contains(body, `\u003e`) || strings.Contains(body, `\u0026`) || !strings.Contains(body, `points &gt; 3 &amp;&amp; owner`) {
		t.Errorf("JSON on the page carries Go's escapes: %s", body)
	}
	if !strings.Contains(body, `<p class="live" id="live" role="status" aria-live="polite" hidden>`) || !strings.Contains(body, `<noscript><p class="live">Live updates need JavaScript`) {
		t.Errorf("the live line shows without the script: %s", body)
	}
	zed, progress, flow := strings.Index(body, `<h2 id="group-Zed Team">Zed Team <span`), strings.Index(body, `<h2 id="group-progress">Progress <span`), strings.Index(body, `<h2 id="group-task_flow">Task flow <span`)
	if zed < 0 || progress < zed || flow < progress {
		t.Errorf("surface groups not in declared order with human titles (%d %d %d): %s", zed, progress, flow, body)
	}
	for _, want := range []string{`<h4 id="lane-board-0">todo <span class="muted">(2)</span></h4>`, `<h4 id="lane-board-1">doing <span class="muted">(0)</span></h4>`,
		`<h4 id="lane-board-2">done <span class="muted">(1)</span></h4>`, `<li class="bcard"><strong>Paint</strong>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the board lacks %q: %s", want, body)
		}
	}
}

// The page and a model share the loom: a continuation the model asks for
// (no generator here) shows as pending on the node and alice fulfils it
// from the page; the model's turn on its branch shows as held, with the
// branch forms refused there; the model's thinking is shown to the owner,
// folded, and to nobody else; owners set an agent's loom permissions from
// the page.
func TestLoomPageSharedWithAModel(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "paul")
	ctx := context.Background()
	s.share("paul", "participant")
	claude, err := s.svc.Join(ctx, s.admin, "lab", substrate.JoinRequest{ID: "claude", Name: "Claude"})
	if err != nil {
		t.Fatal(err)
	}
	lm := loom.Of(s.svc)
	if _, err := lm.Run(ctx, s.admin, "lab", `→ new tree "t" "ROOT"`+"\n→ permit claude loom_aware loom_generate doc_read"); err != nil {
		t.Fatal(err)
	}
	cp, err := s.svc.Authenticate(ctx, claude.Token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lm.Run(ctx, cp, "lab", "→ continue from 1 tree:1\n→ think the root wants a door ←"); err != nil {
		t.Fatal(err)
	}
	_, _, page := s.get("alice", "/web/rooms/lab/loom?tree=1&node=1")
	for _, want := range []string{`id="pending-here"`, "Continuation g1 of this node is pending", `id="fulfil-1"`, `<h2 id="h-think">Model thinking</h2>`, `<details class="thought"><summary>claude thought`, "the root wants a door"} {
		if !strings.Contains(page, want) {
			t.Errorf("alice's page lacks %q", want)
		}
	}
	if _, _, page := s.get("paul", "/web/rooms/lab/loom?tree=1&node=1"); strings.Contains(page, "the root wants a door") {
		t.Error("HOLE: a participant reads the model's thinking on the loom page")
	}
	code, body := s.post("alice", "/web/rooms/lab/loom", url.Values{"tree": {"1"}, "node": {"1"}, "op": {"fulfil"}, "req": {"g1"}, "text": {"A DOOR OPENED"}})
	if code != 200 || !strings.Contains(body, "✓ node 2 fulfils g1") || strings.Contains(body, `id="pending-here"`) || !strings.Contains(body, `data-url="/web/rooms/lab/loom?tree=1&amp;node=1"`) {
		t.Fatalf("fulfilling from the page: %d %s", code, body)
	}
	// The owner lets claude write, from the page.
	if code, body := s.post("alice", "/web/rooms/lab/loom", url.Values{"tree": {"1"}, "node": {"1"}, "op": {"permit"}, "agent": {"claude"},
		"perm-loom_aware": {"on"}, "perm-loom_write": {"on"}, "perm-loom_generate": {"on"}}); code != 200 || !strings.Contains(body, "claude (model): loom_aware, loom_write, loom_generate") {
		t.Fatalf("setting claude's permissions: %d %s", code, body)
	}
	// Alice's fulfilling took branch 1's turn; she yields it from the
	// page, and claude writes on under node 2: its turn now.
	if code, body := s.post("alice", "/web/rooms/lab/loom", url.Values{"tree": {"1"}, "node": {"1"}, "op": {"yield"}}); code != 200 || !strings.Contains(body, "✓ yielded branch 1") {
		t.Fatalf("yielding from the page: %d %s", code, body)
	}
	if _, err := lm.Run(ctx, cp, "lab", `→ add from:2 tree:1 "CLAUDE-LINE"`); err != nil {
		t.Fatal(err)
	}
	_, _, page = s.get("alice", "/web/rooms/lab/loom?tree=1&node=3")
	if !strings.Contains(page, `id="held-here"`) || !strings.Contains(page, "which is claude's turn until") || !strings.Contains(page, `<button id="branch-btn" disabled aria-describedby="held-here">`) {
		t.Fatalf("the held branch is not shown as held: %s", page)
	}
	if code, body := s.post("alice", "/web/rooms/lab/loom", url.Values{"tree": {"1"}, "node": {"3"}, "op": {"branch"}, "text": {"ON-HELD"}}); code != http.StatusConflict || !strings.Contains(body, "claude&#39;s turn") {
		t.Fatalf("branching on the held line: %d", code)
	}
	// Under node 1, which has a continuation, a branch is a new line of
	// alice's own: not held.
	if _, _, page := s.get("alice", "/web/rooms/lab/loom?tree=1&node=1"); strings.Contains(page, `id="held-here"`) {
		t.Error("a new branch under node 1 is shown as held")
	}
}

// The loom page on the tests' tiny pool (two connections): many people
// reading it while a model writes never deadlock nor fail; each read holds
// one connection at a time.
func TestLoomPageConcurrentTinyPool(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	ctx := context.Background()
	lm := loom.Of(s.svc)
	if _, err := lm.Run(ctx, s.admin, "lab", `→ new tree "t" "ROOT"`); err != nil {
		t.Fatal(err)
	}
	claude, err := s.svc.Join(ctx, s.admin, "lab", substrate.JoinRequest{ID: "claude", Name: "Claude"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lm.Run(ctx, s.admin, "lab", "→ permit claude all"); err != nil {
		t.Fatal(err)
	}
	cp, err := s.svc.Authenticate(ctx, claude.Token)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 13)
	go func() {
		for i := range 20 {
			if _, err := lm.Run(ctx, cp, "lab", fmt.Sprintf(`→ add from:%d tree:1 "line %d"`, i+1, i)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for c := range 12 {
		go func() {
			for i := range 8 {
				// Node 1 exists from the start; the rest come as the model
				// writes.
				path := "/web/rooms/lab/loom?tree=1&node=1"
				if (c+i)%2 == 1 {
					path = "/web/rooms/lab/loom?tree=1"
				}
				if i%2 == 1 {
					path += "&part=main&as=prose"
				}
				if code, _, _ := s.get("alice", path); code != 200 {
					done <- fmt.Errorf("%s: %d", path, code)
					return
				}
			}
			done <- nil
		}()
	}
	timeout := time.After(60 * time.Second)
	for range 13 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatal("readers and a writer on two connections did not finish in 60 s")
		}
	}
	if _, _, page := s.get("alice", "/web/rooms/lab/loom?tree=1&node=21"); !strings.Contains(page, "line 19") {
		t.Fatal("the model's last line is not on the page")
	}
}

// collabSite is a site whose room has a collaborator record (written by
// the loom op a running collaborator uses) for agent claude.
func collabSite(t *testing.T) (*site, *substrate.Principal) {
	s := newSite(t, web.Options{}, "alice", "paul")
	ctx := context.Background()
	s.share("paul", "participant")
	claude, err := s.svc.Join(ctx, s.admin, "lab", substrate.JoinRequest{ID: "claude", Name: "Claude"})
	if err != nil {
		t.Fatal(err)
	}
	lm := loom.Of(s.svc)
	if _, err := lm.Run(ctx, s.admin, "lab", `→ new tree "t" "ROOT"`+"\n→ permit claude loom_aware loom_write"); err != nil {
		t.Fatal(err)
	}
	cp, err := s.svc.Authenticate(ctx, claude.Token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lm.CollabUpdate(ctx, cp, "lab", loom.CollabRecord{Model: "instruct", State: "starting", Tree: 1, Branch: "1", MaxCalls: 50, MaxTokens: 200000, MaxSeconds: 1800}, "collaborating"); err != nil {
		t.Fatal(err)
	}
	if _, err := lm.CollabUpdate(ctx, cp, "lab", loom.CollabRecord{Model: "instruct", State: "waiting", Tree: 1, Branch: "1", Calls: 3, PromptTokens: 3311, CompletionTokens: 56, MaxCalls: 50, MaxTokens: 200000, MaxSeconds: 1800}, "call 3"); err != nil {
		t.Fatal(err)
	}
	return s, cp
}

// The loom page shows each collaborator that runs itself: agent, what it
// is doing, calls and tokens against its budget; those allowed stop it
// from the page with a form that needs no script.
func TestLoomPageCollaborators(t *testing.T) {
	s, _ := collabSite(t)
	for _, who := range []string{"alice", "paul"} {
		_, _, page := s.get(who, "/web/rooms/lab/loom?tree=1&node=1&part=main")
		for _, want := range []string{`id="collab-claude"`, "waiting for its turn or a change on branch 1", `<span class="calls">3 of 50</span>`, "3311 prompt + 56 completion = 3367 of 200000"} {
			if !strings.Contains(page, want) {
				t.Errorf("%s's page lacks %q", who, want)
			}
		}
	}
	// paul (a participant without loom_write) sees why he cannot stop it.
	if _, _, page := s.get("paul", "/web/rooms/lab/loom?tree=1&node=1"); strings.Contains(page, `id="stop-claude"`) || !strings.Contains(page, "Stopping a collaborator takes room authority or loom_write") {
		t.Error("paul is offered the stop form, or not told why not")
	}
	_, _, page := s.get("alice", "/web/rooms/lab/loom?tree=1&node=1")
	if !strings.Contains(page, `id="stop-claude"`) || !strings.Contains(page, `name="op" value="stop"`) {
		t.Fatalf("the owner is not offered the stop form")
	}
	code, body := s.post("alice", "/web/rooms/lab/loom", url.Values{"tree": {"1"}, "node": {"1"}, "op": {"stop"}, "agent": {"claude"}})
	if code != 200 || !strings.Contains(body, "✓ asked collaborator claude to stop") || !strings.Contains(body, "stopping (asked by") || strings.Contains(body, `id="stop-claude"`) {
		t.Fatalf("stopping from the page: %d %s", code, body)
	}
	us, err := loom.Of(s.svc).CollaboratorUsage(context.Background(), s.admin, "lab")
	if err != nil || len(us) != 1 || us[0].Stop == "" {
		t.Fatalf("the record after stop: %+v %v", us, err)
	}
	if code, body := s.post("alice", "/web/rooms/lab/loom", url.Values{"op": {"stop"}, "agent": {"no body"}}); code != http.StatusBadRequest || !strings.Contains(body, "is not an agent id") {
		t.Errorf("a stop form naming no agent: %d", code)
	}
}

// A generation in flight shows on every participant's page, not only the
// asker's, and is gone when its nodes land.
func TestLoomPageShowsRunningGeneration(t *testing.T) {
	release := make(chan struct{}, 1)
	arrived := make(chan struct{}, 2)
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-stop:
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"text":" GENERATED-TEXT"}]}`))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })
	s, cp := collabSite(t)
	lm := loom.Attach(s.svc, loom.Options{GeneratorURL: srv.URL, GeneratorModel: "tiny"})
	ctx := context.Background()
	if _, err := lm.Run(ctx, s.admin, "lab", "→ permit claude loom_aware loom_write loom_generate"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := lm.Run(ctx, cp, "lab", "→ continue from 1 tree:1")
		done <- err
	}()
	<-arrived
	_, _, page := s.get("paul", "/web/rooms/lab/loom?tree=1&node=1&part=main")
	if !strings.Contains(page, `id="generating-here"`) || !strings.Contains(page, "Generating 1 continuation(s) of this node for claude") || !strings.Contains(page, `id="generating"`) {
		t.Fatalf("paul's page does not show claude's generation running: %s", page)
	}
	release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_, _, page = s.get("paul", "/web/rooms/lab/loom?tree=1&node=1&part=main")
	if strings.Contains(page, `id="generating-here"`) || !strings.Contains(page, "GENERATED-TEXT") {
		t.Fatalf("after the answer: still generating, or no node: %s", page)
	}
}

// legacyValue stores raw in scope/key of lab with SQL of its own, past
// the substrate's write rules (its depth limit above all): a row written
// before a rule existed. It bumps the room's seq with it, so no snapshot
// cached at the old seq hides it.
func (s *site) legacyValue(scope, key string, raw []byte) {
	s.t.Helper()
	ctx := context.Background()
	_, err := s.db.Exec(ctx, `WITH r AS (UPDATE rooms SET seq = seq + 1 WHERE id = 'lab' RETURNING seq)
		INSERT INTO state (room_id, scope, key, value, version, revision, writer, via, created_at, updated_at)
		SELECT 'lab', $1, $2, $3::jsonb, 1, r.seq, '_room', 'direct', now(), now() FROM r`, scope, key, string(raw))
	if err != nil {
		s.t.Fatal(err)
	}
}

// deepJSON is issue 41's value: levels arrays and objects nested
// alternately, 4 bytes a level on average ([{"k":…}]), so 9,900 levels are
// some 40 KB (the was 60 KB, its depth the same).
func deepJSON(levels int) []byte {
	var b strings.Builder
	for i := range levels {
		if i%2 == 0 {
			b.WriteString(`[`)
		} else {
			b.WriteString(`{"k":`)
		}
	}
	b.WriteString(`"x"`)
	for i := levels - 1; i >= 0; i-- {
		if i%2 == 0 {
			b.WriteString(`]`)
		} else {
			b.WriteString(`}`)
		}
	}
	return []byte(b.String())
}
