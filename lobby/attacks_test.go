package lobby_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/loom"
	"github.com/syncsubstrate/sync/substrate/roomview"
)

// Attacks on the lobby's authority rules: scope beyond consent, owner
// reads for non-owners, role takeovers. Each names what it tries.

// A participant's embodied agent does not get the owner's wider reads, nor
// does an owner whose connection was granted less than admin.
func TestAttackNonOwnerGetsOwnerReads(t *testing.T) {
	f := newFixture(t, "alice", "bob")
	ctx := context.Background()
	room := f.secretLab(t, "collaborator")
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
	room := f.secretLab(t, "participant")
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
	// Narrowing with a wider ask is refused and does not widen.
	narrow := f.session(t, "bob", "g-narrow", "")
	if _, err := f.l.RestrictScope(ctx, narrow, "shared_rooms:write rooms:*:admin rooms:lab:admin"); !errs.Is(err, errs.ScopeDenied) {
		t.Fatalf("a widening restrict: %v", err)
	}
	narrow = f.session(t, "bob", "g-narrow", "")
	if level, _, err := f.l.Access(ctx, narrow, "lab"); err != nil || level != "observe" {
		t.Fatalf("after a widening restrict: %s %v", level, err)
	}
	none := f.session(t, "bob", "g-none", "")
	if _, err := f.l.RestrictScope(ctx, none, "shared_rooms:write"); !errs.Is(err, errs.ScopeDenied) {
		t.Fatalf("restrict to shared rooms on a connection without: %v", err)
	}
	if none = f.session(t, "bob", "g-none", ""); none.Scope.SharedRooms != "" {
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

// Role takeovers that must fail: a filled role (by role or by agent id),
// a role held by a token's agent, a role whose id is no agent id, and two
// users racing for one vacant role. A session whose role agent was taken
// over after its role was freed behind its back stops driving it, and
// stepping out leaves the new occupant's agent alone.
func TestAttackRoleTakeover(t *testing.T) {
	f := newFixture(t, "alice", "bob", "carol", "dave")
	ctx := context.Background()
	room := f.guild(t, `{"researcher": {"filled_by": null}, "critic": {"filled_by": null}, "_sys": {"filled_by": null}, "lead": {"filled_by": null}}`, "bob", "carol", "dave")
	bob := f.session(t, "bob", "g-bob", "rooms:guild:write")
	carol := f.session(t, "carol", "g-carol", "rooms:guild:write")
	if _, err := f.l.Embody(ctx, bob, room, "", "researcher"); err != nil {
		t.Fatal(err)
	}
	_, err := f.l.Embody(ctx, carol, room, "", "researcher")
	if r, _ := reason(t, err, errs.Forbidden); r != "role_filled" {
		t.Fatalf("carol took a filled role: %s", r)
	}
	_, err = f.l.Embody(ctx, carol, room, "researcher", "")
	if r, _ := reason(t, err, errs.Forbidden); r != "role_filled" {
		t.Fatalf("carol took a filled role by its agent id: %s", r)
	}
	if _, err := f.l.Embody(ctx, carol, room, "bob:test-client", "researcher"); !errs.Is(err, errs.InvalidField) {
		t.Fatalf("role with another agent id: %v", err)
	}
	// A role agent made with a token (an autonomous process).
	if _, err := f.svc.Join(ctx, substrate.RoomPrincipal(room), room, substrate.JoinRequest{ID: "critic", Name: "bot"}); err != nil {
		t.Fatal(err)
	}
	_, err = f.l.Embody(ctx, carol, room, "", "critic")
	if r, _ := reason(t, err, errs.Forbidden); r != "token_agent" {
		t.Fatalf("carol took a token agent's role: %s", r)
	}
	var e *errs.Error
	if _, err := f.l.Embody(ctx, carol, room, "", "_sys"); !errors.As(err, &e) || e.Code != errs.InvalidField || e.Hint == "" {
		t.Fatalf("a role id that is no agent id: %v", err)
	}
	if _, err := f.l.Embody(ctx, carol, room, "", "ghost"); !errs.Is(err, errs.NotFound) {
		t.Fatalf("an undefined role: %v", err)
	}

	// The role is freed behind bob's back (the owner rewrites roles):
	// while bob still drives its agent, carol cannot take it; once bob's
	// client is gone (his agent unseen for IdleAfter) she can, and bob's
	// session no longer drives the agent.
	if _, err := f.svc.WriteState(ctx, substrate.RoomPrincipal(room), room, []substrate.Write{{Scope: "_shared", Key: "roles",
		Merge: json.RawMessage(`{"researcher": {"filled_by": null}}`)}}, false); err != nil {
		t.Fatal(err)
	}
	_, err = f.l.Embody(ctx, carol, room, "", "researcher")
	if r, _ := reason(t, err, errs.Forbidden); r != "role_filled" {
		t.Fatalf("carol took the role bob still drives: %s", r)
	}
	if _, err := f.db.Exec(ctx, `UPDATE agents SET last_heartbeat = now() - interval '1 hour' WHERE room_id = $1 AND id = 'researcher'`, room); err != nil {
		t.Fatal(err)
	}
	if emb, err := f.l.Embody(ctx, carol, room, "", "researcher"); err != nil || !emb.TakenOver {
		t.Fatalf("carol filling the freed role: %+v %v", emb, err)
	}
	bob = f.session(t, "bob", "g-bob", "")
	if _, err := f.l.Actor(ctx, bob); !errs.Is(err, errs.Forbidden) {
		t.Fatalf("bob still acts as the role's agent: %v", err)
	}
	if _, _, err := f.l.Principal(ctx, bob, room); !errs.Is(err, errs.Forbidden) {
		t.Fatalf("bob still reads as the role's agent: %v", err)
	}
	if dis, err := f.l.Disembody(ctx, bob); err != nil || dis.Status != "taken_over" {
		t.Fatalf("bob stepping out: %+v %v", dis, err)
	}
	if a := f.agentStatus(t, room, "researcher"); a.Status != "active" {
		t.Fatalf("bob's disembody touched carol's agent: %+v", a)
	}
	bob = f.session(t, "bob", "g-bob", "")
	if _, _, err := f.l.Principal(ctx, bob, room); err != nil {
		t.Fatalf("bob observing after stepping out: %v", err)
	}

	// Two users race for one vacant role: one gets it.
	dave := f.session(t, "dave", "g-dave", "rooms:guild:write")
	var wg sync.WaitGroup
	results := map[string]error{}
	var mu sync.Mutex
	for who, s := range map[string]*lobby.Session{"bob": bob, "dave": dave} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := f.l.Embody(ctx, s, room, "", "lead")
			mu.Lock()
			results[who] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	owner, _, _ := f.svc.AgentOwner(ctx, room, "lead")
	for who, err := range results {
		if (owner == "user_"+who) != (err == nil) {
			t.Fatalf("racing for lead (owner %s): %s got %v", owner, who, err)
		}
	}
}

// Issue 25 item 1: a participant defined a role whose id was another
// person's agent (<username>:<client>, <username>:web) and filled it:
// sync_embody {"role": id} adopted that agent, with its private scope, and
// took it from its owner even while they were embodied. A role never takes
// an id with ":", and filling a role never adopts an agent not made for it.
func TestAttackRoleNamedAfterPersonsAgent(t *testing.T) {
	f := newFixture(t, "alice", "bob", "carol")
	ctx := context.Background()
	room := f.guild(t, `{}`, "bob", "carol")
	alice := f.session(t, "alice", "g-alice", "rooms:guild:admin")
	emb, ap := f.embodied(t, alice, room, "")
	f.writeSelf(t, ap, room, "diary", `"private"`)
	// Alice's web agent exists too (she acted from the room page).
	if _, err := f.l.PersonActor(ctx, "user_alice", "alice", room); err != nil {
		t.Fatal(err)
	}
	// Bob registers define_role (the standard library's) and uses it; it
	// refuses ids with ":". He then writes the roles directly, as an agent
	// with a _shared grant (a collaborator) could.
	bob := f.session(t, "bob", "g-bob", "rooms:guild:write")
	_, bp := f.embodied(t, bob, room, "")
	f.registerStandard(t, bp, room, "define_role")
	if _, err := f.svc.Invoke(ctx, bp, room, "define_role", json.RawMessage(`{"role_id": "`+emb.Agent+`", "description": "mine now"}`)); !errs.Is(err, errs.PreconditionFailed) {
		t.Fatalf("define_role with a person's agent id: %v", err)
	}
	if _, err := f.svc.WriteState(ctx, substrate.RoomPrincipal(room), room, []substrate.Write{{Scope: "_shared", Key: "roles",
		Value: json.RawMessage(`{"` + emb.Agent + `": {"filled_by": null}, "alice:web": {"filled_by": null}, "alicebot": {"filled_by": null}}`)}}, false); err != nil {
		t.Fatal(err)
	}
	// The lobby does not offer them as roles (people would try to fill
	// them); alicebot, an id a role may take, it does.
	view, err := f.l.View(ctx, bob)
	if err != nil {
		t.Fatal(err)
	}
	for _, rm := range view.Rooms {
		var offered []string
		for _, r := range rm.Roles {
			offered = append(offered, r.ID)
		}
		offered = append(offered, rm.Summary.OpenRoles...)
		if rm.Room == room && (slices.Contains(offered, "alice:web") || slices.Contains(offered, emb.Agent) || !slices.Contains(offered, "alicebot")) {
			t.Fatalf("HOLE: the lobby offers people's agents as roles: %v", offered)
		}
	}
	for _, id := range []string{emb.Agent, "alice:web"} {
		for _, c := range []struct{ agent, role string }{{"", id}, {id, ""}, {id, id}} {
			_, err := f.l.Embody(ctx, bob, room, c.agent, c.role)
			if err == nil {
				t.Fatalf("HOLE: bob took %s (agent %q role %q)", id, c.agent, c.role)
			}
			if owner, _, _ := f.svc.AgentOwner(ctx, room, id); owner != "user_alice" {
				t.Fatalf("HOLE: %s now belongs to %q", id, owner)
			}
		}
		_, err := f.l.Embody(ctx, bob, room, "", id)
		var e *errs.Error
		if !errors.As(err, &e) || e.Code != errs.InvalidField || e.Details["reason"] != "person_id" || e.Hint == "" {
			t.Fatalf("filling role %s: %v", id, err)
		}
	}
	// Alice still drives her agent and reads her diary.
	if ap, err = f.l.Actor(ctx, alice); err != nil || ap.AgentID != emb.Agent {
		t.Fatalf("alice lost her agent: %+v %v", ap, err)
	}
	if read, err := f.svc.ReadState(ctx, ap, room, substrate.ReadQuery{Scope: "self", Key: "diary"}); err != nil || string(read.Entries[0].Value) != `"private"` {
		t.Fatalf("alice's diary: %+v %v", read, err)
	}

	// A person's own agent without ":" in its id (made before ids were
	// checked) is not a role's agent either: filling the role it names
	// is refused.
	if _, err := f.svc.Embody(ctx, substrate.EmbodyRequest{Room: room, Agent: "alicebot", Name: "alice", Role: "mcp-client", User: "user_alice"}); err != nil {
		t.Fatal(err)
	}
	_, err = f.l.Embody(ctx, bob, room, "", "alicebot")
	if r, _ := reason(t, err, errs.Forbidden); r != "personal_agent" {
		t.Fatalf("bob filled a role named after alice's own agent: %s", r)
	}
	if owner, _, _ := f.svc.AgentOwner(ctx, room, "alicebot"); owner != "user_alice" {
		t.Fatalf("HOLE: alicebot now belongs to %q", owner)
	}
	// Roles made for roles still pass on: carol fills a fresh role, leaves
	// it, and bob takes it over.
	if _, err := f.svc.WriteState(ctx, substrate.RoomPrincipal(room), room, []substrate.Write{{Scope: "_shared", Key: "roles",
		Merge: json.RawMessage(`{"scribe": {"filled_by": null}}`)}}, false); err != nil {
		t.Fatal(err)
	}
	carol := f.session(t, "carol", "g-carol", "rooms:guild:write")
	if _, err := f.l.Embody(ctx, carol, room, "", "scribe"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.Disembody(ctx, carol); err != nil {
		t.Fatal(err)
	}
	if emb, err := f.l.Embody(ctx, bob, room, "", "scribe"); err != nil || !emb.TakenOver {
		t.Fatalf("bob taking over the vacated scribe: %+v %v", emb, err)
	}
}

// Issue 25 item 8: whoever claims a room made over REST pasted a room
// token others may have seen; claiming may replace it, and the pasted one
// then no longer works (nor claims the room again).
func TestAttackClaimRotatesRoomToken(t *testing.T) {
	f := newFixture(t, "alice", "mallory")
	ctx := context.Background()
	room, err := f.svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "api-made"})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := f.l.ClaimRoom(ctx, "user_alice", room.ID, room.Token, true)
	if err != nil || !strings.HasPrefix(tok, substrate.RoomTokenPrefix) || tok == room.Token {
		t.Fatalf("claim with rotation: %q %v", tok, err)
	}
	if _, err := f.svc.AuthenticateIn(ctx, room.ID, room.Token); !errs.Is(err, errs.Unauthorized) {
		t.Fatalf("HOLE: the pasted room token still works: %v", err)
	}
	if _, err := f.l.ClaimRoom(ctx, "user_mallory", room.ID, room.Token, false); !errs.Is(err, errs.Forbidden) {
		t.Fatalf("HOLE: the old token claimed the room again: %v", err)
	}
	if p, err := f.svc.AuthenticateIn(ctx, room.ID, tok); err != nil || p.Kind != substrate.KindRoom {
		t.Fatalf("the new token: %+v %v", p, err)
	}
	// Without rotation the token stays (and nothing is returned).
	other, _ := f.svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "api-made-2"})
	if tok, err := f.l.ClaimRoom(ctx, "user_alice", other.ID, other.Token, false); err != nil || tok != "" {
		t.Fatalf("claim without rotation: %q %v", tok, err)
	}
	if _, err := f.svc.AuthenticateIn(ctx, other.ID, other.Token); err != nil {
		t.Fatalf("the token of a room claimed without rotation: %v", err)
	}
}

