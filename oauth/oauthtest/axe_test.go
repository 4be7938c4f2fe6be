package oauthtest

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The accessibility check the page tests rely on must be able to fail: a
// page with a low-contrast paragraph and an unlabeled button is reported
// with both rules as serious or critical, and a clean page reports none.
func TestAxeReportsViolations(t *testing.T) {
	ctx := Chromium(t, time.Minute)
	bad := `<!doctype html><html lang="en"><head><title>bad</title></head><body><main>
<p style="color:#aaa;background:#fff">faint words</p><button></button></main></body></html>`
	good := `<!doctype html><html lang="en"><head><title>good</title></head><body><main>
<h1>Fine</h1><p>plain words</p><button>Go</button></main></body></html>`
	if err := chromedp.Do(ctx, chromedp.Navigate("data:text/html,"+url.PathEscape(bad))); err != nil {
		t.Fatal(err)
	}
	found := map[string]string{}
	for _, v := range Axe(t, ctx) {
		found[v.ID] = v.Impact
	}
	for _, id := range []string{"color-contrast", "button-name"} {
		if imp := found[id]; imp != "serious" && imp != "critical" {
			t.Errorf("axe did not report %s as serious or critical on a page that breaks it: %v", id, found)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("data:text/html,"+url.PathEscape(good))); err != nil {
		t.Fatal(err)
	}
	for _, v := range Axe(t, ctx) {
		if v.Impact == "serious" || v.Impact == "critical" || strings.HasPrefix(v.ID, "color") {
			t.Errorf("axe reported %s on a clean page", v)
		}
	}
}
