package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/syncsubstrate/sync/oauth/oauthtest"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// artifacts is where browser tests leave their screenshots
// (SYNC_ARTIFACTS, default sync-artifacts in the temporary directory).
func artifacts(t *testing.T) string {
	dir := os.Getenv("SYNC_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "sync-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	untilLaidOut(t, ctx, name)
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100 is a PNG; below, a JPEG
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(artifacts(t), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// untilLaidOut waits until the page shown has finished loading and has a
// layout. A test that waits for an element can find it while a
// navigation's new document is still being parsed, its stylesheets not yet
// applied; Chromium then refuses a screenshot ("Cannot take screenshot
// with 0 width"). Errors are retried: a navigation may replace the
// document between two polls.
func untilLaidOut(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	const js = `document.readyState === "complete" && document.documentElement.clientWidth > 0`
	if err := untilTrue(ctx, js, 10*time.Second); err != nil {
		t.Fatalf("screenshot %s: the page did not finish loading: %v", name, err)
	}
}

// untilTrue waits until js holds in the page shown, for at most within,
// by chromedp's Poll in the page itself (every 20 ms, a timer's pace, not
// the next frame's: a tab in the background draws none). An expression
// that throws is false (what it reads is not there yet). Poll does not
// survive a navigation: one that a navigation ends is begun again in the
// new document.
func untilTrue(ctx context.Context, js string, within time.Duration) error {
	deadline := time.Now().Add(within)
	pred := "(function(){try{return !!(" + js + ")}catch(e){return false}})()"
	var last error
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%s: not true within %v (%v)", js, within, last)
		}
		pctx, cancel := context.WithTimeout(ctx, left+5*time.Second)
		_, err := chromedp.Run(pctx, chromedp.Poll[bool](pred, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(left)))
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, chromedp.ErrPollingTimeout) || ctx.Err() != nil {
			return fmt.Errorf("%s: not true within %v (%v)", js, within, err)
		}
		last = err // a navigation ended the poll: again, in the new document
	}
}

// parsed waits until the document shown has been parsed whole. An
// element a test waits for can be found while the rest of a new document
// is still arriving (the network, a loaded server): what the test then
// reads beside it is not there yet. (With the rest of a search page held
// back 1.5 s after its "2 found", TestBrowserSearchAndThreads read a main
// section without the hits.)
// unfolded opens everything the room page folds (its sections, their
// scopes and logs, its actions' forms), as a person does before reading
// or using what they hold.
func unfolded() chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](`document.querySelectorAll("details").forEach(d => d.open = true), true`)(ctx, t)
		return err
	})
}

func parsed() chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Poll[bool](`document.readyState !== "loading"`)(ctx, t)
		return err
	})
}

// restCall calls the REST API with a bearer token and decodes the answer.
func restCall(t *testing.T, method, url, token string, body any) map[string]any {
	t.Helper()
	raw, _ := json.Marshal(body)
	code, out := call(t, method, url, token, string(raw))
	if code/100 != 2 {
		t.Fatalf("%s %s: %d %v", method, url, code, out)
	}
	return out
}

// browserSignedUp starts syncd on a new database (open sign-up, no rate
// limit) and a headless Chromium whose virtual authenticator has signed
// alice up with a passkey. It returns the browser, the public URL and the
// database URL; both stop when the test ends.
func browserSignedUp(t *testing.T) (ctx context.Context, public, dbURL string) {
	t.Helper()
	dbURL = pgtest.URL(t)
	public = startOnFreePort(t, dbURL)
	// The browser's budget is the whole test's, a guard against a hang,
	// not a measure: TestBrowserRoomShowsWhatChanged, 25 s on a quiet
	// machine, took 185 s on a loaded one and ran out of 3 minutes.
	ctx = oauthtest.Chromium(t, 8*time.Minute)
	aliceSignsUp(t, ctx, public)
	return ctx, public, dbURL
}

