package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/syncsubstrate/sync/oauth/oauthtest"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// layoutProblems is the page's layout checked in the browser: the page
// never scrolls sideways, and no table cell is so narrow that the first
// six characters of its longest word (all of a shorter one) break across
// lines, as they did when one CSS rule let every cell shrink to a letter.
// A phone widens its layout viewport to fit content wider than the
// device (innerWidth grows with it), so the width is the device's: %d.
const layoutProblems = `((width) => {
	const out = [];
	const de = document.documentElement;
	if (de.scrollWidth > width + 1 || window.innerWidth > width + 1) {
		let widest = null;
		document.querySelectorAll("body *").forEach(el => { const r = el.getBoundingClientRect(); if (r.right > width + 1 && r.width > 0 && (!widest || r.right > widest.r)) widest = {r: r.right, el}; });
		out.push("the page scrolls sideways: " + de.scrollWidth + " px for a " + width + " px screen" + (widest ? " (widest: " + widest.el.tagName + (widest.el.id ? "#" + widest.el.id : "") + "." + widest.el.className + " in #" + (widest.el.closest("[id]") || {}).id + ")" : ""));
	}
	document.querySelectorAll("td, th").forEach(cell => {
		const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
		let n, longest = null;
		while ((n = walker.nextNode())) {
			const re = /\S+/g;
			let m;
			while ((m = re.exec(n.data))) if (!longest || m[0].length > longest.len) longest = {node: n, at: m.index, len: m[0].length, word: m[0]};
		}
		if (!longest) return;
		const r = document.createRange();
		r.setStart(longest.node, longest.at);
		r.setEnd(longest.node, longest.at + Math.min(6, longest.len));
		const tops = new Set(Array.from(r.getClientRects()).filter(x => x.width > 0).map(x => Math.round(x.top)));
		if (tops.size > 1) {
			const at = cell.closest("[id]");
			out.push("a cell breaks " + JSON.stringify(longest.word.slice(0, 24)) + " (" + cell.getBoundingClientRect().width.toFixed(0) + " px wide, in #" + (at ? at.id : "?") + ")");
		}
	});
	return out.slice(0, 20);
})(%d)`