// Review of issue 25 item 1: a role's filled_by is state that anyone who
// may write _shared.roles can clear (a collaborator directly, a
// participant through any action that writes it, such as the standard
// library's set). Clearing it while a person drove the role's agent let
// another take that agent over and kicked the person's session off it. A
// role whose agent another user still drives is filled, whatever
// filled_by says.
func TestAttackRoleFreedBehindDriversBack(t *testing.T) {
	f := newFixture(t, "alice", "bob", "carol")
	ctx := context.Background()
	room := f.guild(t, `{"scribe": {"description": "keeps notes", "filled_by": null}}`, "bob", "carol")
	carol := f.session(t, "carol", "g-carol", "rooms:guild:write")
	_, cp := f.embodied(t, carol, room, "scribe")
	f.writeSelf(t, cp, room, "draft", `"carol's draft"`)
	// Bob, a participant, registers the standard library's set and clears
	// the role's filled_by with it.
	bob := f.session(t, "bob", "g-bob", "rooms:guild:write")
	_, bp := f.embodied(t, bob, room, "")
	f.registerStandard(t, bp, room, "set")
	if _, err := f.svc.Invoke(ctx, bp, room, "set", json.RawMessage(`{"key": "roles", "value": {"scribe": {"description": "keeps notes", "filled_by": null}}}`)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ agent, role string }{{"", "scribe"}, {"scribe", ""}} {
		_, err := f.l.Embody(ctx, bob, room, c.agent, c.role)
		if err == nil {
			t.Fatalf("HOLE: bob took the scribe carol drives (agent %q role %q)", c.agent, c.role)
		}
		if r, _ := reason(t, err, errs.Forbidden); r != "role_filled" {
			t.Fatalf("bob filling the scribe carol drives: %s", r)
		}
	}
	if owner, _, _ := f.svc.AgentOwner(ctx, room, "scribe"); owner != "user_carol" {
		t.Fatalf("HOLE: the scribe now belongs to %q", owner)
	}
	carol = f.session(t, "carol", "g-carol", "")
	cp, err := f.l.Actor(ctx, carol)
	if err != nil || cp.AgentID != "scribe" {
		t.Fatalf("HOLE: carol was kicked off her role: %+v %v", cp, err)
	}
	if read, err := f.svc.ReadState(ctx, cp, room, substrate.ReadQuery{Scope: "self", Key: "draft"}); err != nil || string(read.Entries[0].Value) != `"carol's draft"` {
		t.Fatalf("carol's draft: %+v %v", read, err)
	}
	// Once carol steps out, the role passes on as it should.
	if _, err := f.l.Disembody(ctx, carol); err != nil {
		t.Fatal(err)
	}
	if emb, err := f.l.Embody(ctx, bob, room, "", "scribe"); err != nil || !emb.TakenOver {
		t.Fatalf("bob filling the scribe carol left: %+v %v", emb, err)
	}
}

