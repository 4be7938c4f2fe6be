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
