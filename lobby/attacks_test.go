package lobby_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Attacks on the lobby's authority rules: scope beyond consent, owner
// reads for non-owners, role takeovers. Each names what it tries.

// A participant's embodied agent does not get the owner's wider reads, nor
// does an owner whose connection was granted less than admin.
func TestAttackNonOwnerGetsOwnerReads(t *testing.T) {
	f := newFixture(t, "alice", "bob")
	ctx := context.Background()
	room, err := f.l.CreateRoom(ctx, "user_alice", "lab", "")
	if err != nil {
		t.Fatal(err)
	}
	f.plantSecret(t, room)
	if err := f.l.ShareRoom(ctx, "user_alice", room, "user_bob", "collaborator"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ who, user, scope string }{
		{"collaborator bob asking for admin", "bob", "rooms:lab:admin"},
		{"owner alice connected with write only", "alice", "rooms:lab:write"},
	} {
		s := f.session(t, c.user, "g-"+c.user, c.scope)
		if _, err := f.l.Embody(ctx, s, room, "", ""); err != nil {
			t.Fatal(err)
		}
		p, _, err := f.l.Principal(ctx, s, room)
		if err != nil {
			t.Fatal(err)
		}
		if p.ReadsAll {
			t.Fatalf("%s: the principal reads all", c.who)
		}
		if _, err := f.svc.ReadState(ctx, p, room, substrate.ReadQuery{Scope: "bot", Key: "secret"}); !errs.Is(err, errs.ScopeDenied) {
			t.Fatalf("%s read bot's scope: %v", c.who, err)
		}
		if ev, err := f.svc.Eval(ctx, p, room, `state.bot.secret`, nil); err == nil && ev.Value == "s3cret" {
			t.Fatalf("%s evaluated bot's secret", c.who)
		}
	}
}

// An embodied owner's wider reads are the owner's own: the actions and
// views their agent registers read with the agent's authority, so nothing
// they write or show to others carries what only the owner may read; and
// the principal acting tools get does not read all.
func TestAttackOwnerReadsDoNotFlowIntoActions(t *testing.T) {
	f := newFixture(t, "alice", "bob")
	ctx := context.Background()
	room, err := f.l.CreateRoom(ctx, "user_alice", "lab", "")
	if err != nil {
		t.Fatal(err)
	}
	f.plantSecret(t, room)
	if err := f.l.ShareRoom(ctx, "user_alice", room, "user_bob", "participant"); err != nil {
		t.Fatal(err)
	}
	alice := f.session(t, "alice", "g-alice", "rooms:lab:admin")
	if _, err := f.l.Embody(ctx, alice, room, "", ""); err != nil {
		t.Fatal(err)
	}
	actor, err := f.l.Actor(ctx, alice)
	if err != nil || actor.ReadsAll {
		t.Fatalf("the acting principal: %+v %v", actor, err)
	}
	// Even registered with the reading principal (the widest an adapter
	// could mistakenly pass), definitions read with the registrar's scope.
	reader, _, err := f.l.Principal(ctx, alice, room)
	if err != nil || !reader.ReadsAll {
		t.Fatalf("the reading principal: %+v %v", reader, err)
	}
	for _, scope := range []string{"", alice.AgentID} {
		def := substrate.ActionDef{ID: "leak" + map[string]string{"": "_shared"}[scope], Scope: scope,
			Writes: []substrate.WriteTemplate{{Scope: "_shared", Key: "leak", Value: json.RawMessage(`"state.bot.secret"`), Expr: true}}}
		if _, err := f.svc.RegisterAction(ctx, reader, room, def); err != nil {
			t.Fatal(err)
		}
		res, err := f.svc.Invoke(ctx, reader, room, def.ID, nil)
		if err == nil {
			raw, _ := json.Marshal(res)
			if strings.Contains(string(raw), "s3cret") {
				t.Fatalf("action %s wrote the secret: %s", def.ID, raw)
			}
		}
	}
	if _, err := f.svc.RegisterView(ctx, reader, room, substrate.ViewDef{ID: "peek", Expr: `state.bot.secret`}); err != nil {
		t.Fatal(err)
	}
	bob := f.session(t, "bob", "g-bob", "rooms:lab:write")
	bp, _, err := f.l.Principal(ctx, bob, room)
	if err != nil {
		t.Fatal(err)
	}
	env, err := f.svc.Context(ctx, bp, room, substrate.ContextRequest{Depth: "full"})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(env)
	if strings.Contains(string(raw), "s3cret") {
		t.Fatalf("bob's context shows the secret through alice's definitions: %s", raw)
	}
}

