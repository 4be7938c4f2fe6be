package substrate_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// A whole-room state read by an observer (an MCP user who has not
// embodied) returned private scopes: observers fell into the branch meant
// for room authority. Only room and view tokens and admins read everything.
func TestObserverWholeRoomReadSkipsPrivateScopes(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures})
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "obs"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	if _, err := svc.Join(ctx, admin, "obs", substrate.JoinRequest{ID: "a", Name: "A"}); err != nil {
		t.Fatal(err)
	}
	v, _ := json.Marshal("secret")
	if _, err := svc.WriteState(ctx, admin, "obs", []substrate.Write{{Scope: "a", Key: "diary", Value: v}, {Scope: "_shared", Key: "notice", Value: v}}, true); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*substrate.Principal{substrate.ObserverPrincipal("obs"), {Kind: "future-kind", RoomID: "obs"}} {
		read, err := svc.ReadState(ctx, p, "obs", substrate.ReadQuery{})
		if err != nil {
			t.Fatal(err)
		}
		shared := false
		for _, e := range read.Entries {
			if e.Scope == "a" || e.Scope == "_audit" {
				t.Fatalf("%s read %s/%s", p.Kind, e.Scope, e.Key)
			}
			shared = shared || e.Scope == "_shared"
		}
		if !shared {
			t.Fatalf("%s did not read _shared: %v", p.Kind, read.Entries)
		}
	}
	all, _ := svc.ReadState(ctx, substrate.ViewPrincipal("obs"), "obs", substrate.ReadQuery{})
	if len(all.Entries) < 2 {
		t.Fatalf("the view token reads everything: %v", all.Entries)
	}
}
