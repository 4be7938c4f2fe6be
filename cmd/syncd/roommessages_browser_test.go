package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Issue 42, bugs 1 and 7, in a browser on the real-size room: the list
// ends with the newest message; one sent from the box is there after the
// page reloads, one sent by an agent arrives live; "Earlier messages"
// pages back without a script's help; Recent activity and Last change
// read as sentences, with no storage key of the system's.
func TestBrowserRoomMessagesAtRealSize(t *testing.T) {
	ctx, public, dbURL := browserSignedUp(t)
	room := teamRoomFor(t, dbURL, "alice")
	eval := func(js string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return s
	}
	waitFor := func(what, js string) {
		t.Helper()
		if err := untilTrue(ctx, `document.readyState !== "loading" && (`+js+`)`, 15*time.Second); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	lastBody := `(function(){var l=document.querySelectorAll("#message-list li");return l.length?l[l.length-1].textContent:""})()`
	page := public + "/rooms/" + room.ID
	for _, width := range []int64{1366, 390} {
		w := fmt.Sprint(width)
		view := chromedp.EmulateViewport(width, 900)
		if width < 600 {
			view = chromedp.EmulateViewport(width, 844, chromedp.EmulateMobile)
		}
		if err := chromedp.Do(ctx, view, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#live.on"))); err != nil {
			t.Fatalf("the room page at %s px: %v", w, err)
		}
		// From the box: the answer's page (a reload) lists it last.
		said := "from the box at " + w + " px"
		if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#compose"), said), chromedp.Submit(chromedp.CSS("#compose"))); err != nil {
			t.Fatal(err)
		}
		waitFor("the message sent from the box, last in the list", lastBody+`.includes(`+jsString(said)+`)`)
		waitFor("the live stream again", `document.querySelector("#live.on")`)
		// From an agent: it arrives live.
		live := "planner, live at " + w + " px"
		restCall(t, "POST", page+"/actions/_send_message/invoke", room.Agents["planner"], map[string]any{"params": map[string]any{"body": live}})
		waitFor("the agent's message, live", lastBody+`.includes(`+jsString(live)+`)`)
		if shown := eval(`document.getElementById("messages-shown").textContent`); !strings.HasPrefix(shown, "The newest 50 of ") {
			t.Errorf("at %s px the list says %q", w, shown)
		}
		for _, sel := range []string{"#activity", "#summary-last"} {
			got := eval(`document.querySelector(` + jsString(sel) + `).innerText`)
			for _, raw := range []string{"_loom", "_acks", "_threads", ":t:", "loom:", "lease:"} {
				if strings.Contains(got, raw) {
					t.Errorf("at %s px %s shows %q: %s", w, sel, raw, got)
				}
			}
		}
		// Each filter's box sits on the line of its words (at 390 px the
		// box of the second was left at the end of the first's line), and
		// the filters hide what they say.
		if off := eval(`Array.from(document.querySelectorAll(".messagelist input[type=checkbox]")).filter(function(b){var n=Array.from(b.labels[0].childNodes).filter(function(x){return x.nodeType===3&&x.textContent.trim()}).pop(), r=document.createRange(); r.selectNodeContents(n); var w=r.getClientRects()[0], c=b.getBoundingClientRect(); return Math.abs((c.top+c.bottom)/2-(w.top+w.bottom)/2) > w.height/2}).map(function(b){return b.id}).join(" ")`); off != "" {
			t.Errorf("at %s px these filters' boxes are not on their words' line: %s", w, off)
		}
		visible := func(sel string) string {
			return eval(`String(Array.from(document.querySelectorAll(` + jsString(sel) + `)).filter(function(li){return li.offsetParent !== null}).length)`)
		}
		if n := visible("#message-list li.kind-action_invocation"); n != "0" {
			t.Errorf("at %s px %s action invocations shown with their filter off", w, n)
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#only-direct"), chromedp.NodeVisible)); err != nil {
			t.Fatal(err)
		}
		if n := visible("#message-list li:not(.to-you)"); n != "0" {
			t.Errorf("at %s px %s messages not to you shown with only messages to you", w, n)
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#only-direct"), chromedp.NodeVisible)); err != nil {
			t.Fatal(err)
		}
		if n := visible("#message-list li"); n == "0" {
			t.Errorf("at %s px no message shown with the filter off again", w)
		}
		viewShot(t, ctx, "realsize-room-"+w+"-top", "#summary")
		viewShot(t, ctx, "realsize-room-"+w+"-messages", "#messages-shown")
		viewShot(t, ctx, "realsize-room-"+w+"-activity", "#activity")
		// Earlier, by the link, which needs no script.
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#message-pager-earlier a[rel="prev"]`), chromedp.NodeVisible)); err != nil {
			t.Fatal(err)
		}
		waitFor("the earlier page", `document.getElementById("messages-shown").textContent.startsWith("Earlier messages: 50 of ")`)
		if l := eval(`document.getElementById("live").textContent`); !strings.Contains(l, "paused") {
			t.Errorf("an earlier page says %q in its live line", l)
		}
		viewShot(t, ctx, "realsize-room-"+w+"-earlier", "#messages-shown")
	}
}

func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
