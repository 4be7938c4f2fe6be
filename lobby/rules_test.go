package lobby_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/roomview"
)

// Tests of the lobby rules of issue 11 item 6. The attacks on them are in
// attacks_test.go.

func (f *fixture) agentStatus(t *testing.T, room, agent string) roomview.Presence {
	t.Helper()
	sums, err := roomview.Summaries(context.Background(), f.svc, []string{room})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range sums[room].Agents {
		if a.ID == agent {
			return a
		}
	}
	t.Fatalf("no agent %q in %q", agent, room)
	return roomview.Presence{}
}

// Creating a room while embodied steps out of the old agent (idle, like
// sync_disembody) and focuses the new room as an observer, so the next
// call works instead of failing with "agent … is not in room".
func TestCreateRoomWhileEmbodiedObservesTheNewRoom(t *testing.T) {
	f := newFixture(t, "alice")
	ctx := context.Background()
	if _, err := f.l.CreateRoom(ctx, "user_alice", "old", ""); err != nil {
		t.Fatal(err)
	}
	s := f.session(t, "alice", "g1", "rooms:old:admin create_rooms")
	if _, err := f.l.Embody(ctx, s, "old", "", ""); err != nil {
		t.Fatal(err)
	}
	created, err := f.l.CreateRoomFor(ctx, s, "fresh", "")
	if err != nil {
		t.Fatal(err)
	}
	// The next call, on a fresh resolve of the session row (stateless).
	s = f.session(t, "alice", "g1", "")
	if s.RoomID != "fresh" || s.AgentID != "" {
		t.Fatalf("session after creating: room %q agent %q", s.RoomID, s.AgentID)
	}
	p, level, err := f.l.Principal(ctx, s, "fresh")
	if err != nil || p.Kind != substrate.KindView || level != "admin" {
		t.Fatalf("reading the new room: %+v %s %v", p, level, err)
	}
	if _, err := f.l.Actor(ctx, s); !errs.Is(err, lobby.NotEmbodied) {
		t.Fatalf("acting after creating: %v (want not_embodied with the sync_embody call)", err)
	}
	if created.Left == nil || created.Left.Agent != "alice:test-client" || created.Left.Room != "old" {
		t.Fatalf("created %+v: it does not say which agent it left", created)
	}
	if a := f.agentStatus(t, "old", "alice:test-client"); a.Status != "idle" {
		t.Fatalf("the agent left behind is %q, want idle", a.Status)
	}
	if _, err := f.l.Embody(ctx, s, "fresh", "", ""); err != nil {
		t.Fatalf("embodying in the new room: %v", err)
	}
}

