package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/oauth/oauthtest"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// The loom page in a real browser, through the real server, shared by a
// person (alice, on the page) and a model (bob's MCP client "Claude",
// running the loom's → commands with sync_loom): a tree of 30+ nodes
// from both, navigated with the keyboard and by clicking; a branch from the
// node on screen lands under it; the model's nodes arrive live (their
// latency logged); a branch read as prose; a branch the model holds is
// refused with who holds it; axe-core finds nothing serious; the page fits
// 1366 px and 390 px (screenshots saved); the weight with 300 nodes logged.
func TestBrowserLoomPage(t *testing.T) {
	ctx, public := loomBrowser(t)

	room := restCall(t, "POST", public+"/rooms", "", map[string]any{"id": "weave", "meta": map[string]any{"label": "Weave"}})
	roomToken := room["token"].(string)
	bob := oauthtest.SignUp(t, public, "bob", "")
	loomAs := func(tok, cmds string) map[string]any {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"commands": cmds})
		code, res := call(t, "POST", public+"/rooms/weave/loom", tok, string(body))
		if code != 200 {
			t.Fatalf("%s: %d %v", cmds, code, res)
		}
		return res
	}
	evalInt := func(expr string) int {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[int](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	evalStr := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	// text is sel's visible text once it has some, read in the page, not
	// through a node id a live refresh may replace ("-32000").
	text := func(sel string) string {
		t.Helper()
		q, _ := json.Marshal(sel)
		js := `(function () { var e = document.querySelector(` + string(q) + `); return e && (e.offsetWidth || e.offsetHeight || e.getClientRects().length) ? e.innerText : ""; })()`
		if err := untilTrue(ctx, js+` !== ""`, 5*time.Second); err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return evalStr(js)
	}
	// do runs steps again when a live refresh replaced the element they
	// held between finding it and acting on it.
	do := func(steps ...chromedp.Action[chromedp.Void]) error {
		var err error
		for range 5 {
			sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			err = chromedp.Do(sctx, steps...)
			cancel()
			if err == nil || !strings.Contains(err.Error(), "-32000") {
				if err != nil {
					screenshot(t, ctx, "loom-failed")
				}
				return err
			}
			// Again at once: the refresh that replaced the element is
			// done, and the steps find its successor.
		}
		return err
	}
	// fill types into a field and presses a button in one turn of the
	// page's event loop, as a person's typing survives a refresh (the
	// page carries field values over), which a test's element handle
	// does not.
	fill := func(field, value, button string) {
		t.Helper()
		js, _ := json.Marshal(value)
		evalStr(`(function () { document.getElementById("` + field + `").value = ` + string(js) + `; document.getElementById("` + button + `").click(); return "ok"; })()`)
	}
	// open clicks node id's tree item and waits for it to be the node in
	// view, clicking again if a refresh swallowed the click.
	open := func(id string) error {
		var err error
		for range 4 {
			sctx, cancel := context.WithTimeout(ctx, 4*time.Second)
			err = chromedp.Do(sctx, chromedp.Click(chromedp.CSS(`#t-`+id+` > a`)), chromedp.WaitVisible(chromedp.CSS(`#t-`+id+`[aria-selected="true"]`)))
			cancel()
			if err == nil {
				return nil
			}
		}
		screenshot(t, ctx, "loom-failed")
		return err
	}

	claimInLobby(t, ctx, public, "weave", roomToken)
	// Alice shares the room with bob, whose MCP client is the model.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(public+"/"),
		chromedp.WaitVisible(chromedp.CSS("#share-weave")),
		chromedp.SendKeys(chromedp.CSS("#share-weave"), "bob"),
	); err != nil {
		t.Fatalf("sharing the room with bob: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__sharing = true`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#share-role-weave"), "participant"),
		chromedp.Submit(chromedp.CSS("#share-weave")),
	); err != nil {
		t.Fatalf("sharing the room with bob: %v", err)
	}
	// The share returns to the lobby: wait for the new page.
	if err := untilTrue(ctx, `!window.__sharing && document.readyState === "complete"`, 30*time.Second); err != nil {
		t.Fatalf("sharing the room with bob: the lobby did not come back: %v", err)
	}
	tok := bob.Token(t, "Claude", map[string]string{"weave": "write"})["access_token"].(string)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "claude", Version: "1"}, nil).Connect(context.Background(),
		&sdk.StreamableClientTransport{Endpoint: public + "/mcp", HTTPClient: &http.Client{Transport: oauthtest.Bearer{Token: tok}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	// model runs commands as the model does, over MCP (sync_loom).
	model := func(cmds string) string {
		t.Helper()
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "sync_loom", Arguments: map[string]any{"room": "weave", "commands": cmds}})
		if err != nil {
			t.Fatalf("sync_loom %s: %v", cmds, err)
		}
		text := res.Content[0].(*sdk.TextContent).Text
		if res.IsError {
			t.Fatalf("sync_loom %s: %s", cmds, text)
		}
		return text
	}
	if res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "sync_embody", Arguments: map[string]any{"room": "weave"}}); err != nil || res.IsError {
		t.Fatalf("embodying bob's client in the room: %v %v", err, res)
	}
	model("→ help")
	claude := ""
	for _, a := range restCall(t, "GET", public+"/rooms/weave/agents", roomToken, nil)["agents"].([]any) {
		if id := a.(map[string]any)["id"].(string); strings.HasPrefix(id, "bob:") {
			claude = id
		}
	}
	if claude == "" {
		t.Fatal("bob's MCP client has no agent in the room")
	}
	loomAs(roomToken, "→ permit "+claude+" loom_aware loom_write loom_generate doc_read doc_write")

	// Alice plants the tree from the page's form; the page lands on its
	// root.
	if err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1366, 900),
		chromedp.Navigate(public+"/web/rooms/weave/loom"),
		chromedp.WaitVisible(chromedp.CSS("#tree-name")),
		chromedp.SendKeys(chromedp.CSS("#tree-name"), "house"),
		chromedp.SendKeys(chromedp.CSS("#tree-root"), "The house stood empty at the end of the lane."),
		chromedp.Click(chromedp.CSS("#new-tree button")),
		chromedp.WaitVisible(chromedp.CSS(`#t-1[aria-selected="true"]`)),
		chromedp.WaitVisible(chromedp.CSS("#live.on")),
	); err != nil {
		t.Fatalf("planting from the page: %v", err)
	}

	// The model writes three branches of its own under the root, eight
	// nodes each, over the API.
	for b := 1; b <= 3; b++ {
		cmds := []string{fmt.Sprintf(`→ branch from 1 tree:1 "Model branch %d begins."`, b)}
		for i := 2; i <= 8; i++ {
			cmds = append(cmds, fmt.Sprintf(`→ add "Model branch %d, sentence %d, and the windows watched."`, b, i))
		}
		model(strings.Join(cmds, "\n"))
	}
	// Alice writes hers from the page: a branch from the root, then
	// continuing it from the node on screen each time (in place).
	for i := 1; i <= 7; i++ {
		if err := do(chromedp.WaitVisible(chromedp.CSS("#branch-text"))); err != nil {
			t.Fatal(err)
		}
		fill("branch-text", fmt.Sprintf("Alice writes line %d.", i), "branch-btn")
		if err := do(
			chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#t-%d[aria-selected="true"]`, 25+i))),
		); err != nil {
			t.Fatalf("alice's line %d: %v", i, err)
		}
	}
	if n := evalInt(`document.querySelectorAll('[role=treeitem]').length`); n != 32 {
		t.Fatalf("the tree shows %d nodes, want 32", n)
	}
	// The last of alice's lines is on screen, its URL names it.
	heading, loc := text("#h-node"), evalStr(`location.search`)
	if !strings.HasPrefix(heading, "Node 32") || loc != "?tree=1&node=32" {
		t.Fatalf("after alice's lines: %q at %q", heading, loc)
	}

	// Keyboard: the tree is one tab stop; arrows move, Enter opens.
	nodeInView := func() string {
		t.Helper()
		return strings.Fields(text("#h-node"))[1]
	}
	focused := func() string {
		t.Helper()
		return evalStr(`document.activeElement.id`)
	}
	if err := do(chromedp.Focus(chromedp.CSS(`#t-32`)), chromedp.KeyEvent(kb.Home)); err != nil {
		t.Fatal(err)
	}
	if f := focused(); f != "t-1" {
		t.Fatalf("Home focuses %q, want the root", f)
	}
	if err := do(chromedp.KeyEvent(kb.ArrowDown), chromedp.KeyEvent(kb.ArrowDown)); err != nil {
		t.Fatal(err)
	}
	if f := focused(); f != "t-3" {
		t.Fatalf("two ArrowDowns from the root focus %q, want t-3", f)
	}
	if err := do(chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.CSS(`#t-3[aria-selected="true"]`))); err != nil {
		t.Fatal(err)
	}
	if n := nodeInView(); n != "3" {
		t.Fatalf("Enter on t-3 shows node %s", n)
	}
	// ArrowLeft closes an open item, then goes to its parent; ArrowRight
	// opens it again.
	if err := do(chromedp.KeyEvent(kb.ArrowLeft)); err != nil {
		t.Fatal(err)
	}
	if f, open := focused(), evalStr(`document.getElementById("t-3").getAttribute("aria-expanded")`); f != "t-3" || open != "false" {
		t.Fatalf("ArrowLeft on the open t-3: focus %q, aria-expanded %q", f, open)
	}
	if down := evalStr(`(function () { var e = new KeyboardEvent("keydown", {key: "ArrowDown", bubbles: true}); document.activeElement.dispatchEvent(e); return document.activeElement.id; })()`); down == "t-4" {
		t.Fatal("ArrowDown from a closed item goes into it")
	}
	if err := do(chromedp.Focus(chromedp.CSS("#t-3")), chromedp.KeyEvent(kb.ArrowRight)); err != nil {
		t.Fatal(err)
	}
	if open := evalStr(`document.getElementById("t-3").getAttribute("aria-expanded")`); open != "true" {
		t.Fatalf("ArrowRight does not open t-3: %q", open)
	}
	// One key at a time, each seen done before the next (two sent at
	// once under load were seen to leave the focus on t-3).
	if err := do(chromedp.KeyEvent(kb.ArrowLeft)); err != nil {
		t.Fatal(err)
	}
	if err := untilTrue(ctx, `document.getElementById("t-3").getAttribute("aria-expanded") === "false"`, 3*time.Second); err != nil {
		t.Fatalf("ArrowLeft on the open t-3 does not close it: %v", err)
	}
	if err := do(chromedp.KeyEvent(kb.ArrowLeft)); err != nil {
		t.Fatal(err)
	}
	if err := untilTrue(ctx, `document.activeElement.id === "t-2"`, 3*time.Second); err != nil {
		t.Fatalf("ArrowLeft twice from t-3 focuses %q, want its parent t-2", focused())
	}
	if err := do(chromedp.Focus(chromedp.CSS("#t-3")), chromedp.KeyEvent(kb.ArrowRight)); err != nil {
		t.Fatal(err)
	}
	// Alt+↓ shows the next sibling, Alt+← the parent.
	if err := open("2"); err != nil {
		t.Fatal(err)
	}
	if err := do(chromedp.KeyEvent(kb.ArrowDown, chromedp.KeyModifiers(chromedp.ModifierAlt)), chromedp.WaitVisible(chromedp.CSS(`#t-10[aria-selected="true"]`))); err != nil {
		t.Fatalf("Alt+ArrowDown from node 2 (the first branch) to its sibling 10: %v", err)
	}
	if err := do(chromedp.KeyEvent(kb.ArrowLeft, chromedp.KeyModifiers(chromedp.ModifierAlt)), chromedp.WaitVisible(chromedp.CSS(`#t-1[aria-selected="true"]`))); err != nil {
		t.Fatalf("Alt+ArrowLeft to the parent: %v", err)
	}
	// Several continuations side by side at the root.
	if kids := evalInt(`document.querySelectorAll('#kids > li').length`); kids != 4 {
		t.Fatalf("the root shows %d continuations, want 4", kids)
	}

	// Clicking: open node 12 (the model's second branch), branch from it;
	// the new node lands under 12, as the tree and the API both say.
	if err := open("12"); err != nil {
		t.Fatal(err)
	}
	if n := nodeInView(); n != "12" {
		t.Fatalf("clicking t-12 shows node %s", n)
	}
	fill("branch-text", "ALICE-UNDER-12", "branch-btn")
	if err := do(
		chromedp.WaitVisible(chromedp.CSS(`#t-33[aria-selected="true"]`)),
	); err != nil {
		t.Fatal(err)
	}
	newID := nodeInView()
	res := loomAs(roomToken, "→ view "+newID+" tree:1")
	if text, _ := res["text"].(string); !strings.Contains(text, "#"+newID+" ← 12") || !strings.Contains(text, "ALICE-UNDER-12") {
		t.Fatalf("alice's branch from node 12 is not under 12: %s", text)
	}

	// Live: the model adds under node 9 (the end of its first branch)
	// while alice's page shows the tree; each node appears without a
	// reload. The page notes when each tree item first shows.
	if err := open("9"); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__seen = {}; window.__mark = function () { document.querySelectorAll('[role=treeitem]').forEach(function (li) { if (!window.__seen[li.id]) window.__seen[li.id] = Date.now(); }); };
			window.__mark(); new MutationObserver(window.__mark).observe(document.getElementById("main"), {childList: true, subtree: true}); true`)); err != nil {
		t.Fatal(err)
	}
	var lat []time.Duration
	parent := 9
	for i := range 30 {
		out := model(fmt.Sprintf(`→ add from:%d tree:1 "Live line %d from the model."`, parent, i+1))
		acked := time.Now()
		m := regexp.MustCompile(`✓ node (\d+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("add: %v", out)
		}
		parent, _ = strconv.Atoi(m[1])
		seen, err := chromedp.Run(ctx, chromedp.Poll[float64](fmt.Sprintf(`window.__seen["t-%d"]`, parent), chromedp.WithPollingInterval(5*time.Millisecond), chromedp.WithPollingTimeout(5*time.Second)))
		if err != nil {
			t.Fatalf("the model's node %d did not appear on alice's page within 5 s: %v", parent, err)
		}
		lat = append(lat, max(0, time.UnixMilli(int64(seen)).Sub(acked)))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("from a model's → add (its sync_loom response over MCP) to the node on a person's loom page, over %d adds: p50 %v, p99 %v, max %v", len(lat), lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
	// The node in view did not move: alice still reads node 9.
	if n := nodeInView(); n != "9" {
		t.Fatalf("a live change moved alice's view to node %s", n)
	}

	// Held: the model's last add holds branch 1.2's turn (node 9's line)
	// for a minute. At node 9's line head, the page says who holds it,
	// offers no branch button, and a branch forced through is refused
	// with that reason.
	head := strconv.Itoa(parent)
	if err := open(head); err != nil {
		t.Fatal(err)
	}
	if err := do(chromedp.WaitVisible(chromedp.CSS(`#held-here`))); err != nil {
		t.Fatalf("the held branch is not shown as held: %v", err)
	}
	held := text("#held-here")
	disabled := evalStr(`String(document.getElementById("branch-btn").disabled)`) == "true"
	if !strings.Contains(held, claude+"'s turn") || !disabled {
		t.Fatalf("held branch: %q, button disabled %v", held, disabled)
	}
	screenshot(t, ctx, "loom-held")
	evalStr(`document.getElementById("branch-btn").disabled = false; "ok"`)
	fill("branch-text", "FORCED-ON-HELD", "branch-btn")
	if err := do(
		chromedp.WaitVisible(chromedp.CSS("#ran .failed")),
	); err != nil {
		t.Fatal(err)
	}
	if refusal := text("#ran"); !strings.Contains(refusal, claude+"'s turn") {
		t.Fatalf("a branch on the held line was not refused with its holder: %q", refusal)
	}
	if text := loomAs(roomToken, "→ list "+head+" tree:1")["text"].(string); strings.Contains(text, "FORCED-ON-HELD") {
		t.Fatal("HOLE: the page wrote on a held branch")
	}

	// Buffer mode: node 8's branch as prose, model parts marked.
	if err := open("8"); err != nil {
		t.Fatal(err)
	}
	if err := do(chromedp.Click(chromedp.CSS("#as-prose")), chromedp.WaitVisible(chromedp.CSS("#prose"))); err != nil {
		t.Fatalf("reading as prose: %v", err)
	}
	prose, loc := text("#prose"), evalStr(`location.search`)
	if !strings.Contains(prose, "The house stood empty at the end of the lane. ︱› Model branch 1 begins. ︱› Model branch 1, sentence 2") || !strings.Contains(loc, "as=prose") {
		t.Fatalf("the branch as prose: %q at %q", prose, loc)
	}
	screenshot(t, ctx, "loom-prose")

	// Ctrl+Space continues from the node in view: with no generator the
	// request is queued and shows as pending on the node.
	if err := do(chromedp.Click(chromedp.CSS("#as-nodes")), chromedp.WaitVisible(chromedp.CSS("#content"))); err != nil {
		t.Fatal(err)
	}
	if err := open("33"); err != nil {
		t.Fatal(err)
	}
	if err := do(chromedp.KeyEvent(" ", chromedp.KeyModifiers(chromedp.ModifierCtrl)), chromedp.WaitVisible(chromedp.CSS("#pending-here"))); err != nil {
		t.Fatalf("Ctrl+Space on node 33: %v", err)
	}
	if p := text("#pending-here"); !strings.Contains(p, "asked by alice:web") {
		t.Fatalf("the continuation asked with Ctrl+Space: %q", p)
	}

	// Accessibility, and the two widths.
	if err := do(chromedp.WaitVisible(chromedp.CSS("#as-prose")), chromedp.WaitVisible(chromedp.CSS("#content"))); err != nil {
		t.Fatal(err)
	}
	oauthtest.RequireAxeClean(t, ctx, "loom page")
	screenshot(t, ctx, "loom-1366")
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#live.on"))); err != nil {
		t.Fatal(err)
	}
	if overflow, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`)); err != nil || overflow {
		t.Errorf("the loom page is wider than a phone (%v)", err)
	}
	// Taps work at that width: a tree item opens its node.
	if err := open("10"); err != nil {
		t.Fatalf("tapping a node on a phone: %v", err)
	}
	oauthtest.RequireAxeClean(t, ctx, "loom page at 390 px")
	screenshot(t, ctx, "loom-390")
	if png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot()); err == nil {
		_ = os.WriteFile(filepath.Join(artifacts(t), "loom-390-screen.png"), png, 0o644)
	}

	// Weight with a 300-node tree: the model writes the rest in long
	// lines and branches.
	var cmds []string
	for i := 0; nodeCountAfter(len(cmds)) < 300; i++ {
		if i%25 == 0 {
			cmds = append(cmds, fmt.Sprintf(`→ branch from %d tree:1 "Bulk branch %d."`, 1+i%9, i))
		} else {
			cmds = append(cmds, fmt.Sprintf(`→ add "Bulk line %d: the lane went on past the house and into the field where nothing grew."`, i))
		}
	}
	for len(cmds) > 0 {
		n := min(50, len(cmds))
		model(strings.Join(cmds[:n], "\n"))
		cmds = cmds[n:]
	}
	steps := loomAs(roomToken, "→ tree summary tree:1")["steps"].([]any)
	summary := steps[0].(map[string]any)["text"].(string)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1366, 900), chromedp.Navigate(public+"/web/rooms/weave/loom?tree=1&node=1"), chromedp.WaitVisible(chromedp.CSS("#live.on"))); err != nil {
		t.Fatal(err)
	}
	html, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	weight := 0
	for _, p := range []string{"/web/style.css", "/web/loom.css", "/web/loom.js"} {
		res, err := http.Get(public + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		weight += len(b)
	}
	drawn := evalInt(`document.querySelectorAll('[role=treeitem]').length`)
	t.Logf("loom page weight with %s: %d bytes (HTML %d with %d tree items drawn, CSS and script %d)", summary, len(html)+weight, len(html), drawn, weight)
	screenshot(t, ctx, "loom-300")
}

// nodeCountAfter is how many nodes the tree has once the bulk commands
// so far ran: 46 + (30 live) … counted by the commands themselves.
func nodeCountAfter(cmds int) int { return 63 + cmds }

// loomBrowser is browserSignedUp with the time the loom test needs.
func loomBrowser(t *testing.T) (context.Context, string) {
	t.Helper()
	public := startOnFreePort(t, pgtest.URL(t))
	ctx := oauthtest.Chromium(t, 8*time.Minute)
	aliceSignsUp(t, ctx, public)
	return ctx, public
}