// realRoom fills a room the size a team has: 5 agents present, 60 tasks,
// 10 views with render hints (metrics, a board, a table, an action form
// whose choices come from a view, markdown, a watch, a feed), timers,
// messages (one direct), long values, and two loom trees with an
// agent's trace.
func realRoom(t *testing.T, public, id string) (roomToken string) {
	t.Helper()
	room := restCall(t, "POST", public+"/rooms", "", map[string]any{"id": id, "meta": map[string]any{"label": "Spring release"}})
	roomToken = room["token"].(string)
	agents := []struct{ id, name, role string }{
		{"planner", "Ada Planner", "lead"}, {"builder", "Bo Builder", "dev"}, {"tester", "Cy Tester", "qa"},
		{"writer", "Di Writer", "docs"}, {"reviewer", "Ed Reviewer", "review"},
	}
	tokens := map[string]string{}
	for _, a := range agents {
		tokens[a.id] = restCall(t, "POST", public+"/rooms/"+id+"/agents", roomToken, map[string]any{"id": a.id, "name": a.name, "role": a.role})["token"].(string)
		restCall(t, "POST", public+"/rooms/"+id+"/agents/"+a.id+"/heartbeat", tokens[a.id], map[string]any{"status": "active"})
	}
	titles := []string{"Write the onboarding guide", "Fix flaky integration tests", "Review accessibility report", "Upgrade PostgreSQL driver",
		"Translate release notes", "Measure page latency", "Refactor configuration loading", "Document the HTTP API"}
	statuses := []string{"todo", "doing", "review", "done"}
	var tasks []any
	for i := range 60 {
		tasks = append(tasks, map[string]any{"id": fmt.Sprintf("task:%03d", i+1), "title": fmt.Sprintf("%s (part %d)", titles[i%len(titles)], i/len(titles)+1),
			"status": statuses[i%len(statuses)], "owner": agents[i%len(agents)].id, "points": i%5 + 1})
	}
	restCall(t, "PUT", public+"/rooms/"+id+"/state", roomToken, map[string]any{"scope": "_shared", "key": "tasks", "value": tasks})
	restCall(t, "PUT", public+"/rooms/"+id+"/state", roomToken, map[string]any{"scope": "_shared", "key": "phase", "value": "stabilising"})
	restCall(t, "PUT", public+"/rooms/"+id+"/state", roomToken, map[string]any{"scope": "_shared", "key": "standup", "value": "Stand-up in the big room", "timer": map[string]any{"ms": 600_000}})
	restCall(t, "PUT", public+"/rooms/"+id+"/state", roomToken, map[string]any{"scope": "_shared", "key": "rule", "value": map[string]any{"when": "points > 3 && owner != none", "then": "needs <review>"}})
	restCall(t, "PUT", public+"/rooms/"+id+"/state", roomToken, map[string]any{"scope": "_shared", "key": "release_configuration_with_a_long_name", "value": map[string]any{
		"channels": []string{"stable", "beta", "nightly"}, "regions": []string{"eu-west-1", "us-east-1", "ap-southeast-2"}, "notes": strings.Repeat("Every region ships after the canary has been healthy for an hour. ", 6)}})
	for _, a := range agents {
		restCall(t, "PUT", public+"/rooms/"+id+"/state", tokens[a.id], map[string]any{"scope": a.id, "key": "progress", "value": "working on " + a.role})
	}
	restCall(t, "PUT", public+"/rooms/"+id+"/actions", roomToken, map[string]any{"id": "claim", "description": "Claim a task to work on",
		"params": map[string]any{"task": map[string]any{"type": "string", "required": true}},
		"writes": []any{map[string]any{"key": "claim:${params.task}", "value": "${self}"}}})
	restCall(t, "PUT", public+"/rooms/"+id+"/actions", roomToken, map[string]any{"id": "ship", "description": "Ship the release",
		"if": `state._shared.phase == "ready"`, "writes": []any{map[string]any{"key": "shipped", "value": true}}})
	views := []map[string]any{
		{"id": "open_count", "expr": `size(state._shared.tasks.filter(t, t.status != "done"))`, "render": map[string]any{"type": "metric", "label": "Open tasks", "unit": "tasks", "order": 1, "group": "progress"}},
		{"id": "done_count", "expr": `size(state._shared.tasks.filter(t, t.status == "done"))`, "render": map[string]any{"type": "metric", "label": "Done", "unit": "tasks", "order": 2, "group": "progress"}},
		{"id": "team_size", "expr": `size(agents)`, "render": map[string]any{"type": "metric", "label": "Agents", "order": 3, "group": "progress"}},
		{"id": "phase_watch", "expr": `true`, "render": map[string]any{"type": "watch", "label": "Phase", "keys": []string{"_shared.phase", "_shared.standup"}, "order": 4, "group": "progress"}},
		{"id": "claim_form", "expr": `true`, "render": map[string]any{"type": "action-form", "label": "Claim a task", "action": "claim", "options": map[string]any{"task": "todo_tasks"}, "order": 5, "group": "progress"}},
		{"id": "todo_tasks", "expr": `state._shared.tasks.filter(t, t.status == "todo").map(t, {"id": t.id, "title": t.title})`},
		{"id": "task_board", "expr": `state._shared.tasks`, "render": map[string]any{"type": "board", "label": "Task board", "group_by": "status", "lanes": []string{"todo", "doing", "review", "done"}, "title": "title", "fields": []string{"id", "owner"}, "order": 10, "group": "task_flow"}},
		{"id": "task_table", "expr": `state._shared.tasks`, "render": map[string]any{"type": "table", "label": "All tasks", "max_rows": 100, "order": 11, "group": "task_flow",
			"columns": []any{map[string]any{"key": "id", "label": "Task"}, map[string]any{"key": "title", "label": "Title"}, map[string]any{"key": "status", "label": "Status"}, map[string]any{"key": "owner", "label": "Owner"}, map[string]any{"key": "points", "label": "Points"}}}},
		{"id": "plan", "expr": `"# The plan\n\nShip the **spring release** once every task is reviewed."`, "render": map[string]any{"type": "markdown", "order": 20, "group": "notes"}},
		{"id": "done_feed", "expr": `state._shared.tasks.filter(t, t.status == "done").map(t, t.title)`, "render": map[string]any{"type": "feed", "label": "Done lately", "max_rows": 10, "order": 21, "group": "notes"}},
	}
	for _, v := range views {
		restCall(t, "PUT", public+"/rooms/"+id+"/views", roomToken, v)
	}
	for i, a := range agents {
		body := map[string]any{"body": fmt.Sprintf("%s: %s is on track, next up %s.", a.name, titles[i], titles[(i+1)%len(titles)])}
		restCall(t, "POST", public+"/rooms/"+id+"/actions/_send_message/invoke", tokens[a.id], map[string]any{"params": body})
	}
	restCall(t, "POST", public+"/rooms/"+id+"/actions/_send_message/invoke", tokens["planner"], map[string]any{"params": map[string]any{"body": "Ed, can you take the accessibility report?", "to": "reviewer"}})
	restCall(t, "POST", public+"/rooms/"+id+"/loom", roomToken, map[string]any{"commands": "→ new tree \"release-story\" \"The release began on a Monday.\"\n→ new tree \"retro\" \"What went well this time.\""})
	// An agent's loom trace (its commands, kept in its own scope).
	code, _ := call(t, "POST", public+"/rooms/"+id+"/loom", tokens["writer"], `{"commands": "→ view 1"}`)
	t.Logf("the writer's loom command: %d", code)
	return roomToken
}

