package rest_test

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/substrate/rest"
)

// A view reads `state.self` as its registrar's scope (views evaluate with
// their registrar's authority). A delta, and since_your_last_read, list
// the view when its registrar's scope changes: they took `self` for the
// reader's scope (the delta) or skipped it (views_changed), so a view
// projecting its registrar's private state never showed as changed.
func TestDeltaListsViewOfRegistrarsSelf(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("dv", nil)
	a := e.join(rm, "a")
	b := e.join(rm, "b")
	e.do("PUT", "/rooms/dv/views", a, map[string]any{"id": "a_score", "expr": "state.self.?score.orValue(0)"}).must(t, 201)
	e.do("PUT", "/rooms/dv/views", a, map[string]any{"id": "a_score_path", "expr": `state.self["score"]`}).must(t, 201)
	e.ctx(rm, b, "")
	since := int64(e.ctx(rm, b, "").body["_context"].(map[string]any)["seq"].(float64))
	e.do("PUT", "/rooms/dv/state", a, map[string]any{"scope": "a", "key": "score", "value": 7}).must(t, 200)

	d := e.ctx(rm, b, fmt.Sprintf("since=%d", since))
	views, _ := d.body["views"].(map[string]any)
	if views["a_score"] != float64(7) || views["a_score_path"] != float64(7) {
		t.Fatalf("the delta leaves out views whose registrar's scope changed: %s", d.raw)
	}
	w := e.do("GET", fmt.Sprintf("/rooms/dv/wait?condition=true&since=%d", since), b, nil).must(t, 200)
	if v, _ := path(w.body, "context", "views").(map[string]any); v["a_score"] != float64(7) {
		t.Fatalf("the wake-up leaves out the view: %s", w.raw)
	}
	// b's own writes do not make a's views news.
	e.ctx(rm, b, "")
	since = int64(e.ctx(rm, b, "").body["_context"].(map[string]any)["seq"].(float64))
	e.do("PUT", "/rooms/dv/state", b, map[string]any{"scope": "b", "key": "score", "value": 1}).must(t, 200)
	if v, _ := e.ctx(rm, b, fmt.Sprintf("since=%d", since)).body["views"].(map[string]any); v["a_score"] != nil {
		t.Fatalf("a view of a's scope listed for b's write: %v", v)
	}
	// since_your_last_read says the same.
	e.do("PUT", "/rooms/dv/state", a, map[string]any{"scope": "a", "key": "score", "value": 8}).must(t, 200)
	s, _ := attention(e.ctx(rm, b, ""))["since_your_last_read"].(map[string]any)
	if !slices.Contains(strs(s["views_changed"]), "a_score") || !slices.Contains(strs(s["views_changed"]), "a_score_path") {
		t.Fatalf("views_changed misses the view of its registrar's scope: %v", s)
	}
}

// A wake-up that shows a directed message marks it read: waiting on
// messages.directed_unread > 0 (the sync_wait description's own example)
// woke once per message, not in a loop. With more unread messages than
// the delta shows, it marked nothing read (older ones "stay unread"), so
// directed_unread stayed 1 and every later wait woke at once with the same
// delta. Now the messages a delta read count as read up to the oldest
// message addressed to the reader that it left out (the older chatter is
// counted in older_messages, with the read that returns it).
func TestDeltaWakeUpMarksShownMessagesRead(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("dm", nil)
	a := e.join(rm, "a")
	c := e.join(rm, "c")
	e.ctx(rm, a, "")
	e.ctx(rm, a, "")
	for i := range 12 {
		e.invoke(rm, c, "_send_message", map[string]any{"body": fmt.Sprintf("chatter %d", i)}).must(t, 200)
	}
	e.invoke(rm, c, "_send_message", map[string]any{"body": "a, take task 7", "to": "a"}).must(t, 200)
	w := e.do("GET", "/rooms/dm/wait?condition=messages.directed_unread+%3E+0&messages_limit=5", a, nil).must(t, 200)
	if w.body["triggered"] != true || !strings.Contains(w.raw, "take task 7") || path(w.body, "context", "_context", "delta", "older_messages") == nil {
		t.Fatalf("wake-up: %s", w.raw)
	}
	again := e.do("GET", "/rooms/dm/wait?condition=messages.directed_unread+%3E+0&messages_limit=5&timeout=300", a, nil).must(t, 200)
	if again.body["timeout"] != true {
		t.Fatalf("the directed message shown by the last wake-up is still unread: the wait woke again: %s", again.raw)
	}
	// More directed messages than a delta shows: they are shown oldest
	// first, those left out stay unread, and the next wake-up shows them.
	for i := range 4 {
		e.invoke(rm, c, "_send_message", map[string]any{"body": fmt.Sprintf("for a, number %d", i), "to": "a"}).must(t, 200)
	}
	w = e.do("GET", "/rooms/dm/wait?condition=messages.directed_unread+%3E+0&messages_limit=2", a, nil).must(t, 200)
	if !strings.Contains(w.raw, "number 0") || !strings.Contains(w.raw, "number 1") || strings.Contains(w.raw, "number 2") {
		t.Fatalf("first wake-up shows the oldest two: %s", w.raw)
	}
	w = e.do("GET", "/rooms/dm/wait?condition=messages.directed_unread+%3E+0&messages_limit=2&timeout=300", a, nil).must(t, 200)
	if w.body["triggered"] != true || !strings.Contains(w.raw, "number 2") || !strings.Contains(w.raw, "number 3") || strings.Contains(w.raw, "number 0") {
		t.Fatalf("the directed messages the first left out are not shown next: %s", w.raw)
	}
	if w = e.do("GET", "/rooms/dm/wait?condition=messages.directed_unread+%3E+0&timeout=300", a, nil).must(t, 200); w.body["timeout"] != true {
		t.Fatalf("every directed message was shown, yet the wait woke: %s", w.raw)
	}
}

