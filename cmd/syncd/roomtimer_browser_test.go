package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A live room page shows what a timer changes when it changes it, with
// no write: an entry whose timer runs out goes from the page at once (it
// stayed until the next write before), and the room's seq has not moved.
// Screenshots before and after.
func TestBrowserRoomEntryExpiresLive(t *testing.T) {
	ctx, public, _ := browserSignedUp(t)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1366, 900)); err != nil {
		t.Fatal(err)
	}
	room := restCall(t, "POST", public+"/rooms", "", map[string]any{"id": "kiosk", "meta": map[string]any{"label": "Kiosk"}})
	roomToken := room["token"].(string)
	restCall(t, "PUT", public+"/rooms/kiosk/state", roomToken, map[string]any{"scope": "_shared", "key": "status", "value": "open"})
	if err := chromedp.Do(ctx,
		chromedp.Navigate(public+"/"),
		chromedp.WaitVisible(chromedp.CSS("#claim-room")),
		chromedp.SendKeys(chromedp.CSS("#claim-room"), "kiosk"),
		chromedp.SendKeys(chromedp.CSS("#claim-token"), roomToken),
		chromedp.Submit(chromedp.CSS("#claim-token")),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/rooms/kiosk"]`)),
		chromedp.Navigate(public+"/rooms/kiosk"),
		chromedp.WaitVisible(chromedp.CSS("#live.on")),
	); err != nil {
		t.Fatalf("opening the room page: %v", err)
	}
	// The entry is written with a timer while the page is open: it shows
	// (a commit), then goes when the timer runs out (no commit).
	const life = 3 * time.Second
	w := restCall(t, "PUT", public+"/rooms/kiosk/state", roomToken, map[string]any{"scope": "_shared", "key": "offer",
		"value": "half price until the timer ends", "timer": map[string]any{"ms": life.Milliseconds()}})
	expires := time.Now().Add(life)
	seq := int64(w["seq"].(float64))
	present := `!!document.getElementById("entry-_shared-offer")`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](present, chromedp.WithPollingTimeout(5*time.Second))); err != nil {
		t.Fatalf("the timed entry did not show: %v", err)
	}
	screenshot(t, ctx, "room-timer-before")
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool]("!"+present, chromedp.WithPollingInterval(5*time.Millisecond), chromedp.WithPollingTimeout(life+8*time.Second))); err != nil {
		t.Fatalf("the entry whose timer ran out stayed on the page with no write: %v", err)
	}
	late := time.Since(expires)
	t.Logf("the entry left the page %v after its timer ran out", late.Round(time.Millisecond))
	if late < -100*time.Millisecond || late > 1500*time.Millisecond {
		t.Errorf("the entry left the page %v after its timer ran out, want within 1.5 s (and not before)", late)
	}
	if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.dataset.seq`)); err != nil || got != fmt.Sprint(seq) {
		t.Errorf("the page's seq is %q (%v), want %d: no write made the change", got, err, seq)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`!!document.getElementById("entry-_shared-status")`, chromedp.WithPollingTimeout(time.Second))); err != nil {
		t.Errorf("the untimed entry left too: %v", err)
	}
	screenshot(t, ctx, "room-timer-after")
}
