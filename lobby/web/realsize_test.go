package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/lobby/web"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// talkativeRoom fills "lab" with a team's week of talk, through the
// product's own operations: 10 agents, 313 messages in 8 threads. The
// bodies are "note #0001" … "note #0313", in order.
func talkativeRoom(t *testing.T, s *site) {
	t.Helper()
	ctx := context.Background()
	var agents []*substrate.Principal
	for i := range 10 {
		id := fmt.Sprintf("agent%02d", i)
		s.join(id, fmt.Sprintf("Agent %d", i))
		p, err := s.svc.AgentPrincipal(ctx, "lab", id)
		if err != nil {
			t.Fatal(err)
		}
		agents = append(agents, p)
	}
	var roots []int64
	for n := 1; n <= 313; n++ {
		params := map[string]any{"body": fmt.Sprintf("note #%04d", n)}
		switch th := n % 8; {
		case len(roots) < 8:
			params["subject"] = fmt.Sprintf("thread %d", th)
		default:
			params["reply_to"] = roots[th]
		}
		raw, _ := json.Marshal(params)
		res, err := s.svc.Invoke(ctx, agents[n%len(agents)], "lab", "_send_message", raw)
		if err != nil {
			t.Fatalf("message %d: %v", n, err)
		}
		if len(roots) < 8 {
			roots = append(roots, *res.Writes[0].SortKey)
		}
	}
}

// notes are the "note #NNNN" bodies in the page's message list, in order.
func notes(page string) []string {
	list := page
	if i := strings.Index(list, `id="message-list"`); i >= 0 {
		list = list[i:]
		if j := strings.Index(list, "</ol>"); j >= 0 {
			list = list[:j]
		}
	} else {
		return nil
	}
	return regexp.MustCompile(`note #\d{4}|from the box \d+`).FindAllString(list, -1)
}

// link is the href of the message pager's link with rel (prev, next).
func link(t *testing.T, page, rel string) string {
	t.Helper()
	m := regexp.MustCompile(`<a rel="` + rel + `" href="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// Issue 42, bug 1: on a room of 313 messages the list showed the oldest
// 50 for good; a message sent from the page's box answered "Sent." and
// never appeared, on reload or live. The list is the newest, pages back
// and forth with plain links, and follows the room live.
func TestMessagesAtRealSizeShowTheNewest(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	talkativeRoom(t, s)
	code, _, page := s.get("alice", "/rooms/lab")
	if code != 200 {
		t.Fatalf("room page: %d", code)
	}
	got := notes(page)
	if len(got) != 50 || got[0] != "note #0264" || got[49] != "note #0313" {
		t.Fatalf("the list shows %d messages, %v … %v; want the newest 50, note #0264 … note #0313", len(got), first(got), last(got))
	}
	if !strings.Contains(page, "313 in all") || !strings.Contains(page, "The newest 50 of 313.") {
		t.Errorf("the counts: %s", between(page, `id="summary-messages"`, "</div>"))
	}

	// Sent from the box: there on the page it leads back to.
	code, _, page = s.postFollow("alice", "/web/rooms/lab/message", url.Values{"body": {"from the box 1"}})
	if got := notes(page); code != 303 || len(got) != 50 || last(got) != "from the box 1" {
		t.Fatalf("after sending from the box (%d) the list ends with %q", code, last(got))
	}
	if !strings.Contains(page, "314 in all") {
		t.Errorf("after a message the header says %s", between(page, `id="summary-messages"`, "</div>"))
	}

	// Live: the next message reaches the open page.
	events := s.stream("alice", "/live/rooms/lab?seq="+s.seq(), "")
	s.liveSettled()
	if code, body := s.post("alice", "/web/rooms/lab/message", url.Values{"body": {"from the box 2"}}); code != 303 {
		t.Fatalf("second message: %d %s", code, body)
	}
	for ev := ""; !strings.Contains(ev, "from the box 2"); {
		ev = next(t, events, 10*time.Second)
	}

	// Earlier: the 50 before the list's first, then back, with links
	// that need no script.
	older := link(t, page, "prev")
	if older == "" {
		t.Fatalf("no link to earlier messages: %s", between(page, `id="message-pager"`, "</nav>"))
	}
	_, _, page = s.get("alice", "/rooms/lab"+strings.TrimSuffix(older, "#messages"))
	if got := notes(page); len(got) != 50 || got[0] != "note #0215" || got[49] != "note #0264" {
		t.Fatalf("earlier messages (%s): %v … %v", older, first(got), last(got))
	}
	if !strings.Contains(page, "Earlier messages: 50 of 315, not live.") || !strings.Contains(page, `data-page="earlier"`) {
		t.Errorf("an earlier page does not say so: %s", between(page, `id="messages-shown"`, "</p>"))
	}
	// Back to the start of the log: no link further back.
	for range 10 {
		prev := link(t, page, "prev")
		if prev == "" {
			break
		}
		_, _, page = s.get("alice", "/rooms/lab"+strings.TrimSuffix(prev, "#messages"))
	}
	if got := notes(page); len(got) == 0 || got[0] != "note #0001" || link(t, page, "prev") != "" {
		t.Fatalf("the earliest page starts %v, earlier link %q", first(got), link(t, page, "prev"))
	}
	// And forward again to the newest.
	for range 10 {
		nxt := link(t, page, "next")
		if nxt == "" {
			break
		}
		_, _, page = s.get("alice", "/rooms/lab"+strings.TrimSuffix(nxt, "#messages"))
	}
	if got := notes(page); last(got) != "from the box 2" {
		t.Fatalf("paging forward ends at %v", last(got))
	}
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
		"raj asked for a continuation in checkout-launch", // its request, fulfilled, is gone
		"the room added raj",
		"planner wrote the continuation of node 2 in checkout-launch",
		"raj moved to another place in checkout-launch",
		"Ana sent a message in “Launch note”",
		"planner acknowledged Ana’s message",
		"the room wrote tasks.t12",
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
