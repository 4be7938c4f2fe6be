package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/syncsubstrate/sync/oauth/oauthtest"
)

// Issue 42, item 6, in a browser on the real-size room: what the room is
// for comes first (its dashboard, then what changed), long sections are
// folded behind counts, and at 1366×768 and at 390×844 the page is at
// most 4 screens tall before anything is unfolded, each section (once
// unfolded) at most 2 screens; the past-seq page too. A link into a
// folded section opens it.
func TestBrowserRoomPageHeightsAtRealSize(t *testing.T) {
	ctx, public, dbURL := browserSignedUp(t)
	room := teamRoomFor(t, dbURL, "alice")
	num := func(js string) float64 {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[float64](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	// The page's sections, each once its folds are opened, as the
	// person opens them.
	const sections = `["summary", "surfaces", "activity", "messages", "agents", "actions", "state", "logs", "views", "console", "happened", "diff", "past-agents", "past-actions"]`
	heights := `(() => { const out = {}; for (const id of ` + sections + `) { const s = document.getElementById(id); if (!s) continue;
		const d = s.closest("details") || s.querySelector(":scope > details"); if (d) d.open = true;
		out[id] = Math.round(s.getBoundingClientRect().height); if (d) d.open = false; } return out; })()`
	for _, size := range [][2]int64{{1366, 768}, {390, 844}} {
		w := fmt.Sprint(size[0])
		view := chromedp.EmulateViewport(size[0], size[1])
		if size[0] < 600 {
			view = chromedp.EmulateViewport(size[0], size[1], chromedp.EmulateMobile)
		}
		screen := float64(size[1])
		for _, page := range []struct{ name, url string }{
			{"room", public + "/rooms/" + room.ID},
			{"past", public + "/rooms/" + room.ID + "?at=400"},
		} {
			name := "realsize-" + page.name + "-" + w
			wait := chromedp.WaitVisible(chromedp.CSS("#live.on"))
			if page.name == "past" {
				wait = chromedp.WaitVisible(chromedp.CSS("p.past"))
			}
			if err := chromedp.Do(ctx, view, chromedp.Navigate(page.url), wait, parsed()); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			untilLaidOut(t, ctx, name)
			total := num(`document.body.scrollHeight`)
			first := "surfaces"
			if page.name == "past" {
				first = "happened" // what the seq did
			}
			surfaces := num(`(s => s ? s.getBoundingClientRect().top + scrollY : -1)(document.getElementById("` + first + `"))`)
			t.Logf("%s: %.0f px tall (%.1f screens), #%s at y = %.0f", name, total, total/screen, first, surfaces)
			if total > 4*screen {
				t.Errorf("%s: %.0f px tall, more than 4 screens of %.0f", name, total, screen)
			}
			if surfaces < 0 || surfaces > screen {
				t.Errorf("%s: #%s starts at y = %.0f, not within the first screen", name, first, surfaces)
			}
			oauthtest.RequireAxeClean(t, ctx, name)
			screenshot(t, ctx, name)
			each, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]float64](heights))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: sections unfolded %v", name, each)
			if parts, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]float64](`Object.fromEntries(Array.from(document.querySelectorAll("#surfaces .surface, #actions article")).map(s => [s.id, Math.round(s.getBoundingClientRect().height)]))`)); err == nil {
				t.Logf("%s: parts %v", name, parts)
			}
			for id, h := range each {
				if h > 2*screen {
					t.Errorf("%s: #%s is %.0f px unfolded, more than 2 screens", name, id, h)
				}
			}
		}
		// A link into a folded section opens it: the state's entries are
		// folded, and a fragment naming one of them unfolds the way.
		if err := chromedp.Do(ctx, chromedp.Navigate(public+"/rooms/"+room.ID+"#state"), chromedp.WaitVisible(chromedp.CSS("#live.on"))); err != nil {
			t.Fatal(err)
		}
		open, err := chromedp.Run(ctx, chromedp.Evaluate[string](`Array.from(document.querySelectorAll("#state details.fold")).map(d => d.open).join(" ")`))
		if err != nil {
			t.Fatal(err)
		}
		if open == "" || strings.Contains(open, "false") {
			t.Errorf("at %s px, #state opened by its fragment has folds %q", w, open)
		}
	}
}