// startOnFreePort migrates dbURL and starts syncd on it (open sign-up,
// no rate limit) at a loopback port its public URL names, and returns that
// URL; the server stops when the test ends. The port is picked free, then
// bound by the server: another process (an outgoing connection's local
// port, on a machine running other tests) can take it in between, and
// the server then cannot listen. A port taken is tried again with another
// (startOnFreePorts).
func startOnFreePort(t *testing.T, dbURL string) string {
	t.Helper()
	if err := run(context.Background(), "migrate", testConfig(t, "-database-url", dbURL), nil); err != nil {
		t.Fatal(err)
	}
	_, stop, ports := startOnFreePorts(t, 1, func(ports []string) *config {
		public := "http://localhost:" + ports[0]
		return testConfig(t, "-addr", "127.0.0.1:"+ports[0], "-database-url", dbURL, "-rate-limit", "-1", "-signup", "open", "-public-url", public)
	})
	t.Cleanup(stop)
	return "http://localhost:" + ports[0]
}

// aliceSignsUp signs alice up at public with the browser's virtual
// passkey, and waits for her recovery codes.
func aliceSignsUp(t *testing.T, browser context.Context, public string) {
	t.Helper()
	if err := chromedp.Do(browser,
		chromedp.Navigate(public+"/signup"),
		chromedp.WaitVisible(chromedp.CSS("#username")),
		chromedp.SendKeys(chromedp.CSS("#username"), "alice"),
		chromedp.Click(chromedp.CSS("#signup")),
		chromedp.WaitVisible(chromedp.CSS("#codes pre")),
	); err != nil {
		t.Fatalf("sign-up with a passkey: %v", err)
	}
}

// claimInLobby claims a room made over the API from the lobby's claim
// form with its room token, and waits for the lobby the claim returns to
// (the room's link on it).
func claimInLobby(t *testing.T, ctx context.Context, public, room, token string) {
	t.Helper()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(public+"/"),
		chromedp.WaitVisible(chromedp.CSS("#claim-room")),
		chromedp.SendKeys(chromedp.CSS("#claim-room"), room),
		chromedp.SendKeys(chromedp.CSS("#claim-token"), token),
		chromedp.Submit(chromedp.CSS("#claim-token")),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/rooms/`+room+`"]`)),
	); err != nil {
		t.Fatalf("claiming %s from the lobby: %v", room, err)
	}
}

