package rest_test

import (
	"fmt"
	"net/url"
	"sync"
	"testing"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/rest"
)

// Waits answering with deltas, and view listings computing the room's
// health, take one pooled connection at a time: on a pool of two, a dozen
// agents waiting at once all wake on one write, each with a delta naming
// the entry that changed (and its seq), while others list the views.
func TestDeltaWaitsOnATinyPool(t *testing.T) {
	e := newEnvWith(t, rest.Options{}, substrate.Limits{}) // pgtest.New: a pool of pgtest.MaxConns (2)
	rm := e.room("tinywait", nil)
	e.do("PUT", "/rooms/tinywait/state", rm.token, map[string]any{"scope": "_shared", "key": "go", "value": false}).must(t, 200)
	var agents []string
	for i := range 12 {
		agents = append(agents, e.join(rm, fmt.Sprintf("w%d", i)))
	}
	cond := url.QueryEscape(`state._shared.go == true`)
	var wg sync.WaitGroup
	results := make([]resp, len(agents))
	for i, tok := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.do("GET", "/rooms/tinywait/wait?timeout=20000&condition="+cond, tok, nil)
		}()
	}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				if r := e.do("GET", "/rooms/tinywait/views", rm.token, nil); r.status != 200 {
					t.Errorf("views: %d %s", r.status, r.raw)
				}
			}
		}()
	}
	e.openWaits(int64(len(agents)))
	w := e.do("PUT", "/rooms/tinywait/state", rm.token, map[string]any{"scope": "_shared", "key": "go", "value": true}).must(t, 200)
	wg.Wait()
	for i, r := range results {
		if r.status != 200 || r.body["triggered"] != true {
			t.Fatalf("waiter %d: %d %s", i, r.status, r.raw)
		}
		got := path(r.body, "context", "_context", "delta", "changed", "_shared.go")
		if got != w.body["seq"] && got != path(w.body, "entry", "revision") {
			t.Errorf("waiter %d's delta: %v (write %s)", i, path(r.body, "context", "_context", "delta"), w.raw)
		}
		if got == nil {
			t.Errorf("waiter %d: no change listed", i)
		}
		if r.body["seq"] == float64(0) {
			t.Errorf("waiter %d: seq 0", i)
		}
	}
}
