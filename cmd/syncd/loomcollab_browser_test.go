package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/syncsubstrate/sync/oauth/oauthtest"
)

// The loom page's Collaborators section in a real browser, through the
// real server, with a real `syncd collaborate` running against the
// server's database (its model a stub that answers "I wait."): the page
// shows the collaborator waiting with its calls and tokens at 1366 px and
// 390 px, axe-core finds nothing serious, and the owner's Stop button
// stops it: the page says it asked, the collaborator's run ends, and its
// record shows it stopped by the owner. Every wait is bounded and says
// what it was waiting for.
func TestBrowserLoomCollaborators(t *testing.T) {
	ctx, public, dbURL := browserSignedUp(t)

	room := restCall(t, "POST", public+"/rooms", "", map[string]any{"id": "duet", "meta": map[string]any{"label": "Duet"}})
	roomToken := room["token"].(string)
	restCall(t, "POST", public+"/rooms/duet/agents", roomToken, map[string]any{"id": "claude", "name": "Claude"})
	body, _ := json.Marshal(map[string]string{"commands": "→ new tree \"t\" \"The house stood empty.\"\n→ permit claude loom_aware loom_write"})
	if code, res := call(t, "POST", public+"/rooms/duet/loom", roomToken, string(body)); code != 200 {
		t.Fatalf("planting the tree: %d %v", code, res)
	}
	claimInLobby(t, ctx, public, "duet", roomToken)

	// The collaborator's model: it has nothing to write, and says so.
	var calls atomic.Int32
	chat := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": []map[string]any{{"message": map[string]string{"content": "I wait."}}},
			"usage": map[string]int{"prompt_tokens": 700, "completion_tokens": 3}})
	}))
	t.Cleanup(chat.Close)
	cc, err := parseCollabConfig([]string{"-database-url", dbURL, "-room", "duet", "-agent", "claude", "-chat-url", chat.URL,
		"-chat-model", "stub", "-max-time", "150s", "-max-calls", "20"})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- collaborate(cctx, cc) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("syncd collaborate did not end within 20 s of its context's cancellation")
		}
	})

	page := public + "/web/rooms/duet/loom?tree=1&node=1"
	// collabText is the collaborator's entry on the page as loaded now
	// ("" when the page has none).
	collabText := func() string {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		v, err := chromedp.Run(sctx, chromedp.Evaluate[string](`(function () { var e = document.getElementById("collab-claude"); return e ? e.textContent : ""; })()`))
		if err != nil {
			t.Fatalf("reading the Collaborators section: %v", err)
		}
		return v
	}
	// until loads the page and waits until the collaborator's entry holds
	// want: each change to its record is a write to the room, which the
	// page follows live.
	until := func(want, what string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := chromedp.Do(sctx, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#h-node")))
		cancel()
		if err != nil {
			t.Fatalf("loading the loom page: %v", err)
		}
		w, _ := json.Marshal(want)
		if err := untilTrue(ctx, `(document.getElementById("collab-claude") || {textContent: ""}).textContent.includes(`+string(w)+`)`, 30*time.Second); err != nil {
			last := collabText()
			screenshot(t, ctx, "loom-collab-failed")
			select {
			case err := <-done:
				t.Fatalf("waiting for %s, syncd collaborate ended (%v); the page shows %q", what, err, last)
			default:
			}
			t.Fatalf("%s: not on the page within 30 s (model calls so far %d); the entry shows %q (%v)", what, calls.Load(), last, err)
		}
		return collabText()
	}

	// Running: waiting for a change, with what it has spent.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1366, 900)); err != nil {
		t.Fatal(err)
	}
	entry := until("waiting for its turn or a change on branch 1", "the collaborator shown waiting")
	if !strings.Contains(entry, "(stub)") || !strings.Contains(entry, "of 20") || !strings.Contains(entry, "700 prompt + 3 completion") {
		t.Errorf("the collaborator's entry lacks its model, calls or tokens: %q", entry)
	}
	oauthtest.RequireAxeClean(t, ctx, "loom page with a collaborator")
	screenshot(t, ctx, "loom-collab-1366")
	sectionShot(t, ctx, "#collabs", "loom-collab-1366-section")

	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#stop-claude button"))); err != nil {
		t.Fatalf("the loom page at 390 px: %v", err)
	}
	if overflow, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`)); err != nil || overflow {
		t.Errorf("the loom page with a collaborator is wider than a phone (%v)", err)
	}
	oauthtest.RequireAxeClean(t, ctx, "loom page with a collaborator at 390 px")
	// The section itself, scrolled into view, for the screenshot's reader.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("collabs").scrollIntoView(); true`)); err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "loom-collab-390")
	sectionShot(t, ctx, "#collabs", "loom-collab-390-section")

	// Stop, from the button.
	sctx, cancelStop := context.WithTimeout(ctx, 20*time.Second)
	err = chromedp.Do(sctx,
		chromedp.Click(chromedp.CSS("#stop-claude button")),
		chromedp.WaitVisible(chromedp.CSS("#ran")),
	)
	cancelStop()
	if err != nil {
		screenshot(t, ctx, "loom-collab-failed")
		t.Fatalf("pressing Stop: no answer on the page within 20 s: %v", err)
	}
	if ran := collabRan(t, ctx); !strings.Contains(ran, "asked collaborator claude to stop") {
		t.Fatalf("pressing Stop: the page says %q", ran)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("syncd collaborate ended with an error after Stop: %v", err)
		}
		done <- nil // for the cleanup
	case <-time.After(30 * time.Second):
		screenshot(t, ctx, "loom-collab-failed")
		t.Fatalf("syncd collaborate still runs 30 s after Stop (the page shows %q)", collabText())
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1366, 900)); err != nil {
		t.Fatal(err)
	}
	stopped := until("stopped: asked by", "the collaborator shown stopped")
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#stop-claude").length`)); err != nil || n != 0 {
		t.Errorf("a stopped collaborator still offers Stop (%d, %v)", n, err)
	}
	t.Logf("after Stop: %q (model calls %d)", stopped, calls.Load())
	oauthtest.RequireAxeClean(t, ctx, "loom page with a stopped collaborator")
	screenshot(t, ctx, "loom-collab-stopped")
	sectionShot(t, ctx, "#collabs", "loom-collab-stopped-section")
}

// sectionShot saves a screenshot of the element sel alone (a full page's
// is too tall to read one section in).
func sectionShot(t *testing.T, ctx context.Context, sel, name string) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("screenshot of %s: %v", sel, err)
	}
	path := filepath.Join(artifacts(t), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// collabRan is the text of the page's #ran (what the last command did).
func collabRan(t *testing.T, ctx context.Context) string {
	t.Helper()
	// Read in the page, not through a node id: a live update may replace
	// the element between finding it and reading it ("No node with given
	// id found"; the page carries the answer into the new element).
	const js = `(document.querySelector("#ran") || {}).textContent || ""`
	if err := untilTrue(ctx, js+` !== ""`, 10*time.Second); err != nil {
		t.Fatalf("reading #ran: nothing there: %v", err)
	}
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
	if err != nil {
		t.Fatalf("reading #ran: %v", err)
	}
	return v
}
