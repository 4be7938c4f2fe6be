package substrate_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// An agent is shown waiting before its wait's first read, so another
// agent that writes as soon as it sees the status may write before that
// read: the condition then holds at the first read. The wake-up's delta
// must hold that write. Its start was the first read's seq, the write's
// own, so an agent that never read the room woke with "changed": {} and
// without the entry its condition was about (TestWait in substrate/rest
// flaked on it under load). The hook runs the write exactly there. REST's
// GET /wait and MCP's sync_wait are this call with their arguments
// (this package's tests do not import a surface: rest would attach
// salience to every test of the package).
func TestWaitDeltaHoldsAWriteMadeOnSeeingTheWaiter(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Wait: substrate.WaitOptions{Recheck: time.Minute}})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "shown"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	ag, err := svc.Join(ctx, admin, "shown", substrate.JoinRequest{ID: "waiter", Name: "waiter"})
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := svc.Authenticate(ctx, ag.Token)
	if err != nil {
		t.Fatal(err)
	}

	var once sync.Once
	var wrote int64
	substrate.SetShownWaiting(svc, func(roomID, agentID string) {
		once.Do(func() {
			w, err := svc.WriteState(ctx, admin, "shown", []substrate.Write{{Scope: "_shared", Key: "go", Value: json.RawMessage(`true`)}}, false)
			if err != nil {
				t.Errorf("write on seeing the waiter: %v", err)
				return
			}
			wrote = w.Seq
		})
	})
	res, err := svc.Wait(ctx, waiter, "shown", `state._shared.?go.orValue(false)`, 5*time.Second, substrate.ContextRequest{Depth: "lean", MessagesLimit: 20})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Triggered || res.Context == nil || res.Context.Context.Delta == nil {
		t.Fatalf("wait: %+v", res)
	}
	d := res.Context.Context.Delta
	shared, _ := json.Marshal(res.Context.State["_shared"])
	if wrote == 0 || d.Changed["_shared.go"] != wrote || string(shared) != `{"go":true}` {
		t.Fatalf("the wake-up's delta (from %d) lacks the write at seq %d that satisfied the condition: changed %v, state %v", d.FromSeq, wrote, d.Changed, res.Context.State)
	}
}