// In a real browser, through the real server: a person signs up with a
// passkey, claims a room made over the API from the lobby, opens its page,
// sees another agent's REST writes appear live without reloading, invokes
// an action from its form, scrubs the audit to an earlier seq, and plants
// and branches a loom tree on the loom page; the room page also fits a
// phone's width. Screenshots are saved as artefacts;
// the time from each write's response to the page showing it is logged.
func TestBrowserRoomPageIsLive(t *testing.T) {
	ctx, public, _ := browserSignedUp(t)

	// A room made over the API, an agent in it, and an action.
	room := restCall(t, "POST", public+"/rooms", "", map[string]any{"id": "studio", "meta": map[string]any{"label": "The studio"}})
	roomToken := room["token"].(string)
	robot := restCall(t, "POST", public+"/rooms/studio/agents", roomToken, map[string]any{"id": "robot", "name": "Robot"})["token"].(string)
	restCall(t, "PUT", public+"/rooms/studio/actions", roomToken, map[string]any{"id": "ship", "description": "Ship the build",
		"if": `state._shared.ready == true`, "writes": []any{map[string]any{"key": "shipped", "value": true}}})

	// Claimed from the lobby with its room token.
	claimInLobby(t, ctx, public, "studio", roomToken)
	screenshot(t, ctx, "lobby")

	// The room page, live.
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`a[href="/rooms/studio"]`)),
		chromedp.WaitVisible(chromedp.CSS("#live.on")),
	); err != nil {
		t.Fatalf("opening the room page: %v", err)
	}
	if err := chromedp.Do(ctx, unfolded()); err != nil {
		t.Fatal(err)
	}
	page, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#main")))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"The studio", "Robot", "ship", "Ship the build", "Not available to you now"} {
		if !strings.Contains(page, want) {
			t.Fatalf("the room page lacks %q: %s", want, page)
		}
	}
	// The page notes when it shows each seq.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__seen = {};
		new MutationObserver(function () { var s = document.getElementById("seq"); if (s) window.__seen[s.textContent] = Date.now(); })
			.observe(document.getElementById("main"), {childList: true, subtree: true, characterData: true}); true`)); err != nil {
		t.Fatal(err)
	}
	var lat []time.Duration
	var firstSeq int64
	for i := range 100 {
		w := restCall(t, "PUT", public+"/rooms/studio/state", robot, map[string]any{"scope": "robot", "key": "progress", "value": fmt.Sprintf("step %d of 100", i+1)})
		acked := time.Now()
		seq := int64(w["seq"].(float64))
		if i == 0 {
			firstSeq = seq
		}
		seen, err := chromedp.Run(ctx, chromedp.Poll[float64](fmt.Sprintf(`window.__seen["%d"]`, seq), chromedp.WithPollingInterval(5*time.Millisecond), chromedp.WithPollingTimeout(5*time.Second)))
		if err != nil {
			t.Fatalf("write %d (seq %d) did not appear on the page within 5 s: %v", i+1, seq, err)
		}
		lat = append(lat, max(0, time.UnixMilli(int64(seen)).Sub(acked)))
	}
	if err := chromedp.Do(ctx, unfolded()); err != nil {
		t.Fatal(err)
	}
	if page, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#main"))); err != nil || !strings.Contains(page, "step 100 of 100") {
		t.Fatalf("the last write is not on the page (%v)", err)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("from a write's response to the page showing it, over %d writes: p50 %v, p99 %v, max %v", len(lat), lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
	screenshot(t, ctx, "room")

	// An action from its form: once another agent makes it available,
	// the page offers it live; invoking it acts as alice's own agent.
	restCall(t, "PUT", public+"/rooms/studio/state", roomToken, map[string]any{"scope": "_shared", "key": "ready", "value": true})
	if err := chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(`#action-ship:not(.unavailable) button`)),
		chromedp.Click(chromedp.CSS(`#action-ship button`)),
	); err != nil {
		t.Fatalf("invoking ship from its form: %v", err)
	}
	var shipped map[string]any
	pgtest.Eventually(t, 10*time.Second, func() bool {
		_, shipped = call(t, "GET", public+"/rooms/studio/state?scope=_shared&key=shipped", roomToken, "")
		return shipped["value"] != nil
	}, "_shared.shipped after invoking from the form")
	if shipped["value"] != true || shipped["writer"] != "alice:web" {
		t.Fatalf("after invoking from the form, _shared.shipped is %v", shipped)
	}
	// Back on the room page (the form's answer sends the browser there).
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#live.on"))); err != nil {
		t.Fatal(err)
	}
	if page, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#main"))); err != nil || !strings.Contains(page, "shipped") {
		t.Fatalf("the page after invoking does not show the write: %s (%v)", page, err)
	}
	screenshot(t, ctx, "room-acted")

	// The audit scrubber: the room as it was after the first write.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/rooms/studio?at=%d", public, firstSeq)),
		chromedp.WaitVisible(chromedp.CSS(".past")), parsed(), unfolded(),
	); err != nil {
		t.Fatalf("scrubbing: %v", err)
	}
	// The past page's state (its diff against now shows the present).
	if page, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#state"))); err != nil || !strings.Contains(page, "step 1 of 100") || strings.Contains(page, "step 100 of 100") {
		t.Fatalf("the page scrubbed to seq %d shows: %s (%v)", firstSeq, page, err)
	}
	screenshot(t, ctx, "room-scrubbed")
	if err := chromedp.Do(ctx, chromedp.Navigate(public+"/rooms/studio"), chromedp.WaitVisible(chromedp.CSS("#live.on"))); err != nil {
		t.Fatal(err)
	}

	// The loom page: plant a tree from the command box, branch from its
	// root with the node's form.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(public+"/web/rooms/studio/loom"),
		chromedp.WaitVisible(chromedp.CSS("#commands")),
		chromedp.SendKeys(chromedp.CSS("#commands"), `→ new tree "story" "It began on a Tuesday."`),
		chromedp.Submit(chromedp.CSS("#commands")),
		chromedp.WaitVisible(chromedp.CSS("#h-ran")),
		chromedp.Navigate(public+"/web/rooms/studio/loom?node=1"),
		chromedp.WaitVisible(chromedp.CSS("#branch-text")),
		chromedp.SendKeys(chromedp.CSS("#branch-text"), "Or was it a Wednesday?"),
		chromedp.Submit(chromedp.CSS("#branch-text")),
		chromedp.WaitVisible(chromedp.CSS("#h-ran")), parsed(),
	); err != nil {
		t.Fatalf("using the loom page: %v", err)
	}
	if page, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#main"))); err != nil || !strings.Contains(page, "It began on a Tuesday.") || !strings.Contains(page, "Or was it a Wednesday?") {
		t.Fatalf("the loom page after planting and branching: %s (%v)", page, err)
	}
	screenshot(t, ctx, "loom")
	if err := chromedp.Do(ctx, chromedp.Navigate(public+"/rooms/studio"), chromedp.WaitVisible(chromedp.CSS("#live.on"))); err != nil {
		t.Fatal(err)
	}

	// Page weight: the page and what it loads.
	weight := 0
	for _, p := range []string{"/web/style.css", "/web/live.js"} {
		res, err := http.Get(public + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		weight += len(b)
	}
	html, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("page weight: %d bytes (the room page's HTML %d, CSS and script %d), no other requests", weight+len(html), len(html), weight)

	// A phone's width.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#live.on"))); err != nil {
		t.Fatal(err)
	}
	if overflow, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`)); err != nil || overflow {
		t.Errorf("the room page is wider than a phone (%v)", err)
	}
	screenshot(t, ctx, "room-phone")
}

// A live page follows its room across processes: a stream open on one
// syncd hears a write made through another, by the database's
// notifications, long before any re-check (an hour here).
func TestLivePageAcrossProcesses(t *testing.T) {
	dbURL := pgtest.URL(t)
	cfg := testConfig(t, "-database-url", dbURL, "-rate-limit", "-1", "-wait-recheck", "1h")
	if err := run(context.Background(), "migrate", cfg, nil); err != nil {
		t.Fatal(err)
	}
	a, stop := start(t, cfg)
	defer stop()
	b := startChild(t, dbURL, "-wait-recheck", "1h")
	room := restCall(t, "POST", a+"/rooms", "", map[string]any{"id": "across"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", a+"/live/rooms/across?view="+room["view_token"].(string), nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("live stream on a: %v %v", res, err)
	}
	defer res.Body.Close()
	got, opened := make(chan string, 1), make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		var seen strings.Builder
		for {
			n, err := res.Body.Read(buf)
			if seen.Len() == 0 && n > 0 {
				close(opened)
			}
			seen.Write(buf[:n])
			if strings.Contains(seen.String(), "event: change") {
				got <- seen.String()
				return
			}
			if err != nil {
				return
			}
		}
	}()
	// The stream's first bytes follow its subscription to the room.
	select {
	case <-opened:
	case <-time.After(10 * time.Second):
		t.Fatal("the live stream on a sent nothing")
	}
	written := time.Now()
	restCall(t, "PUT", b+"/rooms/across/state", room["token"].(string), map[string]any{"scope": "_shared", "key": "x", "value": 1})
	select {
	case ev := <-got:
		t.Logf("the stream on a heard b's write after %v: %q", time.Since(written).Round(time.Millisecond), strings.TrimSpace(ev))
	case <-time.After(10 * time.Second):
		t.Fatal("a live stream on one process did not hear a write made through another")
	}
}
