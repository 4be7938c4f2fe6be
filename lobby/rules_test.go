package lobby_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Tests of the lobby rules of issue 11 item 6. The attacks on them are in
// attacks_test.go.

func (f *fixture) agentStatus(t *testing.T, room, agent string) substrate.Presence {
	t.Helper()
	sums, err := f.svc.RoomSummaries(context.Background(), []string{room})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range sums[room].Agents {
		if a.ID == agent {
			return a
		}
	}
	t.Fatalf("no agent %q in %q", agent, room)
	return substrate.Presence{}
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
	f := newFixtureWith(t, substrate.Options{IdleAfter: time.Second, HeartbeatEvery: 100 * time.Millisecond}, "alice")
	ctx := context.Background()
	room, err := f.l.CreateRoom(ctx, "user_alice", "lab", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Join(ctx, substrate.RoomPrincipal(room), room, substrate.JoinRequest{ID: "bot", Name: "Bot"}); err != nil {
		t.Fatal(err)
	}
	s := f.session(t, "alice", "g1", "rooms:lab:admin")
	if _, err := f.l.Embody(ctx, s, room, "", ""); err != nil {
		t.Fatal(err)
	}
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
	time.Sleep(1500 * time.Millisecond)
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
