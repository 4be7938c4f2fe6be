package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/lobby/teamroom"
	"github.com/syncsubstrate/sync/lobby/web"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/activity"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// teamSite is the pages over the real-size room of issue 42
// (lobby/teamroom: "launch", owned by maya, raj a collaborator; 10
// agents, 313 messages in 8 threads and 12 invocations' messages, a
// loom of 75 nodes), beside alice's small "lab".
func teamSite(t *testing.T) (*site, *teamroom.Room) {
	t.Helper()
	s := newSite(t, web.Options{}, "alice", "maya", "raj")
	room, err := teamroom.Build(context.Background(), s.svc, s.lob, teamroom.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s, room
}

// listed are the seqs of the page's message list, in order.
func listed(page string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`<li id="msg-(\d+)"`).FindAllStringSubmatch(between(page, `id="message-list"`, "</ol>"), -1) {
		out = append(out, m[1])
	}
	return out
}

// newestSeqs are the seqs of the room's newest n messages, oldest first,
// as the context reads them (its own query, not the page's).
func newestSeqs(t *testing.T, s *site, room string, n int) []string {
	t.Helper()
	env, err := s.svc.Context(context.Background(), substrate.RoomPrincipal(room), room, substrate.ContextRequest{Only: []string{"messages"}, MessagesLimit: n, Peek: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range env.Messages.Recent {
		out = append(out, fmt.Sprint(m["seq"]))
	}
	return out
}

// link is the href of the message pager's link with rel (prev, next),
// without its fragment.
func link(page, rel string) string {
	m := regexp.MustCompile(`<a rel="` + rel + `" href="([^"#]+)`).FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// Issue 42, bug 1: on a room of 313 messages the list showed the oldest
// 50 for good; a message sent from the page's box answered "Sent." and
// never appeared, on reload or live; the header said "313 in all · 50
// new". The list is the newest, pages back and forth with plain links,
// follows the room live, and its counts are true.
func TestMessagesAtRealSizeShowTheNewest(t *testing.T) {
	s, room := teamSite(t)
	path := "/rooms/" + room.ID
	total := teamroom.Messages + teamroom.Invocations
	code, _, page := s.get("maya", path)
	if code != 200 {
		t.Fatalf("room page: %d", code)
	}
	got, want := listed(page), newestSeqs(t, s, room.ID, 50)
	if len(got) != 50 || first(got) != first(want) || last(got) != last(want) {
		t.Fatalf("the list shows %d messages, #%s … #%s; want the newest 50, #%s … #%s", len(got), first(got), last(got), first(want), last(want))
	}
	if !strings.Contains(page, fmt.Sprintf("%d in all", total)) || !strings.Contains(page, fmt.Sprintf("The newest 50 of %d.", total)) ||
		!strings.Contains(page, fmt.Sprintf(`data-total="%d"`, total)) {
		t.Errorf("the counts: %s %s", text(between(page, `id="summary-messages"`, "</div>")), between(page, `id="messages-shown"`, "</p>"))
	}

	// Sent from the box: there on the page it leads back to, counted.
	code, _, page = s.postFollow("maya", "/web/rooms/"+room.ID+"/message", url.Values{"body": {"from the box, once"}})
	if body := between(page, `<li id="msg-`+last(listed(page))+`"`, "</li>"); code != 303 || len(listed(page)) != 50 || !strings.Contains(body, "from the box, once") {
		t.Fatalf("after sending from the box (%d) the list ends with %q", code, body)
	}
	if !strings.Contains(page, fmt.Sprintf("%d in all", total+1)) {
		t.Errorf("after a message the header says %s", text(between(page, `id="summary-messages"`, "</div>")))
	}

	// Live: the next one reaches the open page.
	events := s.stream("maya", "/live/rooms/"+room.ID+"?seq="+seqOf(t, s, room.ID), "")
	s.liveSettled()
	if code, body := s.post("maya", "/web/rooms/"+room.ID+"/message", url.Values{"body": {"from the box, twice"}}); code != 303 {
		t.Fatalf("second message: %d %s", code, body)
	}
	for ev := ""; !strings.Contains(ev, "from the box, twice"); {
		ev = next(t, events, 10*time.Second)
	}

	// Earlier: the 50 before the list's first, with links that need no
	// script, back to the room's first message and forward again.
	shownFirst := first(listed(page))
	older := link(page, "prev")
	if older == "" {
		t.Fatalf("no link to earlier messages: %s", between(page, `id="messages-shown"`, "</ol>"))
	}
	_, _, page = s.get("maya", path+older)
	all := newestSeqs(t, s, room.ID, 500)
	at := slices.Index(all, shownFirst)
	if at < 50 {
		t.Fatalf("the list's first, #%s, is not among the room's messages past the 50th", shownFirst)
	}
	want = all[at-50 : at]
	if got := listed(page); len(got) != 50 || last(got) == shownFirst || first(got) != first(want) || last(got) != last(want) {
		t.Fatalf("earlier messages (%s): #%s … #%s, want #%s … #%s", older, first(got), last(got), first(want), last(want))
	}
	if !strings.Contains(page, fmt.Sprintf("Earlier messages: 50 of %d, not live.", total+2)) || !strings.Contains(page, `data-page="earlier"`) {
		t.Errorf("an earlier page does not say so: %s", between(page, `id="messages-shown"`, "</p>"))
	}
	pages := 1
	for prev := link(page, "prev"); prev != ""; prev = link(page, "prev") {
		_, _, page = s.get("maya", path+prev)
		if pages++; pages > 10 {
			t.Fatal("paging back does not end")
		}
	}
	if got := listed(page); first(got) != all[0] || pages != 6 {
		t.Fatalf("the earliest page (after %d) starts at #%s, want #%s", pages, first(got), all[0])
	}
	for nxt := link(page, "next"); nxt != ""; nxt = link(page, "next") {
		_, _, page = s.get("maya", path+nxt)
		if pages--; pages < -3 {
			t.Fatal("paging forward does not end")
		}
	}
	if body := between(page, `<li id="msg-`+last(listed(page))+`"`, "</li>"); !strings.Contains(body, "from the box, twice") {
		t.Fatalf("paging forward ends at %q", body)
	}
}

// seqOf is a room's seq.
func seqOf(t *testing.T, s *site, room string) string {
	t.Helper()
	r, err := s.svc.GetRoom(context.Background(), substrate.RoomPrincipal(room), room)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(r.Seq)
}

func first(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return xs[0]
}

func last(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return xs[len(xs)-1]
}

// between is page from the first from to the next to after it.
func between(page, from, to string) string {
	i := strings.Index(page, from)
	if i < 0 {
		return ""
	}
	rest := page[i:]
	if j := strings.Index(rest, to); j >= 0 {
		return rest[:j+len(to)]
	}
	return rest
}

// Issue 42, bug 7: Recent activity and "Last change" showed storage keys
// (_loom.2.c:13:1, _acks.825, maya:web.loom:t:…), and after some loom work
// the whole feed was internals. They say what happened in the room's
// words; ordinary keys stay named in their scope.
func TestActivityInPeoplesWords(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	ctx := context.Background()
	lm := loom.Of(s.svc)
	for _, a := range [][2]string{{"raj", "raj"}, {"planner", "planner"}, {"ana", "Ana"}} {
		s.join(a[0], a[1])
	}
	agent := func(id string) *substrate.Principal {
		p, err := s.svc.AgentPrincipal(ctx, "lab", id)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	raj, planner, ana := agent("raj"), agent("planner"), agent("ana")
	run := func(p *substrate.Principal, cmds string) {
		t.Helper()
		res, err := lm.Run(ctx, p, "lab", cmds)
		if err != nil {
			t.Fatalf("%s: %v", cmds, err)
		}
		if strings.Contains(res.Text, "✗") {
			t.Fatalf("%s: %s", cmds, res.Text)
		}
	}
	invoke := func(p *substrate.Principal, action, params string) *substrate.InvokeResult {
		t.Helper()
		res, err := s.svc.Invoke(ctx, p, "lab", action, json.RawMessage(params))
		if err != nil {
			t.Fatalf("%s %s: %v", action, params, err)
		}
		return res
	}
	s.write("tasks", "t12", `{"title": "write the launch note"}`)
	s.write("_tasks", "t13", `{"title": "a communal scope of the room's own"}`)
	run(s.admin, `→ new tree "checkout-launch" "The launch, from the top"`+"\n"+"→ permit raj loom_write loom_generate\n→ permit planner loom_write")
	run(raj, `→ add from:1 "What the customer sees first"`)
	run(raj, "→ continue from 2\n→ yield")
	run(planner, `→ fulfil g1 "A cart that remembers them"`)
	run(raj, "→ jump 3")
	sent := invoke(ana, "_send_message", `{"body": "Can you take the launch note?", "to": "planner", "ack": true, "subject": "Launch note"}`)
	invoke(planner, "_ack", fmt.Sprintf(`{"seq": %d}`, *sent.Writes[0].SortKey))

	_, _, page := s.get("alice", "/rooms/lab")
	feed := text(between(page, `<section id="activity"`, "</section>"))
	last := text(between(page, `id="summary-last"`, "</div>"))
	for _, raw := range []string{"_loom", "_acks", "_threads", "_messages", ":t:", "loom:", "n:", "c:", "gen:", "_cooldowns", "_agents"} {
		if strings.Contains(feed, raw) {
			t.Errorf("Recent activity shows %q:\n%s", raw, feed)
		}
		if strings.Contains(last, raw) {
			t.Errorf("Last change shows %q: %s", raw, last)
		}
	}
	for _, want := range []string{
		"raj added node 2 after node 1 in checkout-launch",
		"raj asked for a continuation in checkout-launch, then gave up the turn", // its request, fulfilled, is gone
		"the room added raj",
		"planner wrote the continuation of node 2 in checkout-launch",
		"raj moved to another place in checkout-launch",
		"Ana sent a message in “Launch note”",
		"planner acknowledged Ana’s message",
		"the room wrote tasks.t12",
		"the room wrote _tasks.t13",
	} {
		if !strings.Contains(feed, want) {
			t.Errorf("Recent activity lacks %q:\n%s", want, feed)
		}
	}
	if want := "planner acknowledged Ana’s message"; !strings.Contains(last, want) {
		t.Errorf("Last change says %q, want %q", last, want)
	}
}

// text is HTML's text: tags dropped, entities read, spaces folded.
func text(h string) string {
	h = regexp.MustCompile(`<[^>]*>`).ReplaceAllString(h, " ")
	return strings.Join(strings.Fields(html.UnescapeString(h)), " ")
}

// On the real-size room, after its loom work and more of raj's, neither
// its owner nor a collaborator reads a storage key of the system's in
// Recent activity or Last change: they read who did what, in the loom's
// trees by name.
func TestActivityAtRealSizeInPeoplesWords(t *testing.T) {
	s, room := teamSite(t)
	ctx := context.Background()
	raj, err := s.lob.PersonActor(ctx, room.Member.UserID, room.Member.Username, room.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := loom.Of(s.svc).Run(ctx, raj, room.ID, "→ add tree:1 from:13 \"Raj's take on node 13\"\n→ annotate 13 \"worth a second look\"\n→ yield"); err != nil || res.Errors > 0 {
		t.Fatalf("raj's loom work: %v %+v", err, res)
	}
	for _, person := range []string{"maya", "raj"} {
		_, _, page := s.get(person, "/rooms/"+room.ID)
		feed := text(between(page, `<section id="activity"`, "</section>"))
		last := text(between(page, `id="summary-last"`, "</div>"))
		for _, raw := range []string{"_loom", "_acks", "_threads", "_messages", ":t:", "loom:", "n:", "c:", "lease:", "at:", "_cooldowns", "_agents", room.Member.Username + ":web."} {
			if strings.Contains(feed, raw) {
				t.Errorf("%s: Recent activity shows %q:\n%s", person, raw, feed)
			}
			if strings.Contains(last, raw) {
				t.Errorf("%s: Last change shows %q: %s", person, raw, last)
			}
		}
		for _, want := range []string{"raj added node 51 after node 13 in checkout-launch", "raj annotated node 13 in checkout-launch, then gave up the turn", "Claude added node 25 after node 24 in retro, then gave up the turn"} {
			if !strings.Contains(feed, want) {
				t.Errorf("%s: Recent activity lacks %q:\n%s", person, want, feed)
			}
		}
		t.Logf("%s reads: Last change: %s", person, last)
	}
}

// What the describer knows no words for still reads as words: a record
// of the system's in general terms, never its storage key; a communal
// scope of the room's own (_tasks) stays named as a key.
func TestDescribeUnknownInternalsInGeneralWords(t *testing.T) {
	for _, c := range []struct {
		a    activity.Activity
		what string
		keys []string
	}{
		{activity.Activity{By: "ops", Kind: "state_write", Keys: []substrate.ScopeKey{{Scope: "_cooldowns", Key: "deploy_preview:ops"}}}, "updated the room’s own records", nil},
		{activity.Activity{By: "ops", Kind: "state_write", Keys: []substrate.ScopeKey{{Scope: "_tasks", Key: "t1"}, {Scope: "_acks", Key: "825"}}}, "wrote", []string{"_tasks.t1"}},
		{activity.Activity{By: "ops", Kind: "loom", Command: "teleport", Keys: []substrate.ScopeKey{{Scope: "_loom.7", Key: "x:1"}, {Scope: "ops", Key: "loom:t:000000000001.1"}}}, "used the loom (teleport) in tree 7", nil},
		{activity.Activity{By: "ops", Kind: "invoke", Action: "_ack", Keys: []substrate.ScopeKey{{Scope: "_acks", Key: "825"}}}, "acknowledged a message", nil},
		{activity.Activity{By: "ops", Kind: "loom", Command: "pin", Keys: []substrate.ScopeKey{{Scope: "ops", Key: "loom:pins"}}}, "updated their loom notes", nil},
	} {
		by, what, keys := web.Describe(c.a)
		if by != "ops" || what != c.what || !slices.Equal(keys, c.keys) {
			t.Errorf("%+v: %s %q %v, want %q %v", c.a, by, what, keys, c.what, c.keys)
		}
	}
}

// Issue 42, item 9: the room page's first load on the real-size room,
// the HTML and every script and stylesheet it loads, as a browser that
// accepts gzip receives them, is at most 100 KB. The scripts and the
// stylesheet travel gzipped (the same bytes for everyone), the page's
// HTML as it is (it shows tokens and echoes ?eval=: no compression
// there, against BREACH).
func TestFirstLoadAtRealSize(t *testing.T) {
	s, room := teamSite(t)
	code, h, page := s.get("maya", "/rooms/"+room.ID)
	if code != 200 {
		t.Fatalf("the room page: %d", code)
	}
	if h.Get("Content-Encoding") != "" {
		t.Errorf("the page's HTML is sent with Content-Encoding %q", h.Get("Content-Encoding"))
	}
	total, parts := len(page), []string{fmt.Sprintf("HTML %d", len(page))}
	for _, m := range regexp.MustCompile(`<(?:script src|link rel="stylesheet" href)="(/web/[^"]+)"`).FindAllStringSubmatch(page, -1) {
		req, _ := http.NewRequest("GET", s.srv.URL+m[1], nil)
		req.Header.Set("Accept-Encoding", "gzip, deflate, br")
		res, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || res.Header.Get("Content-Encoding") != "gzip" || !strings.Contains(res.Header.Get("Vary"), "Accept-Encoding") {
			t.Errorf("%s: %d, Content-Encoding %q, Vary %q", m[1], res.StatusCode, res.Header.Get("Content-Encoding"), res.Header.Get("Vary"))
		}
		total += len(b)
		parts = append(parts, fmt.Sprintf("%s %d", m[1], len(b)))
	}
	t.Logf("first load: %d bytes (%s)", total, strings.Join(parts, ", "))
	secs := regexp.MustCompile(`<(?:section|details) id="([^"]+)"`).FindAllStringSubmatchIndex(page, -1)
	for i, m := range secs {
		end := len(page)
		if i+1 < len(secs) {
			end = secs[i+1][0]
		}
		t.Logf("  %s: %d bytes to the next", page[m[2]:m[3]], end-m[0])
	}
	if len(parts) < 4 {
		t.Errorf("the page loads %d parts, expected its HTML, style.css, page.js and live.js: %v", len(parts), parts)
	}
	if total > 100_000 {
		t.Errorf("the first load is %d bytes, more than 100 KB: %s", total, strings.Join(parts, ", "))
	}
}