// A user trying to widen a connection beyond its consent through shared
// rooms: an admin ask is capped at write, an owner's share gives no admin
// (no room authority, no owner reads), narrowing never widens, a room
// shared with someone else or made by the user themself does not count,
// and the caps hold whatever the role.
func TestAttackSharedRoomsBeyondConsent(t *testing.T) {
	f := newFixture(t, "alice", "bob", "carol")
	ctx := context.Background()
	for _, id := range []string{"lab", "side"} {
		if _, err := f.l.CreateRoom(ctx, "user_alice", id, ""); err != nil {
			t.Fatal(err)
		}
	}
	f.plantSecret(t, "lab")
	bob := f.session(t, "bob", "g-bob", "shared_rooms:admin")
	if bob.Scope.SharedRooms != "write" {
		t.Fatalf("shared_rooms:admin parsed as %q (consent offers up to write)", bob.Scope.SharedRooms)
	}
	f.session(t, "bob", "g-narrow", "shared_rooms:observe")
	if err := f.l.ShareRoom(ctx, "user_alice", "lab", "user_bob", "owner"); err != nil {
		t.Fatal(err)
	}
	if err := f.l.ShareRoom(ctx, "user_alice", "side", "user_carol", "participant"); err != nil {
		t.Fatal(err)
	}
	bob = f.session(t, "bob", "g-bob", "")
	if level, role, err := f.l.Access(ctx, bob, "lab"); err != nil || level != "write" || role != "owner" {
		t.Fatalf("shared as owner: %s %s %v (want write: admin is never reached through sharing)", level, role, err)
	}
	if _, err := f.l.Embody(ctx, bob, "lab", "", ""); err != nil {
		t.Fatal(err)
	}
	p, _, err := f.l.Principal(ctx, bob, "lab")
	if err != nil || p.ReadsAll || p.Admin() {
		t.Fatalf("bob's agent in a room shared as owner reads all or has room authority: %+v %v", p, err)
	}
	if _, err := f.svc.ReadState(ctx, p, "lab", substrate.ReadQuery{Scope: "bot", Key: "secret"}); !errs.Is(err, errs.ScopeDenied) {
		t.Fatalf("bob read the bot's scope: %v", err)
	}
	if _, _, err := f.l.Access(ctx, bob, "side"); !errs.Is(err, lobby.RoomNotInScope) {
		t.Fatalf("a room shared with carol reached bob: %v", err)
	}
	// Narrowing with a wider ask does not widen.
	narrow := f.session(t, "bob", "g-narrow", "")
	if _, err := f.l.RestrictScope(ctx, narrow, "shared_rooms:write rooms:*:admin rooms:lab:admin"); err != nil {
		t.Fatal(err)
	}
	narrow = f.session(t, "bob", "g-narrow", "")
	if level, _, err := f.l.Access(ctx, narrow, "lab"); err != nil || level != "observe" {
		t.Fatalf("after a widening restrict: %s %v", level, err)
	}
	none := f.session(t, "bob", "g-none", "")
	if _, err := f.l.RestrictScope(ctx, none, "shared_rooms:write"); err != nil {
		t.Fatal(err)
	}
	if none.Scope.SharedRooms != "" {
		t.Fatalf("restrict turned shared rooms on: %q", none.Scope.String())
	}
	// Rooms the user makes or claims are not "shared with me".
	if _, err := f.l.CreateRoom(ctx, "user_bob", "own", ""); err != nil {
		t.Fatal(err)
	}
	bob = f.session(t, "bob", "g-bob", "")
	_, _, err = f.l.Access(ctx, bob, "own")
	if r, _ := reason(t, err, lobby.RoomNotInScope); r != "not_granted" {
		t.Fatalf("a room bob made himself reached the session: %s", r)
	}
}