// only=views.<id> is the read a budget cut advises for one large view: it
// returns that view, not the _vocabulary_health view besides (added to
// every read that has views).
func TestOnlyOneViewReturnsThatView(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("ov", nil)
	a := e.join(rm, "a")
	e.do("PUT", "/rooms/ov/views", rm.token, map[string]any{"id": "x", "scope": "_shared", "expr": "1"}).must(t, 201)
	views, _ := e.ctx(rm, a, "only=views.x").body["views"].(map[string]any)
	if len(views) != 1 || views["x"] != float64(1) {
		t.Fatalf("only=views.x returned %v", views)
	}
	if v, _ := e.ctx(rm, a, "only=views._vocabulary_health").body["views"].(map[string]any); v["_vocabulary_health"] == nil || len(v) != 1 {
		t.Fatalf("only=views._vocabulary_health returned %v", v)
	}
	if v, _ := e.ctx(rm, a, "only=views").body["views"].(map[string]any); v["_vocabulary_health"] == nil || v["x"] == nil {
		t.Fatalf("only=views returned %v", v)
	}
}

// An entry that becomes visible without being written (its enabled gate
// opens, or an enable timer runs out) is news to a reader: a delta left it
// out (its revision is older than the reader's last read), so a waiter on
// the reveal saw the phase change but not what it revealed.
func TestDeltaShowsEntriesThatBecameVisible(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("dr", nil)
	a := e.join(rm, "a")
	e.do("PUT", "/rooms/dr/state/batch", rm.token, map[string]any{"writes": []any{
		map[string]any{"scope": "_shared", "key": "phase", "value": "setup"},
		map[string]any{"scope": "_shared", "key": "answer", "value": 42, "enabled": `state._shared.phase == "reveal"`},
		map[string]any{"scope": "_shared", "key": "later", "value": "soon", "timer": map[string]any{"ms": 300, "effect": "enable"}},
	}}).must(t, 200)
	e.ctx(rm, a, "")
	since := int64(e.ctx(rm, a, "").body["_context"].(map[string]any)["seq"].(float64))
	time.Sleep(400 * time.Millisecond) // Stays: the 300 ms timer ends on the real clock before the next read
	e.do("PUT", "/rooms/dr/state", rm.token, map[string]any{"scope": "_shared", "key": "phase", "value": "reveal"}).must(t, 200)
	w := e.do("GET", fmt.Sprintf("/rooms/dr/wait?condition=%s&since=%d", url.QueryEscape(`state._shared.phase == "reveal"`), since), a, nil).must(t, 200)
	st, _ := path(w.body, "context", "state", "_shared").(map[string]any)
	if st["answer"] != float64(42) || st["later"] != "soon" || st["phase"] != "reveal" {
		t.Fatalf("the delta leaves out entries that became visible: %s", w.raw)
	}
}

