package substrate_test

import (
	"context"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// Any authenticated call by an agent counts as its heartbeat, refreshed at
// most once per HeartbeatEvery.
func TestCallsCountAsHeartbeat(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{HeartbeatEvery: time.Millisecond})
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "hb"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	ag, err := svc.Join(ctx, admin, "hb", substrate.JoinRequest{ID: "a", Name: "A"})
	if err != nil {
		t.Fatal(err)
	}
	first := ag.LastHeartbeat
	time.Sleep(20 * time.Millisecond)
	if _, err := svc.Authenticate(ctx, ag.Token); err != nil {
		t.Fatal(err)
	}
	list, err := svc.ListAgents(ctx, admin, "hb")
	if err != nil {
		t.Fatal(err)
	}
	if !list[0].LastHeartbeat.After(first) {
		t.Fatalf("last_heartbeat %v did not move past %v after an authenticated call", list[0].LastHeartbeat, first)
	}
}

// A room deleted and created again under the same id never shows the old
// room's cached state, though its seq starts over.
func TestRecreatedRoomIsFresh(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{})
	ctx := context.Background()
	for i, want := range []string{"old", "new"} {
		room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "phoenix"})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := svc.Authenticate(ctx, room.Token)
		if i == 0 {
			if _, err := svc.WriteState(ctx, p, "phoenix", []substrate.Write{{Scope: "_shared", Key: "era", Value: []byte(`"old"`)}}, false); err != nil {
				t.Fatal(err)
			}
		} else {
			// Same seq as the old room had when it was cached.
			if _, err := svc.WriteState(ctx, p, "phoenix", []substrate.Write{{Scope: "_shared", Key: "other", Value: []byte(`1`)}}, false); err != nil {
				t.Fatal(err)
			}
		}
		v, err := svc.Eval(ctx, p, "phoenix", `"era" in state._shared ? state._shared.era : "new"`)
		if err != nil {
			t.Fatal(err)
		}
		if v["value"] != want {
			t.Fatalf("incarnation %d sees era %v", i, v["value"])
		}
		if i == 0 {
			if err := svc.DeleteRoom(ctx, p, "phoenix"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond) // a distinct created_at
		}
	}
}
