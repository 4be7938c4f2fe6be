package oauthtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// AxeViolation is one rule axe-core found broken on a page, with the
// elements that break it (their CSS selectors) so a failure says where.
type AxeViolation struct {
	ID      string   `json:"id"`
	Impact  string   `json:"impact"`
	Help    string   `json:"help"`
	Targets []string `json:"targets"`
}

func (v AxeViolation) String() string {
	return fmt.Sprintf("%s (%s): %s at %s", v.ID, v.Impact, v.Help, strings.Join(v.Targets, ", "))
}

// axeSource is axe-core's browser bundle from the npm package .ci/run
// installs next to Node (SYNC_NODE_MODULES/axe-core). Outside CI a missing
// bundle skips the test; in CI it fails.
func axeSource(t *testing.T) string {
	t.Helper()
	mods := os.Getenv("SYNC_NODE_MODULES")
	if mods == "" {
		if home, err := os.UserHomeDir(); err == nil {
			mods = filepath.Join(home, ".cache", "sync-ci-tools", "node_modules")
		}
	}
	src, err := os.ReadFile(filepath.Join(mods, "axe-core", "axe.min.js"))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("axe-core is not installed (.ci/run installs it): %v", err)
		}
		t.Skipf("axe-core is not installed (npm install --prefix ~/.cache/sync-ci-tools axe-core): %v", err)
	}
	return string(src)
}

// Axe runs axe-core's WCAG 2.x A and AA rules on the page the browser
// shows now and returns every violation. The bundle is evaluated over CDP,
// which the pages' CSP (no inline script) does not govern.
func Axe(t *testing.T, ctx context.Context) []AxeViolation {
	t.Helper()
	src := axeSource(t)
	run := `(async () => {
		const r = await axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice']}});
		return JSON.stringify(r.violations.map(v => ({id: v.id, impact: v.impact || '', help: v.help,
			targets: v.nodes.map(n => n.target.join(' '))})));
	})()`
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](src+";true")); err != nil {
		t.Fatalf("axe: inject: %v", err)
	}
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](run, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("axe: run: %v", err)
	}
	var out []AxeViolation
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		t.Fatalf("axe: decode %q: %v", raw, err)
	}
	return out
}

// RequireAxeClean fails the test when axe-core finds a serious or
// critical violation on the page the browser shows now (name says which
// page, in the failure); moderate and minor ones are logged.
func RequireAxeClean(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	for _, v := range Axe(t, ctx) {
		if v.Impact == "serious" || v.Impact == "critical" {
			t.Errorf("axe on %s: %s", name, v)
		} else {
			t.Logf("axe on %s (not failing): %s", name, v)
		}
	}
}
