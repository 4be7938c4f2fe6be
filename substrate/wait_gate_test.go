package substrate_test

import (
	"context"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// A wait on state alone ignores presence changes, unless the room has
// entries gated by `enabled`: a gate may read agents, so an agent's status
// can reveal the entry the wait is for. The wait must wake at that status
// change, not at its next safety-net re-check.
func TestWaitWakesWhenPresenceOpensAGate(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures, Wait: substrate.WaitOptions{Recheck: time.Hour}})
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "gatewake"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	principal := func(id string) *substrate.Principal {
		ag, err := svc.Join(ctx, admin, "gatewake", substrate.JoinRequest{ID: id, Name: id})
		if err != nil {
			t.Fatal(err)
		}
		p, err := svc.Authenticate(ctx, ag.Token)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	alice, bob := principal("alice"), principal("bob")
	if _, err := svc.WriteState(ctx, admin, "gatewake", []substrate.Write{{Scope: "_shared", Key: "secret", Value: []byte(`"open"`),
		Enabled: `agents["bob"].status == "done"`}}, false); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond) // the wait is asleep by then
		if _, err := svc.Heartbeat(ctx, bob, "gatewake", "bob", "done"); err != nil {
			t.Error(err)
		}
	}()
	res, err := svc.Wait(ctx, alice, "gatewake", `"secret" in state._shared`, 10*time.Second, substrate.ContextRequest{NoContext: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Triggered {
		t.Fatalf("the wait timed out after %d ms though bob's status opened the gate", res.ElapsedMS)
	}
}
