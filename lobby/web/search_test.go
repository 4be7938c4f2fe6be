package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/lobby/web"
	"github.com/syncsubstrate/sync/substrate"
)

// The search pages (issue 31): the room's finds what the person reads,
// marked, and links each hit into the room; the lobby's searches every
// room of the person's and none of anyone else's; bad input is a 400
// page; the room page and the lobby link to them.
func TestSearchPages(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "bob")
	ctx := context.Background()
	s.write("_shared", "deadline", `"Friday <b>noon</b>"`)
	if _, err := s.svc.Invoke(ctx, s.admin, "lab", "_send_message", json.RawMessage(`{"body":"the deadline moved"}`)); err != nil {
		t.Fatal(err)
	}
	// Bob's own room, which alice does not have.
	other, err := s.svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "bobs"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.lob.ClaimRoom(ctx, "user_bob", "bobs", other.Token, false); err != nil {
		t.Fatal(err)
	}
	bobAdmin, _ := s.svc.Authenticate(ctx, other.Token)
	if _, err := s.svc.WriteState(ctx, bobAdmin, "bobs", []substrate.Write{{Scope: "_shared", Key: "deadline", Value: json.RawMessage(`"bob's secret deadline"`)}}, false); err != nil {
		t.Fatal(err)
	}

	code, _, page := s.get("alice", "/web/rooms/lab/search?q=deadline")
	if code != 200 || !strings.Contains(page, "2 found") || !strings.Contains(page, "<mark>deadline</mark>") {
		t.Fatalf("room search: %d %s", code, page)
	}
	if strings.Contains(page, "<b>noon") {
		t.Error("a value's markup reached the page unescaped")
	}
	if !strings.Contains(page, `href="/rooms/lab#scope-_shared"`) || !strings.Contains(page, `href="/rooms/lab#h-messages"`) {
		t.Errorf("hits do not link into the room: %s", page)
	}
	code, _, page = s.get("alice", "/web/search?q=deadline")
	if code != 200 || !strings.Contains(page, "lab · ") || strings.Contains(page, "secret") {
		t.Errorf("alice's lobby search: %d %s", code, page)
	}
	if _, _, page := s.get("bob", "/web/search?q=deadline"); !strings.Contains(page, "secret") || strings.Contains(page, "moved") {
		t.Errorf("bob's lobby search finds his room and not alice's: %s", page)
	}
	if code, _, _ := s.get("alice", "/web/rooms/lab/search?q=x&limit=500"); code != 400 {
		t.Errorf("a bad limit: %d", code)
	}
	if code, _, _ := s.get("alice", "/web/rooms/bobs/search?q=deadline"); code != 404 {
		t.Errorf("alice searching bob's room: %d", code)
	}
	if _, _, room := s.get("alice", "/rooms/lab"); !strings.Contains(room, `href="/web/rooms/lab/search"`) {
		t.Error("the room page does not link its search")
	}
	if _, _, lobbyPage := s.get("alice", "/"); !strings.Contains(lobbyPage, `action="/web/search"`) {
		t.Error("the lobby has no search box")
	}
}

// The threads page folds the room's conversations by thread, with the
// person's unread marks; ?thread=N opens one; a message asking for
// acknowledgement says who has.
func TestThreadsPage(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "carol")
	ctx := context.Background()
	s.join("bo", "bo")
	// carol, a collaborator, has her own agent once she has said
	// something from the page: its read marks are her unread.
	s.share("carol", "collaborator")
	if code, body := s.post("carol", "/web/rooms/lab/message", url.Values{"body": {"hello"}}); code >= 400 {
		t.Fatalf("carol's message: %d %s", code, body)
	}
	bo, err := s.svc.AgentPrincipal(ctx, "lab", "bo")
	if err != nil {
		t.Fatal(err)
	}
	send := func(p *substrate.Principal, params string) int64 {
		t.Helper()
		res, err := s.svc.Invoke(ctx, p, "lab", "_send_message", json.RawMessage(params))
		if err != nil {
			t.Fatal(err)
		}
		return *res.Writes[0].SortKey
	}
	// carol reads the room first, so what bo says next is unread for her.
	if code, _, _ := s.get("carol", "/web/rooms/lab/threads"); code != 200 {
		t.Fatalf("threads page: %d", code)
	}
	root := send(bo, `{"body": "Which venue?", "subject": "Offsite venue"}`)
	send(bo, fmt.Sprintf(`{"body": "The lake house", "reply_to": %d, "ack": true}`, root))
	send(bo, `{"body": "not in a thread"}`)
	code, _, page := s.get("carol", "/web/rooms/lab/threads")
	if code != 200 || !strings.Contains(page, "Offsite venue") || !strings.Contains(page, "● 2 unread") || strings.Contains(page, "not in a thread") {
		t.Fatalf("threads page: %d %s", code, page)
	}
	if !strings.Contains(page, fmt.Sprintf(`<details id="thread-%d" class="card thread">`, root)) {
		t.Errorf("the thread is not folded: %s", page)
	}
	if !strings.Contains(page, "acknowledged by 0 of") {
		t.Errorf("the message asking for acknowledgement does not say who has: %s", page)
	}
	_, _, page = s.get("carol", fmt.Sprintf("/web/rooms/lab/threads?thread=%d", root))
	if !strings.Contains(page, fmt.Sprintf(`<details id="thread-%d" class="card thread" open>`, root)) || strings.Contains(page, "● 2 unread") {
		t.Errorf("?thread opens it, and the earlier visit read it: %s", page)
	}
}