// An action or view whose enabled gate opens is news too: the delta listed
// only actions (re)defined since and views whose expression read a
// change, so a model waiting for the game to start did not learn from
// the wake-up that it may now play.
func TestDeltaShowsActionsAndViewsThatBecameEnabled(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("de", nil)
	a := e.join(rm, "a")
	e.do("PUT", "/rooms/de/state", rm.token, map[string]any{"scope": "_shared", "key": "phase", "value": "setup"}).must(t, 200)
	e.do("PUT", "/rooms/de/actions", rm.token, map[string]any{"id": "play", "enabled": `state._shared.phase == "play"`,
		"writes": []any{map[string]any{"key": "moves", "increment": 1}}}).must(t, 201)
	e.do("PUT", "/rooms/de/views", rm.token, map[string]any{"id": "board", "scope": "_shared", "expr": `"empty board"`, "enabled": `state._shared.phase == "play"`}).must(t, 201)
	e.ctx(rm, a, "")
	since := int64(e.ctx(rm, a, "").body["_context"].(map[string]any)["seq"].(float64))
	e.do("PUT", "/rooms/de/state", rm.token, map[string]any{"scope": "_shared", "key": "phase", "value": "play"}).must(t, 200)
	w := e.do("GET", fmt.Sprintf("/rooms/de/wait?condition=%s&since=%d", url.QueryEscape(`state._shared.phase == "play"`), since), a, nil).must(t, 200)
	if path(w.body, "context", "actions", "play") == nil || path(w.body, "context", "views", "board") != "empty board" {
		t.Fatalf("the delta does not show the action and view that became enabled: %s", w.raw)
	}
}

// After a glimpse of the newest few messages (an arrival shows three),
// the read advised for more is the newest hundred, not the room's oldest
// five hundred.
func TestGlimpseOfMessagesAdvisesTheNewest(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("gl", nil)
	a := e.join(rm, "a")
	for i := range 6 {
		e.invoke(rm, a, "_send_message", map[string]any{"body": fmt.Sprintf("m%d", i)}).must(t, 200)
	}
	if got, _ := path(e.ctx(rm, a, "messages_limit=3").body, "messages", "_elided", "_expand").(string); got != "GET /rooms/gl/context?only=messages" {
		t.Fatalf("after three messages the advice is %q", got)
	}
	if got, _ := path(e.ctx(rm, a, "messages_limit=100&messages=true").body, "messages", "_elided", "_expand").(string); got != "" {
		t.Fatalf("nothing left out, yet advised %q", got)
	}
}

// A wake-up lists the views that may have changed since: it listed only
// views reading (by path) a scope with an entry written since, so a view
// changed by a deletion or an expired entry, or reading now, agents,
// messages or state by a computed name, was left out, and a model was told
// nothing it watches changed when it had. Likewise an action whose gate
// reads messages.
func TestDeltaListsViewsChangedWithoutAWrite(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("dw", nil)
	a := e.join(rm, "a")
	e.join(rm, "b")
	e.do("PUT", "/rooms/dw/state/batch", rm.token, map[string]any{"writes": []any{
		map[string]any{"scope": "b", "key": "x", "value": 1},
		map[string]any{"scope": "b", "key": "t", "value": 1, "timer": map[string]any{"ms": 300}},
	}}).must(t, 200)
	views := map[string]string{
		"has_x":   `has(state.b.x)`,
		"has_t":   `has(state.b.t)`,
		"clock":   `string(now)`,
		"present": `size(agents)`,
		"dyn":     `state["_shared"].?y.orValue(0)`,
		"talk":    `messages.count`,
	}
	for id, src := range views {
		e.do("PUT", "/rooms/dw/views", rm.token, map[string]any{"id": id, "scope": "_shared", "expr": src}).must(t, 201)
	}
	e.do("PUT", "/rooms/dw/actions", rm.token, map[string]any{"id": "reply", "enabled": `messages.count > 0`,
		"writes": []any{map[string]any{"key": "replies", "increment": 1}}}).must(t, 201)
	e.do("PUT", "/rooms/dw/actions", rm.token, map[string]any{"id": "later", "timer": map[string]any{"ms": 300, "effect": "enable"},
		"writes": []any{map[string]any{"key": "late", "value": 1}}}).must(t, 201)
	e.ctx(rm, a, "")
	since := int64(e.ctx(rm, a, "").body["_context"].(map[string]any)["seq"].(float64))
	time.Sleep(400 * time.Millisecond) // Stays: the 300 ms timer ends on the real clock before the next read
	e.do("DELETE", "/rooms/dw/state?scope=b&key=x", rm.token, nil).must(t, 200)
	e.join(rm, "d")
	c := e.join(rm, "c")
	e.invoke(rm, c, "_send_message", map[string]any{"body": "hello"}).must(t, 200)
	e.do("PUT", "/rooms/dw/state/batch", rm.token, map[string]any{"writes": []any{
		map[string]any{"scope": "_shared", "key": "y", "value": 5},
	}}).must(t, 200)
	w := e.do("GET", fmt.Sprintf("/rooms/dw/wait?condition=true&since=%d", since), a, nil).must(t, 200)
	got, _ := path(w.body, "context", "views").(map[string]any)
	for id := range views {
		if _, ok := got[id]; !ok {
			t.Errorf("the wake-up leaves out view %s: %s", id, w.raw)
		}
	}
	if path(w.body, "context", "actions", "reply") == nil {
		t.Errorf("the wake-up leaves out the action whose gate reads messages: %s", w.raw)
	}
	if path(w.body, "context", "actions", "later") == nil {
		t.Errorf("the wake-up leaves out the action whose enable timer ran out: %s", w.raw)
	}
	// What did not change stays out: a view of a scope nobody touched.
	e.do("PUT", "/rooms/dw/views", rm.token, map[string]any{"id": "quiet", "scope": "_shared", "expr": `state.?b.?z.orValue(0)`}).must(t, 201)
	e.ctx(rm, a, "")
	since = int64(e.ctx(rm, a, "").body["_context"].(map[string]any)["seq"].(float64))
	e.do("DELETE", "/rooms/dw/state?scope=_shared&key=y", rm.token, nil).must(t, 200)
	w = e.do("GET", fmt.Sprintf("/rooms/dw/wait?condition=true&since=%d", since), a, nil).must(t, 200)
	if got, _ := path(w.body, "context", "views").(map[string]any); got["quiet"] != nil || got["dyn"] != float64(0) {
		t.Errorf("after deleting y: %s", w.raw)
	}
}

