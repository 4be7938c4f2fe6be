package waitbatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// Many waits on one room over a pool of two connections, woken by one
// write: their round trips are shared (package waitbatch), and still each waiter
// wakes (none answered by a read made before its wake-up, with the safety
// net's re-check an hour away), with its own delta: from the seq its wait
// began at, with the write's entries, its own scope's among them.
func TestManyWaitsTinyPoolEachItsOwnDelta(t *testing.T) {
	const n = 99 // one write of n + 1 entries: the batch limit is 100
	svc := substrate.New(pgtest.NewPool(t, 2), substrate.Options{Wait: substrate.WaitOptions{Recheck: time.Hour}})
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "manywaits"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	ps := make([]*substrate.Principal, n)
	for i := range n {
		ag, err := svc.Join(ctx, admin, "manywaits", substrate.JoinRequest{ID: fmt.Sprintf("a%d", i), Name: fmt.Sprintf("a%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if ps[i], err = svc.Authenticate(ctx, ag.Token); err != nil {
			t.Fatal(err)
		}
	}
	start, err := svc.WriteState(ctx, admin, "manywaits", []substrate.Write{{Scope: "_shared", Key: "phase", Value: json.RawMessage(`"wait"`)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	type out struct {
		res *substrate.WaitResult
		err error
	}
	heard := svc.Stats().Notifications
	outs := make([]out, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := svc.Wait(ctx, ps[i], "manywaits", `has(state._shared.go)`, 10*time.Second, substrate.ContextRequest{Delta: true})
			outs[i] = out{r, err}
		}()
	}
	pgtest.Eventually(t, 20*time.Second, func() bool { return svc.Stats().OpenWaits >= n }, "%d waits open (%v are)", n, func() any { return svc.Stats().OpenWaits })
	// Every agent shown waiting: each wait's start seq was read by the
	// statement that showed it (a sleep here was not enough under load:
	// "delta from 102, want 101").
	waiting := 0
	pgtest.Eventually(t, 20*time.Second, func() bool {
		list, err := svc.ListAgents(ctx, admin, "manywaits")
		if err != nil {
			t.Fatal(err)
		}
		waiting = 0
		for _, a := range list {
			if a.Status == "waiting" {
				waiting++
			}
		}
		return waiting == n
	}, "%d agents shown waiting (%v are)", n, func() any { return waiting })
	// Their statuses were set in shared statements, each with one
	// notification: one per wait was a round trip per wait for its status
	// and another for its notification.
	for last := int64(-1); ; time.Sleep(300 * time.Millisecond) {
		now := svc.Stats().Notifications
		if now == last {
			break
		}
		last = now
	}
	if shown := svc.Stats().Notifications - heard; shown > n/3 {
		t.Fatalf("%d waits starting together made %d notifications: their statuses were not set together", n, shown)
	}
	writes := []substrate.Write{{Scope: "_shared", Key: "go", Value: json.RawMessage(`true`)}}
	for i := range n {
		writes = append(writes, substrate.Write{Scope: fmt.Sprintf("a%d", i), Key: "mine", Value: json.RawMessage(fmt.Sprint(i))})
	}
	w, err := svc.WriteState(ctx, admin, "manywaits", writes, false)
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, o := range outs {
		if o.err != nil {
			t.Fatalf("a%d: %v", i, o.err)
		}
		r := o.res
		if !r.Triggered || r.Seq != w.Seq || r.Context == nil || r.Context.Context.Delta == nil {
			t.Fatalf("a%d: triggered %v at seq %d (the write's %d), context %v", i, r.Triggered, r.Seq, w.Seq, r.Context != nil)
		}
		d := r.Context.Context.Delta
		if d.FromSeq != start.Seq || d.Changed["_shared.go"] != w.Seq || d.Changed["self.mine"] != w.Seq || r.Context.Self != fmt.Sprintf("a%d", i) {
			t.Fatalf("a%d: delta from %d (want %d), changed %v", i, d.FromSeq, start.Seq, d.Changed)
		}
	}
	// And their status is back to active, in the shared exit statement.
	list, err := svc.ListAgents(ctx, admin, "manywaits")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list {
		if a.Status != "active" {
			t.Fatalf("%s is %q after its wait ended", a.ID, a.Status)
		}
	}
}
