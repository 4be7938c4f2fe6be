package rest_test

import (
	"fmt"
	"slices"
	"testing"

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
