package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/syncsubstrate/sync/lobby/teamroom"
	"github.com/syncsubstrate/sync/oauth/oauthtest"
)

// The real-size room (lobby/teamroom) in a browser, on a laptop (1366 px)
// and a phone (390 px): the table surface counts 60 and pages by links,
// its filter finds a task past row 50, a refusal names its false clause,
// the present list tells maya's agents apart, and the account page has
// the site's header; each page fits its width, axe-core finds no serious
// issue, and each is kept as a screenshot (SYNC_ARTIFACTS).
func TestBrowserTeamRoomPages(t *testing.T) {
	ctx, public, dbURL := browserSignedUp(t)
	room := teamRoomFor(t, dbURL, "alice")
	var width int64
	check := func(name string) {
		t.Helper()
		problems, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](fmt.Sprintf(layoutProblems, width)))
		if err != nil {
			t.Fatalf("%s: layout: %v", name, err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s", name, p)
		}
		oauthtest.RequireAxeClean(t, ctx, name)
		if h, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollHeight`)); err == nil {
			t.Logf("%s: %d px tall", name, h)
		}
		screenshot(t, ctx, name)
	}
	// near keeps, beside the whole page, the screen around one element:
	// what a person sees there, at the size they see it.
	near := func(name, selector string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.ScrollIntoView(chromedp.CSS(selector))); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		path := filepath.Join(artifacts(t), name+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}
	text := func(js string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return s
	}
	roomURL := public + "/rooms/" + room.ID
	for _, width = range []int64{1366, 390} {
		w := fmt.Sprint(width)
		view := chromedp.EmulateViewport(width, 768)
		if width < 600 {
			view = chromedp.EmulateViewport(width, 844, chromedp.EmulateMobile)
		}
		if err := chromedp.Do(ctx, view, chromedp.Navigate(roomURL+"#surface-task_table"), chromedp.WaitVisible(chromedp.CSS("#live.on"))); err != nil {
			t.Fatalf("the room page at %s px: %v", w, err)
		}
		if got := text(`document.querySelector("#h-surface-task_table").textContent + " | " + document.querySelector("#tbl-task_table-shown").textContent`); got != "task_table (60) | rows 1–50 of 60" {
			t.Errorf("at %s px the table says %q", w, got)
		}
		if got := text(`document.querySelector("#summary-present").textContent`); !strings.Contains(got, "alice (web)") || !strings.Contains(got, "alice (claude-ai)") {
			t.Errorf("at %s px the present list reads %q", w, got)
		}
		check("team-room-" + w)
		near("team-room-present-"+w, "#summary-present")
		// The pager's link, followed as a person would.
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#surface-task_table a[rel="next"]`)), chromedp.WaitVisible(chromedp.CSS(`#surface-task_table a[rel="prev"]`))); err != nil {
			t.Fatalf("page 2 of the table at %s px: %v", w, err)
		}
		if got := text(`document.querySelector("#tbl-task_table-shown").textContent + " | " + document.querySelector("#tbl-task_table").textContent.includes(` + fmt.Sprintf("%q", teamroom.DeepTaskTitle) + `)`); got != "rows 51–60 of 60 | true" {
			t.Errorf("at %s px page 2 of the table: %q", w, got)
		}
		check("team-table-page2-" + w)
		near("team-table-page2-near-"+w, "#surface-task_table nav.pager")
		// The filter, sent with Enter, answered over all 60 rows.
		if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#tbl-task_table-filter"), "payment provider"+kb.Enter)); err != nil {
			t.Fatal(err)
		}
		if err := untilTrue(ctx, `location.search.includes("tq.task_table=payment") && document.readyState === "complete" && !!document.querySelector("#tbl-task_table-shown")`, 20*time.Second); err != nil {
			t.Fatalf("the filter at %s px did not load its page: %v", w, err)
		}
		if got := text(`document.querySelectorAll("#tbl-task_table tbody tr").length + " | " + document.querySelector("#tbl-task_table-shown").textContent`); !strings.HasPrefix(got, "1 | 1 of 60 match") {
			t.Errorf("at %s px filtering for the payment provider keys: %q", w, got)
		}
		check("team-table-filter-" + w)
		near("team-table-filter-near-"+w, "#surface-task_table")
		// A refusal that names its false clause, at the bar used.
		if err := chromedp.Do(ctx, chromedp.Navigate(roomURL), chromedp.WaitVisible(chromedp.CSS("#live.on")),
			chromedp.Click(chromedp.CSS(`#surface-controls form[action$="/invoke/ship"] button`)), chromedp.WaitVisible(chromedp.CSS(".feedback.refused"))); err != nil {
			t.Fatalf("ship at %s px: %v", w, err)
		}
		if got := text(`document.querySelector(".feedback.refused p").textContent`); !strings.Contains(got, `it needs size(state._shared.tasks.filter(t, t.status != "done")) == 0`) {
			t.Errorf("at %s px the ship refusal reads %q", w, got)
		}
		check("team-refusal-" + w)
		near("team-refusal-near-"+w, ".feedback.refused")
		if err := chromedp.Do(ctx, chromedp.Navigate(public+"/account"), chromedp.WaitVisible(chromedp.CSS(`form[action="/signout"]`))); err != nil {
			t.Fatal(err)
		}
		if got := text(`document.querySelector("a.skip").getAttribute("href") + " " + document.querySelector("nav[aria-label=Site]").textContent`); got != "#main Lobby Account" {
			t.Errorf("at %s px the account page's header: %q", w, got)
		}
		check("team-account-" + w)
	}
}
