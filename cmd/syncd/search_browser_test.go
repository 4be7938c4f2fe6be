package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/syncsubstrate/sync/oauth/oauthtest"
)

// In a real browser (issue 31): a person searches a room from its page
// and all their rooms from the lobby's box, and opens a thread on the
// threads page; each page is accessible (axe) and saved as a screenshot.
func TestBrowserSearchAndThreads(t *testing.T) {
	ctx, public, _ := browserSignedUp(t)
	room := restCall(t, "POST", public+"/rooms", "", map[string]any{"id": "harbor"})
	token := room["token"].(string)
	robot := restCall(t, "POST", public+"/rooms/harbor/agents", token, map[string]any{"id": "robot", "name": "Robot"})["token"].(string)
	restCall(t, "POST", public+"/rooms/harbor/agents", token, map[string]any{"id": "pilot", "name": "Pilot"})
	root := restCall(t, "POST", public+"/rooms/harbor/actions/_send_message/invoke", robot,
		map[string]any{"params": map[string]any{"body": "Which day do the ships leave the harbor?", "subject": "Departure day"}})
	seq := int64(root["writes"].([]any)[0].(map[string]any)["sort_key"].(float64))
	restCall(t, "POST", public+"/rooms/harbor/actions/_send_message/invoke", robot,
		map[string]any{"params": map[string]any{"body": "Thursday at dawn, tide permitting", "reply_to": seq, "ack": true}})
	restCall(t, "PUT", public+"/rooms/harbor/state", token, map[string]any{"scope": "_shared", "key": "departure.day", "value": "Thursday"})

	claimInLobby(t, ctx, public, "harbor", token)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(public+"/rooms/harbor"),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/web/rooms/harbor/search"]`)),
		chromedp.Click(chromedp.CSS(`a[href="/web/rooms/harbor/search"]`)),
		chromedp.WaitVisible(chromedp.CSS("#q")),
		chromedp.SendKeys(chromedp.CSS("#q"), "thursday"),
		chromedp.Submit(chromedp.CSS("#q")),
		chromedp.WaitVisible(chromedp.CSS("#h-hits")), parsed(),
	); err != nil {
		t.Fatalf("searching the room from its page: %v", err)
	}
	page, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#main")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page, "2 found") || !strings.Contains(page, "departure.day") {
		t.Errorf("room search page: %s", page)
	}
	screenshot(t, ctx, "search-room")
	oauthtest.RequireAxeClean(t, ctx, "the room's search page")

	if err := chromedp.Do(ctx,
		chromedp.Navigate(public+"/"),
		chromedp.WaitVisible(chromedp.CSS("#lobby-q")),
		chromedp.SendKeys(chromedp.CSS("#lobby-q"), "harbor ships"),
		chromedp.Submit(chromedp.CSS("#lobby-q")),
		chromedp.WaitVisible(chromedp.CSS("#h-hits")), parsed(),
	); err != nil {
		t.Fatalf("searching from the lobby: %v", err)
	}
	if page, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#main"))); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page, "1 found") || !strings.Contains(page, "harbor · message") {
		t.Errorf("lobby search page: %s", page)
	}
	screenshot(t, ctx, "search-lobby")
	oauthtest.RequireAxeClean(t, ctx, "the lobby's search page")

	if err := chromedp.Do(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/web/rooms/harbor/threads?thread=%d", public, seq)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf("#thread-%d[open]", seq))), parsed(),
	); err != nil {
		t.Fatalf("the threads page: %v", err)
	}
	if page, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#main"))); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page, "Departure day") || !strings.Contains(page, "Thursday at dawn") {
		t.Errorf("threads page: %s", page)
	}
	screenshot(t, ctx, "threads")
	oauthtest.RequireAxeClean(t, ctx, "the threads page")
}