// The lobby's state summary counts only what the session reads by the one
// read rule (review of issue 25 item 3): it showed the key counts of the
// loom's scopes to a session whose agent is denied the loom, which → view
// and every read path refuse it.
func TestAttackSummaryCountsOnlyReadableScopes(t *testing.T) {
	f := newFixture(t, "alice", "bob", "carol")
	ctx := context.Background()
	room, err := f.l.CreateRoom(ctx, "user_alice", "lab", "")
	if err != nil {
		t.Fatal(err)
	}
	agents := map[string]string{}
	sessions := map[string]*lobby.Session{}
	for _, u := range []string{"bob", "carol"} {
		if err := f.l.ShareRoom(ctx, "user_alice", room, "user_"+u, "collaborator"); err != nil {
			t.Fatal(err)
		}
		sessions[u] = f.session(t, u, "g-"+u, "rooms:lab:write")
		emb, err := f.l.Embody(ctx, sessions[u], room, "", "")
		if err != nil {
			t.Fatal(err)
		}
		agents[u] = emb.Agent
	}
	if _, err := loom.Of(f.svc).Run(ctx, substrate.RoomPrincipal(room), room, "→ new tree \"t\" \"root\"\n→ deny "+agents["bob"]+" loom_aware doc_read"); err != nil {
		t.Fatal(err)
	}
	loomKeys := func(who string) []string {
		view, err := f.l.View(ctx, sessions[who])
		if err != nil || len(view.Rooms) != 1 {
			t.Fatalf("%s's lobby: %+v %v", who, view, err)
		}
		var out []string
		for scope := range view.Rooms[0].Summary.Keys {
			if strings.HasPrefix(scope, "_loom") {
				out = append(out, scope)
			}
		}
		return out
	}
	if got := loomKeys("carol"); len(got) == 0 {
		t.Fatal("carol, who reads the loom, is shown no loom scope in the summary")
	}
	if got := loomKeys("bob"); len(got) != 0 {
		t.Fatalf("HOLE: bob, denied the loom, is shown the key counts of %v", got)
	}
	// Observing (not embodied) keeps the agent's denial.
	if _, err := f.l.Disembody(ctx, sessions["bob"]); err != nil {
		t.Fatal(err)
	}
	if got := loomKeys("bob"); len(got) != 0 {
		t.Fatalf("HOLE: bob observing, denied the loom, is shown the key counts of %v", got)
	}
}