// since_your_last_read.views_changed follows the wake-up's rule
// (TestDeltaListsViewsChangedWithoutAWrite): a view changed by a deletion
// or an expired entry in a scope it reads, or reading now, is listed.
func TestViewsChangedCountsDeletionsAndTime(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("vc", nil)
	a := e.join(rm, "a")
	e.join(rm, "b")
	e.do("PUT", "/rooms/vc/state/batch", rm.token, map[string]any{"writes": []any{
		map[string]any{"scope": "b", "key": "x", "value": 1},
		map[string]any{"scope": "b", "key": "t", "value": 1, "timer": map[string]any{"ms": 300}},
	}}).must(t, 200)
	for id, src := range map[string]string{"has_x": `has(state.b.x)`, "has_t": `has(state.b.t)`, "clock": `string(now)`} {
		e.do("PUT", "/rooms/vc/views", rm.token, map[string]any{"id": id, "scope": "_shared", "expr": src}).must(t, 201)
	}
	e.ctx(rm, a, "")
	e.ctx(rm, a, "")
	time.Sleep(400 * time.Millisecond) // Stays: the 300 ms timer ends on the real clock before the next read
	e.do("DELETE", "/rooms/vc/state?scope=b&key=x", rm.token, nil).must(t, 200)
	s, _ := attention(e.ctx(rm, a, ""))["since_your_last_read"].(map[string]any)
	for _, id := range []string{"has_x", "has_t", "clock"} {
		if !slices.Contains(strs(s["views_changed"]), id) {
			t.Errorf("views_changed misses %s: %v", id, s)
		}
	}
}

// A wait's delta, on a wake-up and on a timeout that asks for one
// (context=delta), starts at the agent's last read: a timeout's delta
// started at the wait's first read and left out what was written between
// the agent's last read and its wait.
func TestWaitDeltaStartsAtTheAgentsLastRead(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("wd", nil)
	reader := e.join(rm, "reader")
	w := e.join(rm, "w", "_shared")

	since := e.ctx(rm, reader, "").body["_context"].(map[string]any)["seq"].(float64)
	e.do("PUT", "/rooms/wd/state", w, map[string]any{"scope": "_shared", "key": "go", "value": 1}).must(t, 200)
	got := e.do("GET", "/rooms/wd/wait?timeout=5000&condition="+url.QueryEscape(`has(state._shared.go)`), reader, nil).must(t, 200)
	changed, _ := path(got.body, "context", "_context", "delta", "changed").(map[string]any)
	if changed["_shared.go"] == nil || path(got.body, "context", "_context", "delta", "from_seq") != since {
		t.Fatalf("the delta does not start at the agent's last read (seq %v): %s", since, got.raw)
	}

	e.ctx(rm, reader, "")
	e.do("PUT", "/rooms/wd/state", w, map[string]any{"scope": "_shared", "key": "go2", "value": 1}).must(t, 200)
	got = e.do("GET", "/rooms/wd/wait?timeout=100&context=delta&condition="+url.QueryEscape(`state._shared.go == 2`), reader, nil).must(t, 200)
	changed, _ = path(got.body, "context", "_context", "delta", "changed").(map[string]any)
	if got.body["timeout"] != true || changed["_shared.go2"] == nil {
		t.Fatalf("a timeout's delta misses a write made after the agent's last read: %s", got.raw)
	}
}
