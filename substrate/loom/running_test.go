package loom_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// A generation in flight is visible to everyone, not only to whoever
// pressed continue: the loom page's Snapshot lists it and another model's
// memory block names it; when the nodes land (or the call fails) it is
// gone.
func TestLoomRunningGenerationVisibleToAll(t *testing.T) {
	release := make(chan struct{}, 1)
	arrived := make(chan struct{}, 4)
	var fail atomic.Bool
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-stop:
			return
		}
		if fail.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"text":" and then"}]}`))
	}))
	t.Cleanup(srv.Close)
	// A failed check must not leave the stub's handler waiting forever.
	t.Cleanup(func() { close(stop) })
	e := newLoom(t, substrate.Options{}, "alice", "bob")
	l := loom.Attach(e.svc, loom.Options{GeneratorURL: srv.URL, GeneratorModel: "tiny"})
	e.run(e.admin, `→ new tree "t" "Once"
→ permit alice loom_generate
→ permit bob loom_write`)
	ctx := context.Background()
	snap := func() *loom.View {
		t.Helper()
		v, err := l.Snapshot(ctx, substrate.ReadOnlyOf(e.view), e.room, loom.SnapshotQuery{Tree: 1, Node: 1})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for round, failing := range []bool{false, true} {
		fail.Store(failing)
		done := make(chan error, 1)
		go func() {
			_, err := l.Run(ctx, e.ag["alice"], e.room, "→ continue from 1 tree:1")
			done <- err
		}()
		<-arrived
		v := snap()
		if len(v.Generating) != 1 || v.Generating[0].Node != 1 || v.Generating[0].By != "alice" || v.Generating[0].N != 1 {
			t.Fatalf("round %d: generations in flight seen by another reader: %+v", round, v.Generating)
		}
		out := e.model(e.ag["bob"], "→ tree")
		has(t, out, "generating: 1 continuation(s) of node 1 (tree 1), alice asked")
		release <- struct{}{}
		err := <-done
		if failing != (err != nil) {
			t.Fatalf("round %d: continue: %v", round, err)
		}
		if v := snap(); len(v.Generating) != 0 {
			t.Fatalf("round %d: still generating after the call ended: %+v", round, v.Generating)
		}
		if out := e.model(e.ag["bob"], "→ tree"); strings.Contains(out, "generating:") {
			t.Fatalf("round %d: memory still says generating:\n%s", round, out)
		}
	}
}
