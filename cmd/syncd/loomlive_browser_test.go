package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"
)

// A commit that lands after the loom page was drawn but before its live
// stream reached the server still reaches the page. The browser holds the
// page's stream request (the DevTools fetch domain pauses it), the room
// gets a new node meanwhile, and only then is the request let go: the
// page must show the node without a reload. The page tells its stream the
// seq it was drawn at; without that the stream took the room as it found
// it for what the page showed, and the page missed the commit until the
// next one (TestBrowserLoomCollaborators failed so in CI: the
// collaborator's first record landed in that gap).
func TestBrowserLoomPageHearsACommitBeforeItsStream(t *testing.T) {
	ctx, public, _ := browserSignedUp(t)

	room := restCall(t, "POST", public+"/rooms", "", map[string]any{"id": "gap", "meta": map[string]any{"label": "Gap"}})
	roomToken := room["token"].(string)
	loomAs := func(cmds string) {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"commands": cmds})
		if code, res := call(t, "POST", public+"/rooms/gap/loom", roomToken, string(body)); code != 200 {
			t.Fatalf("%s: %d %v", cmds, code, res)
		}
	}
	loomAs("→ new tree \"t\" \"The house stood empty.\"")
	claimInLobby(t, ctx, public, "gap", roomToken)

	paused := make(chan fetch.RequestID, 4)
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok && strings.Contains(e.Request.URL, "/live/rooms/") {
			select {
			case paused <- e.RequestID:
			default:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/live/rooms/*"}}}); err != nil {
		t.Fatalf("holding the live stream's request: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(public+"/web/rooms/gap/loom?tree=1&node=1"), chromedp.WaitVisible(chromedp.CSS("#h-node"))); err != nil {
		t.Fatalf("loading the loom page: %v", err)
	}
	var held fetch.RequestID
	select {
	case held = <-paused:
	case <-time.After(30 * time.Second):
		t.Fatal("the loom page opened no live stream within 30 s")
	}
	if err := untilTrue(ctx, `!document.getElementById("main").textContent.includes("Written meanwhile")`, 5*time.Second); err != nil {
		t.Fatalf("the page shows the node before it is written: %v", err)
	}

	loomAs("→ add from:1 \"Written meanwhile.\" tree:1")

	// Let the held request go, and hold no later one (a reconnect).
	if _, err := chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: held}); err != nil {
		t.Fatalf("letting the live stream's request go: %v", err)
	}
	if _, err := chromedp.Call(ctx, fetch.Disable, struct{}{}); err != nil {
		t.Fatal(err)
	}
	if err := untilTrue(ctx, `document.getElementById("main").textContent.includes("Written meanwhile")`, 30*time.Second); err != nil {
		screenshot(t, ctx, "loom-live-gap-failed")
		t.Fatalf("a node written between the page's read and its stream's start is not on the page: %v", err)
	}
}
