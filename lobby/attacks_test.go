package lobby_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

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