// The lobby shows a room's summary view to everyone who may list the room
// and evaluates no reader's gates: a summary that reads a view whose
// enabled gate hides it from some reader would show that view's value to
// them, so such a summary is not shown (the scalars stand for it), while
// one reading only ungated views is.
func TestAttackSummaryViewCarriesNoGatedView(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	const room = "gated-sum"
	rm, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: room})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, rm.Token)
	j, err := svc.Join(ctx, admin, room, substrate.JoinRequest{ID: "alice", Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	alice, _ := svc.Authenticate(ctx, j.Token)
	if _, err := svc.WriteState(ctx, alice, room, []substrate.Write{{Scope: "alice", Key: "code", Value: json.RawMessage(`"s3cret"`)}}, false); err != nil {
		t.Fatal(err)
	}
	for _, v := range []substrate.ViewDef{
		{ID: "secret", Scope: "alice", Expr: `state.self.code`, Enabled: `self != "bob"`},
		{ID: "open", Scope: "alice", Expr: `"all clear"`},
		{ID: roomview.SummaryView, Scope: "alice", Expr: `views.open`},
	} {
		if _, err := svc.RegisterView(ctx, alice, room, v); err != nil {
			t.Fatal(err)
		}
	}
	sums, err := roomview.Summaries(ctx, svc, []string{room})
	if err != nil {
		t.Fatal(err)
	}
	if got := sums[room].View; got != "all clear" {
		t.Fatalf("a summary reading only an ungated view: %v, want \"all clear\"", got)
	}
	if _, err := svc.RegisterView(ctx, alice, room, substrate.ViewDef{ID: roomview.SummaryView, Scope: "alice", Expr: `views.open + " " + views.secret`}); err != nil {
		t.Fatal(err)
	}
	sums, err = roomview.Summaries(ctx, svc, []string{room})
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := json.Marshal(sums[room]); strings.Contains(string(raw), "s3cret") {
		t.Fatalf("HOLE: the lobby's summary of the room shows a view gated from bob to every lister: %s", raw)
	}
}

// The lobby's summary of a room is evaluated for every member's lobby, on
// every read, and any member who may register views decides what it
// costs. These rooms make it expensive: a list to walk (costlySum) and
// views that walk it reading now (so no read reuses another's value).

// costlySum walks the room's _shared.big (summaryBudgetRoom): about 58,000
// cel-go cost.
const costlySum = `state._shared.big.map(x, x * 2).filter(y, y > 3).size()`

// summaryBudgetRoom is one of alice's rooms (f.l.CreateRoom) with a 2,000
// number list in _shared.big, a scalar _shared.phase, and views: the
// given summary, a cheap "base" it may read, and walkers other views
// that walk the list reading now.
func summaryBudgetRoom(t *testing.T, f *fixture, id, summary string, walkers int) string {
	t.Helper()
	ctx := context.Background()
	room, err := f.l.CreateRoom(ctx, "user_alice", id, "")
	if err != nil {
		t.Fatal(err)
	}
	admin := substrate.RoomPrincipal(room)
	big := make([]int, 2000)
	for i := range big {
		big[i] = i
	}
	raw, _ := json.Marshal(big)
	if _, err := f.svc.WriteState(ctx, admin, room, []substrate.Write{{Scope: "_shared", Key: "big", Value: raw},
		{Scope: "_shared", Key: "phase", Value: json.RawMessage(`"play"`)}}, false); err != nil {
		t.Fatal(err)
	}
	defs := []substrate.ViewDef{{ID: "base", Expr: `state._shared.phase`}}
	for i := range walkers {
		defs = append(defs, substrate.ViewDef{ID: fmt.Sprintf("walk%d", i), Expr: `now > timestamp("2000-01-01T00:00:00Z") && ` + costlySum + ` > 0`})
	}
	defs = append(defs, substrate.ViewDef{ID: roomview.SummaryView, Expr: summary})
	for _, d := range defs {
		if _, err := f.svc.RegisterView(ctx, admin, room, d); err != nil {
			t.Fatal(err)
		}
	}
	return room
}

// stateSummary is the lobby's state_summary of room as its JSON (what
// sync_lobby shows).
func stateSummary(t *testing.T, v *lobby.View, room string) map[string]any {
	t.Helper()
	for _, r := range v.Rooms {
		if r.Room != room {
			continue
		}
		raw, _ := json.Marshal(r.Summary)
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	t.Fatalf("room %s is not in the lobby", room)
	return nil
}

// The summary evaluates the summary view and the views it reads, nothing
// else, and once for an unchanged room: the lobby evaluated all of the
// room's views as the room principal on every read (five walks of the
// list per member per read), and the lobby page, which shows no summary,
// evaluated them too.
func TestAttackSummaryEvaluatesOnlyItsViews(t *testing.T) {
	f := newFixture(t, "alice")
	ctx := context.Background()
	room := summaryBudgetRoom(t, f, "walks", `"phase " + views.base`, 5)
	// A gated entry: context reads share no view value in such a room
	// (gates are decided per reader), but the summary's, read as the
	// room principal through a gate that reads only state, holds for the
	// room's state.
	if _, err := f.svc.WriteState(ctx, substrate.RoomPrincipal(room), room, []substrate.Write{{Scope: "_shared", Key: "gated",
		Value: json.RawMessage(`1`), Enabled: `state._shared.phase == "play"`}}, false); err != nil {
		t.Fatal(err)
	}
	before := f.svc.Stats().ViewEvaluations
	for range 10 {
		if _, err := f.l.UserRooms(ctx, "user_alice"); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.svc.Stats().ViewEvaluations - before; n > 0 {
		t.Fatalf("HOLE: ten renders of the lobby page, which shows no summary, evaluated %d views", n)
	}
	s := f.session(t, "alice", "g-alice", "rooms:*:admin")
	before = f.svc.Stats().ViewEvaluations
	for range 10 {
		v, err := f.l.View(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if got := stateSummary(t, v, room)["summary"]; got != "phase play" {
			t.Fatalf("summary %v, want \"phase play\"", got)
		}
	}
	if n := f.svc.Stats().ViewEvaluations - before; n > 2 {
		t.Fatalf("HOLE: ten lobby reads of a room whose summary reads one view evaluated %d views (want at most 2: summary and base, once)", n)
	}
}

// The summary's evaluation is charged to the room's expression budget:
// reading the lobby again and again spends it, and then the summary is
// not evaluated (the lobby says the room is busy); the room's own reads
// are refused with room_busy too, the budget being one. Before, the
// lobby evaluated the room's views on no budget: every read walked.
func TestAttackSummaryChargedToTheRoom(t *testing.T) {
	f := newFixtureWith(t, substrate.Options{Limits: substrate.Limits{RoomCostPerSecond: 5_000, GateQuantum: -1}}, "alice")
	ctx := context.Background()
	room := summaryBudgetRoom(t, f, "hot", `now > timestamp("2000-01-01T00:00:00Z") && `+costlySum+` > 0`, 0)
	s := f.session(t, "alice", "g-alice", "rooms:*:admin")
	before := f.svc.Stats().ViewEvaluations
	busy := 0
	for range 20 {
		v, err := f.l.View(ctx, s)
		if err != nil {
			t.Fatalf("a lobby read with a busy room failed: %v", err)
		}
		if sum := stateSummary(t, v, room); sum["summary_busy"] != nil {
			busy++
		}
	}
	n := f.svc.Stats().ViewEvaluations - before
	if busy == 0 || n >= 10 {
		t.Fatalf("HOLE: twenty lobby reads of a summary costing about 58,000 on a budget of 5,000 per second: %d evaluations, %d reads shown busy", n, busy)
	}
	if _, err := f.svc.Context(ctx, substrate.RoomPrincipal(room), room, substrate.ContextRequest{}); !errs.Is(err, errs.RoomBusy) {
		t.Fatalf("the lobby spent the room's budget, yet the room's own read was not refused: %v", err)
	}
}

// A busy room does not break the lobby: its entry shows its scalars and
// says why its summary is not there (room_busy, when to look again), and
// the person's other rooms show theirs. Before, nothing was refused, so
// nothing said so: the busy room's summary was evaluated on no budget.
func TestAttackBusyRoomKeepsTheLobby(t *testing.T) {
	f := newFixtureWith(t, substrate.Options{Limits: substrate.Limits{RoomCostPerSecond: 5_000, GateQuantum: -1}}, "alice")
	ctx := context.Background()
	hot := summaryBudgetRoom(t, f, "hot", `now > timestamp("2000-01-01T00:00:00Z") && `+costlySum+` > 0`, 0)
	calm := summaryBudgetRoom(t, f, "calm", `"calm " + views.base`, 0)
	// Spent by reads of the room itself (its summary view reads now).
	spent := false
	for range 10 {
		if _, err := f.svc.Context(ctx, substrate.RoomPrincipal(hot), hot, substrate.ContextRequest{}); errs.Is(err, errs.RoomBusy) {
			spent = true
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if !spent {
		t.Fatal("ten context reads of a view costing about 58,000 on a budget of 5,000 per second: none refused")
	}
	s := f.session(t, "alice", "g-alice", "rooms:*:admin")
	before := f.svc.Stats().ViewEvaluations
	v, err := f.l.View(ctx, s)
	if err != nil {
		t.Fatalf("HOLE: one busy room failed the whole lobby: %v", err)
	}
	sum := stateSummary(t, v, hot)
	busy, _ := sum["summary_busy"].(map[string]any)
	if busy == nil || busy["code"] != "room_busy" || busy["retry_after_ms"].(float64) <= 0 {
		t.Fatalf("HOLE: the busy room's summary: %v (want summary_busy with room_busy and retry_after_ms)", sum)
	}
	if vals, _ := sum["values"].(map[string]any); vals["phase"] != "play" || sum["summary"] != nil {
		t.Fatalf("a busy room shows its scalars instead of its summary: %v", sum)
	}
	if got := stateSummary(t, v, calm)["summary"]; got != "calm play" {
		t.Fatalf("the calm room's summary next to a busy one: %v", got)
	}
	if n := f.svc.Stats().ViewEvaluations - before; n > 2 {
		t.Fatalf("HOLE: the busy room's summary was evaluated: %d view evaluations (the calm room's are 2 at most)", n)
	}
}

// A view link cannot lock a room's signed-in observers out (issue 41
// item 5): view links and observers drew on one read-only budget, so
// reads with the view token that spent it left bob, who observes the
// room, and alice, its owner reading with admin access (a read-only
// principal too), with room_busy. The view link has a budget of its own:
// it is refused once that is spent, and they read on.
func TestAttackViewLinkCannotStarveObservers(t *testing.T) {
	// The members' budget pays for the registrations (each evaluates the
	// walker); the observers' affords two reads, the view link's one.
	f := newFixtureWith(t, substrate.Options{Limits: substrate.Limits{RoomCostPerSecond: 100_000, GateQuantum: -1}}, "alice", "bob")
	ctx := context.Background()
	room := summaryBudgetRoom(t, f, "watched", `"phase " + views.base`, 1)
	if err := f.l.ShareRoom(ctx, "user_alice", room, "user_bob", "observer"); err != nil {
		t.Fatal(err)
	}
	rot, err := f.svc.RotateToken(ctx, substrate.RoomPrincipal(room), room, "view")
	if err != nil {
		t.Fatal(err)
	}
	link, err := f.svc.AuthenticateIn(ctx, room, rot.Token)
	if err != nil {
		t.Fatal(err)
	}
	spent := false
	for range 10 {
		if _, err := f.svc.Context(ctx, link, room, substrate.ContextRequest{}); errs.Is(err, errs.RoomBusy) {
			spent = true
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if !spent {
		t.Fatal("ten view-link reads of a view costing about 58,000 on a budget of 25,000 per second: none refused")
	}
	for _, c := range []struct{ user, scope string }{{"bob", "rooms:" + room + ":read"}, {"alice", "rooms:" + room + ":admin"}} {
		s := f.session(t, c.user, "g-"+c.user, c.scope)
		p, _, err := f.l.Principal(ctx, s, room)
		if err != nil {
			t.Fatal(err)
		}
		if !p.ReadOnly() {
			t.Fatalf("%s's principal is not read-only: the test proves nothing", c.user)
		}
		if _, err := f.svc.Context(ctx, p, room, substrate.ContextRequest{}); err != nil {
			t.Fatalf("HOLE: %s, observing the room, after the view link spent its budget: %v", c.user, err)
		}
	}
}

// secretLab is alice's room lab with bot's secret planted in it
// (plantSecret), shared with bob with the given access.
func (f *fixture) secretLab(t *testing.T, bobAccess string) string {
	t.Helper()
	ctx := context.Background()
	room, err := f.l.CreateRoom(ctx, "user_alice", "lab", "")
	if err != nil {
		t.Fatal(err)
	}
	f.plantSecret(t, room)
	if err := f.l.ShareRoom(ctx, "user_alice", room, "user_bob", bobAccess); err != nil {
		t.Fatal(err)
	}
	return room
}

// embodied embodies s in room (filling role, if given) and returns the
// embodiment with the principal it acts as.
func (f *fixture) embodied(t *testing.T, s *lobby.Session, room, role string) (*lobby.Embodiment, *substrate.Principal) {
	t.Helper()
	ctx := context.Background()
	emb, err := f.l.Embody(ctx, s, room, "", role)
	if err != nil {
		t.Fatalf("embodying %s in %s (role %q): %v", s.Username, room, role, err)
	}
	p, err := f.l.Actor(ctx, s)
	if err != nil {
		t.Fatalf("the actor of %s: %v", s.Username, err)
	}
	return emb, p
}

// writeSelf writes key of p's own scope: something private of its agent
// an attack must not reach.
func (f *fixture) writeSelf(t *testing.T, p *substrate.Principal, room, key, value string) {
	t.Helper()
	if _, err := f.svc.WriteState(context.Background(), p, room, []substrate.Write{{Scope: "self", Key: key, Value: json.RawMessage(value)}}, false); err != nil {
		t.Fatal(err)
	}
}

// registerStandard registers the standard library's action id as p.
func (f *fixture) registerStandard(t *testing.T, p *substrate.Principal, room, id string) {
	t.Helper()
	raw, err := f.svc.SystemHelp("standard_library", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range raw.Content.([]substrate.ActionDef) {
		if a.ID == id {
			if _, err := f.svc.RegisterAction(context.Background(), p, room, a); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("the standard library has no action %q", id)
}

// Restricting may only narrow. A scope reaching past the connection's (a
// wildcard it does not hold, a higher level, create_rooms or shared
// rooms it lacks) once answered scope "" and cost the connection every
// room, room creation and its agent; only a person's consent gave them
// back. Each is refused with the current scope and the way to widen, and
// the session row, the agent and the rooms are as before.
func TestAttackRestrictScopeWidens(t *testing.T) {
	f := newFixture(t, "alice", "bob")
	ctx := context.Background()
	for _, id := range []string{"lab", "side", "shared"} {
		owner := "user_alice"
		if id == "shared" {
			owner = "user_bob"
		}
		if _, err := f.l.CreateRoom(ctx, owner, id, ""); err != nil {
			t.Fatal(err)
		}
	}
	const granted = "rooms:lab:admin rooms:side:read create_rooms shared_rooms:write"
	// The session begins before bob shares his room: it reaches the
	// connection as shared since.
	f.session(t, "alice", "g-alice", granted)
	if err := f.l.ShareRoom(ctx, "user_bob", "shared", "user_alice", "participant"); err != nil {
		t.Fatal(err)
	}
	s := f.session(t, "alice", "g-alice", "")
	if _, err := f.l.Embody(ctx, s, "lab", "", ""); err != nil {
		t.Fatal(err)
	}
	agent := s.AgentID
	before := s.Scope.String()
	for _, ask := range []struct{ scope, beyond string }{
		{"rooms:*:admin", "rooms:*:admin"},
		{"rooms:*:observe", "rooms:*:observe"},
		{"rooms:side:write", "rooms:side:write"},
		{"rooms:lab:admin rooms:shared:admin", "rooms:shared:admin"},
		{"rooms:lab:read create_rooms shared_rooms:write", ""},
	} {
		_, err := f.l.RestrictScope(ctx, s, ask.scope)
		if ask.beyond == "" {
			// Within the scope: it narrows.
			if err != nil {
				t.Fatalf("restrict %q: %v", ask.scope, err)
			}
			if row := f.session(t, "alice", "g-alice", ""); row.Scope.String() != "rooms:lab:read create_rooms shared_rooms:write" {
				t.Fatalf("restrict %q: %q", ask.scope, row.Scope.String())
			}
			continue
		}
		var e *errs.Error
		if !errors.As(err, &e) || e.Code != errs.ScopeDenied {
			t.Fatalf("HOLE: restrict %q widened (or failed otherwise): %v; scope now %q", ask.scope, err, s.Scope.String())
		}
		if e.Details["scope"] != before || !slices.Contains(e.Details["beyond"].([]string), ask.beyond) ||
			!strings.Contains(e.Hint, "consent") {
			t.Fatalf("restrict %q: the refusal does not say the current scope, what is beyond it and how to widen: %+v", ask.scope, e)
		}
		s = f.session(t, "alice", "g-alice", "")
		if got := s.Scope.String(); got != before || s.AgentID != agent || s.RoomID != "lab" || !s.Scope.CreateRooms {
			t.Fatalf("HOLE: a refused restrict %q changed the session: scope %q (was %q), embodied %q in %q", ask.scope, got, before, s.AgentID, s.RoomID)
		}
		for room, want := range map[string]string{"lab": "admin", "side": "read", "shared": "write"} {
			if level, _, err := f.l.Access(ctx, s, room); err != nil || level != want {
				t.Fatalf("HOLE: after a refused restrict %q, %s: %s %v (want %s)", ask.scope, room, level, err, want)
			}
		}
	}
}

// The last owner demotes herself (issue 41, 6): sharing the room with her
// own username as collaborator left it with no owner and no way back.
// Every path that changes a membership keeps one, and two owners changing
// roles at once cannot both leave: a pool of two connections, the pairs
// started together, many rounds.
func TestAttackLastOwnerLeavesNoOwner(t *testing.T) {
	db := pgtest.NewPool(t, 2)
	ctx := context.Background()
	for _, u := range []string{"alice", "bob"} {
		if _, err := db.Exec(ctx, `INSERT INTO smcp_users (id, username, webauthn_handle) VALUES ($1, $2, $3)`, "user_"+u, u, []byte(u)); err != nil {
			t.Fatal(err)
		}
	}
	svc := substrate.New(db, substrate.Options{Features: testFeatures})
	t.Cleanup(svc.Close)
	l := lobby.New(db, svc)
	room, err := l.CreateRoom(ctx, "user_alice", "lab", "")
	if err != nil {
		t.Fatal(err)
	}
	owners := func() []string {
		t.Helper()
		rows, err := db.Query(ctx, `SELECT user_id FROM smcp_user_rooms WHERE room_id = $1 AND access = 'owner' ORDER BY user_id`, room)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for rows.Next() {
			var u string
			_ = rows.Scan(&u)
			out = append(out, u)
		}
		return out
	}
	for _, role := range []string{"collaborator", "participant", "observer"} {
		err := l.ShareRoom(ctx, "user_alice", room, "user_alice", role)
		if e := errs.From(err); e.Code != errs.LastOwner || e.Code.Status() != 409 || !strings.Contains(e.Hint, "owner") || !strings.Contains(e.Hint, "delete the room") {
			t.Fatalf("HOLE: the only owner made herself %s: %v (want last_owner, 409, a hint naming the way out)", role, err)
		}
	}
	if err := l.LeaveRoom(ctx, "user_alice", room); !errs.Is(err, errs.LastOwner) {
		t.Fatalf("the only owner leaving: %v (want last_owner)", err)
	}
	if got := owners(); !slices.Equal(got, []string{"user_alice"}) {
		t.Fatalf("HOLE: after the refusals the owners are %v", got)
	}
	// Keeping the owner role, or being one of two, is no refusal.
	if err := l.ShareRoom(ctx, "user_alice", room, "user_alice", "owner"); err != nil {
		t.Fatal(err)
	}

	// Two owners at once, each way of leaving the room ownerless.
	type move func(who, other string) error
	moves := map[string]move{
		"both demote themselves": func(who, _ string) error { return l.ShareRoom(ctx, who, room, who, "collaborator") },
		"each demotes the other": func(who, other string) error { return l.ShareRoom(ctx, who, room, other, "observer") },
		"both leave":             func(who, _ string) error { return l.LeaveRoom(ctx, who, room) },
		"one leaves, one demotes herself": func(who, _ string) error {
			if who == "user_alice" {
				return l.LeaveRoom(ctx, who, room)
			}
			return l.ShareRoom(ctx, who, room, who, "participant")
		},
	}
	for name, m := range moves {
		for round := range 25 {
			for _, u := range []string{"user_alice", "user_bob"} {
				if err := l.AddMember(ctx, u, room, "owner", "", ""); err != nil {
					t.Fatal(err)
				}
			}
			start := make(chan struct{})
			var wg sync.WaitGroup
			results := make([]error, 2)
			for i, pair := range [][2]string{{"user_alice", "user_bob"}, {"user_bob", "user_alice"}} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					results[i] = m(pair[0], pair[1])
				}()
			}
			close(start)
			wg.Wait()
			if got := owners(); len(got) == 0 {
				t.Fatalf("HOLE: %s, round %d: the room has no owner (results %v)", name, round, results)
			}
			ok := 0
			for _, err := range results {
				switch {
				case err == nil:
					ok++
				case !errs.Is(err, errs.LastOwner) && !errs.Is(err, errs.Forbidden):
					t.Fatalf("%s, round %d: %v (want last_owner, or forbidden for a sharer demoted meanwhile)", name, round, err)
				}
			}
			if ok != 1 {
				t.Fatalf("%s, round %d: %d of the two changes went through, want exactly one (results %v)", name, round, ok, results)
			}
		}
	}
}
