package rest_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/rest"
)

// Gated reads take one pooled connection at a time: on a pool of two, many
// readers of gated entries (GET /state), gated agents (GET /agents) and a
// gated key's history, with writers flipping the gates, all finish (a
// read holding a connection while asking for another would hang here) and
// each answer is consistent with one side of the gate.
func TestGatedReadsOnATinyPool(t *testing.T) {
	e := newEnvWith(t, rest.Options{}, substrate.Limits{}) // pgtest.New: a pool of pgtest.MaxConns (2)
	rm := e.room("tiny", nil)
	a := e.join(rm, "a")
	e.do("POST", "/rooms/tiny/agents", rm.token, map[string]any{"id": "ghost", "name": "G", "enabled": "state._shared.on == true"}).must(t, 201)
	e.do("PUT", "/rooms/tiny/state/batch", rm.token, map[string]any{"writes": []any{
		map[string]any{"scope": "_shared", "key": "on", "value": false},
		map[string]any{"scope": "_shared", "key": "secret", "value": 1, "enabled": "state._shared.on == true"},
	}}).must(t, 200)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 5 {
				switch (i + j) % 4 {
				case 0:
					e.do("PUT", "/rooms/tiny/state", rm.token, map[string]any{"scope": "_shared", "key": "on", "value": j%2 == 0})
				case 1:
					if r := e.do("GET", "/rooms/tiny/state?scope=_shared", a, nil); r.status != 200 {
						t.Errorf("state read: %d %s", r.status, r.raw)
					}
				case 2:
					if r := e.do("GET", "/rooms/tiny/agents", a, nil); r.status != 200 {
						t.Errorf("agents: %d %s", r.status, r.raw)
					}
				default:
					if r := e.do("GET", "/rooms/tiny/history?scope=_shared&key=secret", a, nil); r.status != 200 && r.status != 404 {
						t.Errorf("history: %d %s", r.status, r.raw)
					}
				}
			}
		}()
	}
	wg.Wait()
	// At rest, the gate decides both reads the same way.
	on := fmt.Sprint(e.do("GET", "/rooms/tiny/state?scope=_shared&key=on", rm.token, nil).must(t, 200).body["value"])
	r := e.do("GET", "/rooms/tiny/state?scope=_shared&key=secret", a, nil)
	if (on == "true") != (r.status == 200) {
		t.Fatalf("on=%s, secret read %d", on, r.status)
	}
}