// plantSecret makes a token agent "bot" with a private value in its scope.
func (f *fixture) plantSecret(t *testing.T, room string) {
	t.Helper()
	ctx := context.Background()
	admin := substrate.RoomPrincipal(room)
	if _, err := f.svc.Join(ctx, admin, room, substrate.JoinRequest{ID: "bot", Name: "Bot"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.WriteState(ctx, admin, room, []substrate.Write{{Scope: "bot", Key: "secret", Value: json.RawMessage(`"s3cret"`)}}, false); err != nil {
		t.Fatal(err)
	}
}

// An owner reads the whole room while observing (admin level); embodied,
// their reads (context, state, eval) must cover at least that.
func TestOwnerEmbodiedReadsWhatObservingRead(t *testing.T) {
	f := newFixture(t, "alice")
	ctx := context.Background()
	room, err := f.l.CreateRoom(ctx, "user_alice", "lab", "")
	if err != nil {
		t.Fatal(err)
	}
	f.plantSecret(t, room)
	s := f.session(t, "alice", "g1", "rooms:lab:admin")
	reads := func(when string) {
		t.Helper()
		p, _, err := f.l.Principal(ctx, s, room)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.ReadState(ctx, p, room, substrate.ReadQuery{Scope: "bot", Key: "secret"}); err != nil {
			t.Fatalf("%s, the owner cannot read bot's scope: %v", when, err)
		}
		env, err := f.svc.Context(ctx, p, room, substrate.ContextRequest{Depth: "lean"})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := env.State["bot"]; !ok {
			t.Fatalf("%s, the owner's context lacks bot's scope: %v", when, env.State)
		}
		ev, err := f.svc.Eval(ctx, p, room, `state.bot.secret`, nil)
		if err != nil || ev.Value != "s3cret" {
			t.Fatalf("%s, the owner's eval: %+v %v", when, ev, err)
		}
	}
	reads("observing")
	if _, err := f.l.Embody(ctx, s, room, "", ""); err != nil {
		t.Fatal(err)
	}
	reads("embodied")
}

// Presence lapses: an agent unseen for IdleAfter shows idle with
// idle_for_s in the lobby (and the rooms the consent screen lists), with a
// relative last-seen time and the client it was embodied through.
func TestLobbyShowsLapsedPresence(t *testing.T) {
	// IdleAfter is long enough for the reads of the fresh embodiment to
	// come first on a loaded machine (with 1 s a stall there showed it
	// idle already, as if the lobby were wrong).
	const idleAfter = 3 * time.Second
	f := newFixtureWith(t, substrate.Options{IdleAfter: idleAfter, HeartbeatEvery: 100 * time.Millisecond}, "alice")
	ctx := context.Background()
	room, err := f.l.CreateRoom(ctx, "user_alice", "lab", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Join(ctx, substrate.RoomPrincipal(room), room, substrate.JoinRequest{ID: "bot", Name: "Bot"}); err != nil {
		t.Fatal(err)
	}
	s := f.session(t, "alice", "g1", "rooms:lab:admin")
	embodying := time.Now()
	if _, err := f.l.Embody(ctx, s, room, "", ""); err != nil {
		t.Fatal(err)
	}
	embodied := time.Now()
	agent := func(id string) lobby.ViewAgent {
		t.Helper()
		view, err := f.l.View(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range view.Rooms[0].Agents {
			if a.ID == id {
				return a
			}
		}
		t.Fatalf("no agent %q in the lobby", id)
		return lobby.ViewAgent{}
	}
	a := agent("alice:test-client")
	if a.Status != "active" || a.IdleForS != nil || a.LastSeen != "just now" || a.Client != "Test Client" {
		t.Fatalf("a fresh embodiment in the lobby: %+v", a)
	}
	if b := agent("bot"); b.Client != "" {
		t.Fatalf("a token agent shows a client: %+v", b)
	}
	if time.Since(embodying) >= idleAfter {
		t.Fatalf("the reads of the fresh embodiment took longer than IdleAfter (%v): too slow a machine for this test", idleAfter)
	}
	// Stays: IdleAfter passing on the real clock is what makes the agent idle.
	time.Sleep(time.Until(embodied.Add(idleAfter + 500*time.Millisecond)))
	a = agent("alice:test-client")
	if a.Status != "idle" || a.IdleForS == nil || *a.IdleForS < 1 || a.Client != "Test Client" {
		t.Fatalf("an agent unseen past IdleAfter: %+v", a)
	}
	raw, _ := json.Marshal(a)
	for _, k := range []string{`"idle_for_s":`, `"last_seen":`, `"client":"Test Client"`} {
		if !strings.Contains(string(raw), k) {
			t.Fatalf("lobby agent JSON lacks %s: %s", k, raw)
		}
	}
	rooms, err := f.l.UserRooms(ctx, "user_alice")
	if err != nil {
		t.Fatal(err)
	}
	for _, ra := range rooms[0].Agents {
		if ra.Status != "idle" || ra.IdleForS == nil {
			t.Fatalf("the consent screen's list shows %q as %+v", ra.ID, ra)
		}
	}
	// A call as the agent is a sighting: it is active again.
	if _, err := f.l.Actor(ctx, s); err != nil {
		t.Fatal(err)
	}
	if a := agent("alice:test-client"); a.Status != "active" || a.IdleForS != nil {
		t.Fatalf("after a call: %+v", a)
	}
}

// reason is the reason detail of a room_not_in_scope or forbidden error.
func reason(t *testing.T, err error, code errs.Code) (string, string) {
	t.Helper()
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("want %s, got %v", code, err)
	}
	r, _ := e.Details["reason"].(string)
	return r, e.Hint
}

// A room shared with a user reaches their open sessions whose consent
// allowed new shared rooms, at the lesser of that level and their role;
// until it is reachable, room_not_in_scope says which case it is.
func TestSharedRoomReachesOpenSession(t *testing.T) {
	f := newFixture(t, "alice", "bob")
	ctx := context.Background()
	if _, err := f.l.CreateRoom(ctx, "user_alice", "lab", ""); err != nil {
		t.Fatal(err)
	}
	open := f.session(t, "bob", "g-open", "shared_rooms:write")
	closed := f.session(t, "bob", "g-closed", "")
	_, _, err := f.l.Access(ctx, open, "lab")
	if r, hint := reason(t, err, lobby.RoomNotInScope); r != "not_shared" || !strings.Contains(hint, "ask its owner") || !strings.Contains(hint, "at once") {
		t.Fatalf("before sharing: %s / %s", r, hint)
	}
	_, _, err = f.l.Access(ctx, closed, "lab")
	if r, hint := reason(t, err, lobby.RoomNotInScope); r != "not_shared" || !strings.Contains(hint, "reconnects") {
		t.Fatalf("before sharing, no shared rooms: %s / %s", r, hint)
	}

	if err := f.l.ShareRoom(ctx, "user_alice", "lab", "user_bob", "participant"); err != nil {
		t.Fatal(err)
	}
	// The next call of each open session (a fresh resolve of its row).
	open = f.session(t, "bob", "g-open", "")
	closed = f.session(t, "bob", "g-closed", "")
	if level, role, err := f.l.Access(ctx, open, "lab"); err != nil || level != "write" || role != "participant" {
		t.Fatalf("shared as participant, consent allowed write: %s %s %v", level, role, err)
	}
	view, err := f.l.View(ctx, open)
	if err != nil || len(view.Rooms) != 1 || view.Rooms[0].Room != "lab" || view.Rooms[0].Access != "write" || !view.Rooms[0].SharedSince {
		t.Fatalf("the lobby after sharing: %+v %v", view, err)
	}
	if _, err := f.l.Embody(ctx, open, "lab", "", ""); err != nil {
		t.Fatalf("embodying in the shared room: %v", err)
	}
	_, _, err = f.l.Access(ctx, closed, "lab")
	if r, hint := reason(t, err, lobby.RoomNotInScope); r != "shared_not_allowed" || !strings.Contains(hint, "new rooms shared with me") {
		t.Fatalf("shared, consent without shared rooms: %s / %s", r, hint)
	}
	if v, _ := f.l.View(ctx, closed); len(v.Rooms) != 0 {
		t.Fatalf("the lobby of a session without shared rooms shows %+v", v.Rooms)
	}

	// A session made after the share, which did not tick the room.
	later := f.session(t, "bob", "g-later", "shared_rooms:write")
	_, _, err = f.l.Access(ctx, later, "lab")
	if r, hint := reason(t, err, lobby.RoomNotInScope); r != "not_granted" || !strings.Contains(hint, "ticks lab") {
		t.Fatalf("shared before the connection, not ticked: %s / %s", r, hint)
	}

	// A role change reaches the session too, capped by the new role.
	if err := f.l.ShareRoom(ctx, "user_alice", "lab", "user_bob", "observer"); err != nil {
		t.Fatal(err)
	}
	later = f.session(t, "bob", "g-later", "")
	if level, _, err := f.l.Access(ctx, later, "lab"); err != nil || level != "read" {
		t.Fatalf("role changed to observer: %s %v", level, err)
	}
	_, err = f.l.Embody(ctx, later, "lab", "", "")
	if r, hint := reason(t, err, errs.Forbidden); r != "role_below" || !strings.Contains(hint, "participant") {
		t.Fatalf("embodying as an observer: %s / %s", r, hint)
	}

	// Revoked stays revoked, even when shared again.
	if _, err := f.l.RevokeAccess(ctx, later, "lab"); err != nil {
		t.Fatal(err)
	}
	if err := f.l.ShareRoom(ctx, "user_alice", "lab", "user_bob", "collaborator"); err != nil {
		t.Fatal(err)
	}
	later = f.session(t, "bob", "g-later", "")
	_, _, err = f.l.Access(ctx, later, "lab")
	if r, hint := reason(t, err, lobby.RoomNotInScope); r != "revoked" || !strings.Contains(hint, "reconnect") {
		t.Fatalf("after revoking: %s / %s", r, hint)
	}
}

// The consented level caps a shared room: observe stays observe.
func TestSharedRoomCappedByConsentedLevel(t *testing.T) {
	f := newFixture(t, "alice", "bob")
	ctx := context.Background()
	if _, err := f.l.CreateRoom(ctx, "user_alice", "lab", ""); err != nil {
		t.Fatal(err)
	}
	f.session(t, "bob", "g", "shared_rooms:observe") // the connection, made before the share
	if err := f.l.ShareRoom(ctx, "user_alice", "lab", "user_bob", "collaborator"); err != nil {
		t.Fatal(err)
	}
	s := f.session(t, "bob", "g", "")
	if level, _, err := f.l.Access(ctx, s, "lab"); err != nil || level != "observe" {
		t.Fatalf("consent allowed observe: %s %v", level, err)
	}
	_, err := f.l.Embody(ctx, s, "lab", "", "")
	if r, hint := reason(t, err, errs.Forbidden); r != "level_below" || !strings.Contains(hint, "new rooms shared with me") {
		t.Fatalf("embodying above the consented level: %s / %s", r, hint)
	}
}

// guild is a room of alice's with roles defined, shared with the given
// users as participants.
func (f *fixture) guild(t *testing.T, roles string, users ...string) string {
	t.Helper()
	ctx := context.Background()
	room, err := f.l.CreateRoom(ctx, "user_alice", "guild", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.WriteState(ctx, substrate.RoomPrincipal(room), room, []substrate.Write{{Scope: "_shared", Key: "roles", Value: json.RawMessage(roles)}}, false); err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		if err := f.l.ShareRoom(ctx, "user_alice", room, "user_"+u, "participant"); err != nil {
			t.Fatal(err)
		}
	}
	return room
}

// Embodying a role makes or reuses the agent named for the role; the
// next user to fill the vacated role embodies that same agent with its
// scope, and the room's _audit log records who drove it before.
func TestRoleAgentPassesToTheNextOccupant(t *testing.T) {
	f := newFixture(t, "alice", "bob", "carol")
	ctx := context.Background()
	room := f.guild(t, `{"researcher": {"description": "finds sources", "filled_by": null}}`, "bob", "carol")
	bob := f.session(t, "bob", "g-bob", "rooms:guild:write")
	emb, err := f.l.Embody(ctx, bob, room, "", "researcher")
	if err != nil || emb.Agent != "researcher" || emb.Role != "researcher" || emb.TakenOver {
		t.Fatalf("bob fills researcher: %+v %v", emb, err)
	}
	p, err := f.l.Actor(ctx, bob)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.WriteState(ctx, p, room, []substrate.Write{{Scope: "self", Key: "notes", Value: json.RawMessage(`"three papers"`)}}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.Disembody(ctx, bob); err != nil {
		t.Fatal(err)
	}
	carol := f.session(t, "carol", "g-carol", "rooms:guild:write")
	emb, err = f.l.Embody(ctx, carol, room, "", "researcher")
	if err != nil || emb.Agent != "researcher" || !emb.TakenOver {
		t.Fatalf("carol fills the vacated role: %+v %v", emb, err)
	}
	p, err = f.l.Actor(ctx, carol)
	if err != nil || p.AgentID != "researcher" {
		t.Fatalf("carol's authority: %+v %v", p, err)
	}
	read, err := f.svc.ReadState(ctx, p, room, substrate.ReadQuery{Scope: "self", Key: "notes"})
	if err != nil || string(read.Entries[0].Value) != `"three papers"` {
		t.Fatalf("carol does not inherit the role's scope: %+v %v", read, err)
	}
	if owner, _, _ := f.svc.AgentOwner(ctx, room, "researcher"); owner != "user_carol" {
		t.Fatalf("the role's agent belongs to %q", owner)
	}
	audit, err := f.svc.ReadState(ctx, substrate.RoomPrincipal(room), room, substrate.ReadQuery{Scope: "_audit", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, e := range audit.Entries {
		var a map[string]any
		_ = json.Unmarshal(e.Value, &a)
		if a["kind"] == "agent_embody" && a["agent"] == "researcher" && a["user"] == "user_carol" &&
			a["previous_user"] == "user_bob" && a["previous_name"] == "bob" && a["takeover"] == true {
			found = true
		}
	}
	if !found {
		t.Fatalf("no _audit entry records bob as the previous occupant: %+v", audit.Entries)
	}
	view, err := f.l.View(ctx, carol)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range view.Rooms[0].Roles {
		if r.ID == "researcher" && r.FilledBy != "researcher" {
			t.Fatalf("the lobby's role: %+v", r)
		}
	}
}

// A deleted room leaves nothing behind in the lobby, whichever way it was
// deleted, and its id never names another room: a membership or a
// session's focus that outlived it (the lobby's tables hold no foreign keys
// onto rooms, so that they can be reference tables of a distributed
// database) cannot reach a room someone creates later under that id.
func TestDeletedRoomIsForgottenAndItsIDRetired(t *testing.T) {
	f := newFixture(t, "alice", "mallory")
	ctx := context.Background()
	for _, id := range []string{"viarest", "vialobby"} {
		if _, err := f.l.CreateRoom(ctx, "user_alice", id, ""); err != nil {
			t.Fatal(err)
		}
	}
	s := f.session(t, "alice", "g1", "rooms:vialobby:admin rooms:viarest:admin create_rooms")
	if _, err := f.l.Embody(ctx, s, "vialobby", "", ""); err != nil {
		t.Fatal(err)
	}
	if err := f.l.DeleteRoom(ctx, "user_alice", "vialobby"); err != nil {
		t.Fatal(err)
	}
	if s = f.session(t, "alice", "g1", ""); s.RoomID != "" || s.AgentID != "" {
		t.Fatalf("the session still points at the deleted room: room %q agent %q", s.RoomID, s.AgentID)
	}
	// Deleted by the substrate directly (an operator, or any path but the
	// lobby's): the lobby learns it when it next lists the user's rooms.
	if err := f.svc.DeleteRoom(ctx, substrate.RoomPrincipal("viarest"), "viarest"); err != nil {
		t.Fatal(err)
	}
	rooms, err := f.l.UserRooms(ctx, "user_alice")
	if err != nil || len(rooms) != 0 {
		t.Fatalf("alice's rooms after both deletions: %+v %v", rooms, err)
	}
	var left int
	if err := f.db.QueryRow(ctx, `SELECT count(*) FROM smcp_user_rooms WHERE room_id IN ('viarest', 'vialobby')`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d memberships of deleted rooms left (%v)", left, err)
	}
	for _, id := range []string{"viarest", "vialobby"} {
		if _, err := f.l.CreateRoom(ctx, "user_mallory", id, ""); !errs.Is(err, errs.RoomExists) {
			t.Fatalf("mallory created a room under the deleted %q: %v", id, err)
		}
	}
}
