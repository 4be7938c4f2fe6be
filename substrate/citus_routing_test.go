package substrate_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/loom"
	"github.com/syncsubstrate/sync/substrate/search"
)

// On Citus every statement of a request is routed to the one worker
// holding its room (issue 46): an invocation, a context read, a wait
// woken by a write, a search and a loom command, in rooms spread over
// every worker, each statement's plan checked (pgtest.CheckRouting) and
// no transaction reaching two workers. Without Citus it is skipped.
func TestCitusRoutingOfTheCore(t *testing.T) {
	rt := pgtest.NewRouting(t)
	ctx := context.Background()
	rooms := rt.RoomsOnEveryWorker(t, "routed", 2)
	for _, id := range rooms {
		// A service per room, as if each were served by its own process:
		// a service writes the read marks of every room it served lately
		// in one statement, across workers when its rooms are.
		svc := substrate.New(rt.DB(t), substrate.Options{Features: testFeatures, Wait: substrate.WaitOptions{Recheck: time.Minute}})
		t.Cleanup(svc.Close)
		room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		admin, err := svc.AuthenticateIn(ctx, id, room.Token)
		if err != nil {
			t.Fatal(err)
		}
		ag, err := svc.Join(ctx, admin, id, substrate.JoinRequest{ID: "ann", Name: "ann"})
		if err != nil {
			t.Fatal(err)
		}
		ann, err := svc.AuthenticateIn(ctx, id, ag.Token)
		if err != nil {
			t.Fatal(err)
		}

		if _, err := svc.Invoke(ctx, ann, id, "_send_message", json.RawMessage(`{"body":"the ferry leaves at noon"}`)); err != nil {
			t.Fatalf("%s: invoke: %v", id, err)
		}
		if _, err := svc.Context(ctx, ann, id, substrate.ContextRequest{}); err != nil {
			t.Fatalf("%s: context: %v", id, err)
		}

		// The wait is woken by a write made once it is seen waiting.
		var once sync.Once
		substrate.SetShownWaiting(svc, func(roomID, agentID string) {
			once.Do(func() {
				if _, err := svc.WriteState(ctx, admin, id, []substrate.Write{{Scope: "_shared", Key: "go", Value: json.RawMessage(`true`)}}, false); err != nil {
					t.Errorf("%s: write on seeing the waiter: %v", id, err)
				}
			})
		})
		w, err := svc.Wait(ctx, ann, id, `state._shared.?go.orValue(false)`, 10*time.Second, substrate.ContextRequest{Depth: "lean"})
		if err != nil || !w.Triggered {
			t.Fatalf("%s: wait: %+v, %v", id, w, err)
		}

		res, err := search.Room(ctx, svc, ann, id, search.Request{Query: "ferry noon"})
		if err != nil || len(res.Hits) != 1 {
			t.Fatalf("%s: search: %+v, %v", id, res, err)
		}

		if _, err := loom.Of(svc).Run(ctx, admin, id, `→ new tree "crossing" "The ferry left at noon."`); err != nil {
			t.Fatalf("%s: loom: %v", id, err)
		}
	}
	if rt.WorkerOf(t, rooms[0]) == rt.WorkerOf(t, rooms[1]) {
		t.Fatalf("rooms %v on one worker", rooms)
	}
	if n := rt.CheckRouting(t); n < 20 {
		t.Errorf("only %d distinct statements checked", n)
	}
}