// A room of real size, on a laptop (1366 px) and a phone (390 px), in light
// and dark: words stay whole and nothing scrolls sideways; the header
// says who is present, what is unread and the last change; sections come
// in order with internals folded; the board is a board; an action form's
// choices come from a view, and acting from it works; axe-core finds no
// serious or critical violation on the lobby, room, account, sign-in and
// consent pages; the browser logs no error. Screenshots of each page at
// both widths are saved as artefacts.
func TestBrowserRoomPageAtRealSize(t *testing.T) {
	ctx, public, _ := browserSignedUp(t)
	var mu sync.Mutex
	var logged []string
	// The test's own last message: the browser's come in order, so what
	// the pages logged before it has arrived once it has.
	const mark = "sync-test: the pages are done"
	marked := make(chan struct{})
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Text == mark {
				close(marked)
				continue
			}
			if m.Type == "error" || m.IsException() {
				mu.Lock()
				logged = append(logged, m.Text+" ("+m.URL+")")
				mu.Unlock()
			}
		}
	}()

	// First run: the recovery codes can be copied, and the next step is
	// the lobby; sign-in and sign-up link to each other.
	_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('button[data-copy="codes-text"]').click(), true`))
	var copied string
	if err == nil {
		// The answer to the click, once the page gives one.
		copied, err = chromedp.Run(ctx, chromedp.Poll[string](`(function () { var said = document.querySelector('[data-copied="codes-text"]').textContent;
			return said && said + " " + document.querySelector('#codes a').getAttribute("href"); })()`, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(5*time.Second)))
	}
	if err != nil || (copied != "Copied. /" && copied != "Selected: copy with your keyboard. /") {
		t.Errorf("copying the recovery codes: %q (%v)", copied, err)
	}
	for page, link := range map[string]string{"/signin": "/signup", "/signup": "/signin"} {
		if err := chromedp.Do(ctx, chromedp.Navigate(public+page), chromedp.WaitVisible(chromedp.CSS(`a[href="`+link+`"]`))); err != nil {
			t.Errorf("%s does not link to %s: %v", page, link, err)
		}
	}

	roomToken := realRoom(t, public, "release")

	// Claimed from the lobby, which the claim returns to.
	claimInLobby(t, ctx, public, "release", roomToken)
	if loc, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.pathname`)); err != nil || loc != "/" {
		t.Errorf("after claiming from the lobby the browser is at %q, not the lobby (%v)", loc, err)
	}

	// A client asking for access, for the consent page.
	reg := restCall(t, "POST", public+"/register", "", map[string]any{"redirect_uris": []string{"http://127.0.0.1:9/cb"}, "client_name": "Release bot", "token_endpoint_auth_method": "none"})
	consentURL := public + "/authorize?" + url.Values{"response_type": {"code"}, "client_id": {reg["client_id"].(string)}, "redirect_uri": {"http://127.0.0.1:9/cb"},
		"state": {"state-12345678"}, "code_challenge": {"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"}, "code_challenge_method": {"S256"}, "resource": {public + "/mcp"}}.Encode()

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
		screenshot(t, ctx, name)
	}
	for _, width = range []int64{1366, 390} {
		w := fmt.Sprint(width)
		view := chromedp.EmulateViewport(width, 900)
		if width < 600 {
			view = chromedp.EmulateViewport(width, 844, chromedp.EmulateMobile)
		}
		if err := chromedp.Do(ctx, view, chromedp.Navigate(public+"/"), chromedp.WaitVisible(chromedp.CSS("#what-is-a-room"))); err != nil {
			t.Fatal(err)
		}
		check("lobby-" + w)

		if err := chromedp.Do(ctx, chromedp.Navigate(public+"/rooms/release"), chromedp.WaitVisible(chromedp.CSS("#live.on"))); err != nil {
			t.Fatalf("the room page at %s px: %v", w, err)
		}
		check("room-" + w)
		if size, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.scrollHeight + " px tall, " + document.documentElement.outerHTML.length + " characters"`)); err == nil {
			t.Logf("the room page at %s px: %s", w, size)
		}
		roomChecks(t, ctx, width)

		// Dark: the same contrast rules.
		if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}}); err != nil {
			t.Fatal(err)
		}
		check("room-dark-" + w)
		if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{}); err != nil {
			t.Fatal(err)
		}

		if err := chromedp.Do(ctx, chromedp.Navigate(public+"/account"), chromedp.WaitVisible(chromedp.CSS(`form[action="/signout"]`))); err != nil {
			t.Fatal(err)
		}
		check("account-" + w)
		if err := chromedp.Do(ctx, chromedp.Navigate(consentURL), chromedp.WaitVisible(chromedp.CSS("#allow"))); err != nil {
			t.Fatalf("the consent page: %v", err)
		}
		check("consent-" + w)
		if err := chromedp.Do(ctx, chromedp.Navigate(public+"/signin"), chromedp.WaitVisible(chromedp.CSS("#signin"))); err != nil {
			t.Fatal(err)
		}
		check("signin-" + w)
	}

	// Acting from the dashboard's form: the task is picked from the view's
	// choices, not typed.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1366, 900), chromedp.Navigate(public+"/rooms/release"), chromedp.WaitVisible(chromedp.CSS("#live.on")), unfolded(),
		chromedp.SetValue(chromedp.CSS("#s-claim_form-p-claim-task"), "task:005"),
		chromedp.Submit(chromedp.CSS("#s-claim_form-p-claim-task")),
	); err != nil {
		t.Fatalf("claiming from the form: %v", err)
	}
	var claimed map[string]any
	pgtest.Eventually(t, 10*time.Second, func() bool {
		_, claimed = call(t, "GET", public+"/rooms/release/state?scope=_shared&key="+url.QueryEscape("claim:task:005"), roomToken, "")
		return claimed["value"] != nil
	}, "_shared.claim:task:005 after claiming from the form")
	if claimed["value"] != "alice:web" {
		t.Errorf("after claiming task:005 from the form, _shared.claim:task:005 is %v", claimed)
	}

	// The favicon is served, and no page logged an error (a CSP source
	// Chromium rejects, a missing favicon, a script error).
	if res, err := http.Get(public + "/favicon.ico"); err != nil || res.StatusCode != 200 || res.Header.Get("Content-Type") != "image/x-icon" {
		t.Errorf("favicon: %v %v", res, err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`console.info(`+strconv.Quote(mark)+`), true`)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-marked:
	case <-time.After(10 * time.Second):
		t.Fatal("the browser's console did not pass on the test's own message")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, l := range logged {
		t.Errorf("the browser logged an error: %s", l)
	}
}

// roomChecks are the room page's structure at one width.
func roomChecks(t *testing.T, ctx context.Context, width int64) {
	t.Helper()
	text := func(sel string) string {
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return s
	}
	// The first Tab reaches the skip link.
	if err := chromedp.Do(ctx, chromedp.KeyEvent(kb.Tab)); err != nil {
		t.Fatal(err)
	}
	if focused, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.activeElement.className`)); err != nil || focused != "skip" {
		t.Errorf("the first Tab focuses %q, not the skip link (%v)", focused, err)
	}
	// The header's summary.
	present := text("#summary-present")
	for _, name := range []string{"Ada Planner", "Bo Builder", "Cy Tester", "Di Writer", "Ed Reviewer"} {
		if !strings.Contains(present, name) {
			t.Errorf("the summary's present agents lack %s: %q", name, present)
		}
	}
	if m := text("#summary-messages"); !strings.Contains(m, "6 in all") {
		t.Errorf("the summary's messages: %q", m)
	}
	// New since the person last had the room open: all six on the first
	// visit (at 1366 px), none when they come back (at 390 px).
	fresh, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(e => e.hidden ? "hidden" : e.textContent)(document.getElementById("summary-new"))`))
	if want := map[bool]string{true: " · 6 new since you last looked", false: "hidden"}[width > 1000]; err != nil || fresh != want {
		t.Errorf("new messages in the summary at %d px: %q, want %q (%v)", width, fresh, want, err)
	}
	if l := text("#summary-last"); !strings.Contains(l, " wrote ") || !strings.Contains(l, "ago") || strings.Contains(l, " by ") {
		t.Errorf("the summary's last change: %q", l)
	}
	// Sections in order: the dashboard first, then what changed, presence
	// and messages, the actions and the raw state; surface groups in
	// their declared order, titled for people; internals folded and sent
	// only when asked for; surfaced views not repeated.
	order, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`["summary", "sections", "surfaces", "activity", "messages", "agents", "actions", "state", "logs", "views", "console"]
		.filter(id => document.getElementById(id)).sort((a, b) => document.getElementById(a).compareDocumentPosition(document.getElementById(b)) & 2 ? 1 : -1)`))
	if want := []string{"summary", "sections", "surfaces", "activity", "messages", "agents", "actions", "state", "logs", "views", "console"}; err != nil || !slices.Equal(order, want) {
		t.Errorf("sections in the order %v, want %v (%v)", order, want, err)
	}
	groups, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#surfaces > details.group > summary > h2")).map(h => h.firstChild.textContent.trim())`))
	if want := []string{"Progress", "Task flow", "Notes"}; err != nil || !slices.Equal(groups, want) {
		t.Errorf("surface groups %v, want %v (%v)", groups, want, err)
	}
	folded, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { const d = document.getElementById("internals"); return d ? (d.open ? "open" : "folded") + ":" + d.querySelectorAll("details[id^=internal-]").length + ":" + !!d.querySelector('a[href*="internals=1"]') : "none"; })()`))
	if err != nil || folded != "folded:0:true" {
		t.Errorf("internals: %s (%v)", folded, err)
	}
	// The writer's loom memory (its trace, its marks) is folded away with
	// the internals (on the page that asks for them), its own progress is
	// not.
	memory, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(async () => {
		const m = document.createElement("main");
		m.innerHTML = await (await fetch(location.pathname + "?internals=1&part=main", { headers: { Accept: "text/html" }, credentials: "same-origin" })).text();
		return [!!m.querySelector('#internals #internal-writer [id^="entry-writer-loom:"]'),
			!!document.querySelector('#scope-writer [id^="entry-writer-loom:"]'),
			!!document.querySelector('#scope-writer #entry-writer-progress')].join(" "); })()`, chromedp.EvalAwaitPromise))
	if err != nil || memory != "true false true" {
		t.Errorf("the writer's loom memory folded away, shown with its state, its progress shown: %s (%v)", memory, err)
	}
	if err := chromedp.Do(ctx, unfolded()); err != nil {
		t.Fatal(err)
	}
	if views := text("#views"); strings.Contains(views, "task_board") || !strings.Contains(views, "todo_tasks") {
		t.Errorf("the views section repeats surfaced views or lacks the others: %q", views)
	}
	html, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("main").innerHTML`))
	if err != nil || strings.Contains(html, `\u003e`) || strings.Contains(html, `\u0026`) || !strings.Contains(html, "points &gt; 3 &amp;&amp; owner") {
		t.Errorf("the room page shows Go's JSON escapes, or not the value (%v)", err)
	}
	// The board: a lane per status, in the hint's order, side by side on
	// a laptop and one under another on a phone.
	lanes, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#surface-task_board .lane")).map(l => l.querySelector("h4").firstChild.textContent.trim() + ":" + l.querySelectorAll(".bcard").length + ":" + Math.round(l.getBoundingClientRect().top))`))
	if err != nil || len(lanes) != 4 {
		t.Fatalf("board lanes %v (%v)", lanes, err)
	}
	var tops []string
	for i, want := range []string{"todo:15", "doing:15", "review:15", "done:15"} {
		if !strings.HasPrefix(lanes[i], want+":") {
			t.Errorf("lane %d is %s, want %s", i, lanes[i], want)
		}
		tops = append(tops, lanes[i][strings.LastIndex(lanes[i], ":"):])
	}
	if side := tops[0] == tops[1]; side != (width > 1000) {
		t.Errorf("at %d px the board's lanes are side by side: %v (%v)", width, side, lanes)
	}
	// The form's choices come from the view todo_tasks.
	opts, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#s-claim_form-p-claim-task option")).map(o => o.value)`))
	if err != nil || len(opts) != 15 || opts[0] != "task:001" {
		t.Errorf("the claim form offers %v (%v)", opts, err)
	}
	// A sortable, filterable table.
	if width > 1000 {
		first, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
			document.querySelectorAll("#tbl-task_table th button.sort")[4].click();
			document.querySelectorAll("#tbl-task_table th button.sort")[4].click();
			return document.querySelector("#tbl-task_table tbody tr td:nth-child(5)").textContent; })()`))
		if err != nil || first != "5" {
			t.Errorf("sorted by points, descending, the first row has %q (%v)", first, err)
		}
		// The filter is the server's, over every row: Enter sends it.
		if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#tbl-task_table-filter"), "flaky"+kb.Enter)); err != nil {
			t.Fatal(err)
		}
		if err := untilTrue(ctx, `location.search.includes("tq.task_table=flaky") && document.readyState === "complete"`, 20*time.Second); err != nil {
			t.Fatalf("the filter's form did not load its page: %v", err)
		}
		shown, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#tbl-task_table tbody tr:not([hidden])").length`))
		if err != nil || shown != 8 {
			t.Errorf("filtered by \"flaky\", %d rows show (%v)", shown, err)
		}
	}
}
