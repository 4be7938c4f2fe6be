package lobby_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The lobby's operations, against PostgreSQL directly (the MCP tests
// exercise them through the tools).

type fixture struct {
	db  *store.DB
	svc *substrate.Service
	l   *lobby.Lobby
}

func newFixture(t *testing.T, users ...string) *fixture {
	t.Helper()
	return newFixtureWith(t, substrate.Options{}, users...)
}

func newFixtureWith(t *testing.T, opt substrate.Options, users ...string) *fixture {
	t.Helper()
	db := pgtest.New(t)
	for _, u := range users {
		if _, err := db.Exec(context.Background(), `INSERT INTO smcp_users (id, username, webauthn_handle) VALUES ($1, $2, $3)`, "user_"+u, u, []byte(u)); err != nil {
			t.Fatal(err)
		}
	}
	if opt.Features == nil {
		opt.Features = testFeatures
	}
	svc := substrate.New(db, opt)
	t.Cleanup(svc.Close)
	return &fixture{db: db, svc: svc, l: lobby.New(db, svc)}
}

func (f *fixture) session(t *testing.T, user, grant, scope string) *lobby.Session {
	t.Helper()
	s, err := f.l.Resolve(context.Background(), lobby.Caller{GrantID: grant, UserID: "user_" + user, Username: user, ClientID: "c", ClientName: "Test Client",
		Scopes: []string{scope}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestEmbodyViewAndDisembody(t *testing.T) {
	f := newFixture(t, "alice", "bob")
	ctx := context.Background()
	room, err := f.l.CreateRoom(ctx, "user_alice", "lab", "Lab")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.l.ShareRoom(ctx, "user_alice", room, "user_bob", "participant"); err != nil {
		t.Fatal(err)
	}
	if err := f.l.ShareRoom(ctx, "user_bob", room, "user_alice", "owner"); !errs.Is(err, errs.Forbidden) {
		t.Fatalf("a participant shared the room: %v", err)
	}
	// A token-created agent holds bob's default id: bob gets the next one.
	admin := substrate.RoomPrincipal(room)
	if _, err := f.svc.Join(ctx, admin, room, substrate.JoinRequest{ID: "bob:test-client", Name: "planted"}); err != nil {
		t.Fatal(err)
	}
	bob := f.session(t, "bob", "g-bob", "rooms:lab:write")
	emb, err := f.l.Embody(ctx, bob, room, "", "")
	if err != nil || emb.Agent != "bob:test-client-2" || !emb.Embodied {
		t.Fatalf("embody: %+v %v", emb, err)
	}
	view, err := f.l.View(ctx, bob)
	if err != nil || len(view.Rooms) != 1 || view.Embodied == nil || view.Embodied.Agent != "bob:test-client-2" {
		t.Fatalf("view: %+v %v", view, err)
	}
	for _, a := range view.Rooms[0].Agents {
		switch a.ID {
		case "bob:test-client-2":
			if !a.Yours || a.Current == nil || !*a.Current {
				t.Fatalf("bob's agent in the view: %+v", a)
			}
		case "bob:test-client":
			if a.Yours {
				t.Fatalf("the planted agent shows as bob's: %+v", a)
			}
		}
	}
	if view.Rooms[0].Access != "write" || view.Rooms[0].Label != "Lab" {
		t.Fatalf("room in view: %+v", view.Rooms[0])
	}
	raw, _ := json.Marshal(view)
	var shape map[string]any
	_ = json.Unmarshal(raw, &shape)
	for _, k := range []string{"user", "rooms", "can_create_rooms", "embodied", "next"} {
		if _, ok := shape[k]; !ok {
			t.Fatalf("view JSON lacks %q: %s", k, raw)
		}
	}
	dis, err := f.l.Disembody(ctx, bob)
	if err != nil || dis.Embodied || dis.Status != "idle" {
		t.Fatalf("disembody: %+v %v", dis, err)
	}
	if _, err := f.l.Disembody(ctx, bob); !errs.Is(err, lobby.NotEmbodied) {
		t.Fatalf("second disembody: %v", err)
	}
}

// The last owner cannot leave; an unknown room is room_not_found; a
// database failure is not disguised as either.
func TestLeaveRoom(t *testing.T) {
	f := newFixture(t, "alice")
	ctx := context.Background()
	room, err := f.l.CreateRoom(ctx, "user_alice", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.l.LeaveRoom(ctx, "user_alice", room); !errs.Is(err, errs.LastOwner) {
		t.Fatalf("last owner leaving: %v", err)
	}
	if err := f.l.LeaveRoom(ctx, "user_alice", "nope"); !errs.Is(err, errs.RoomNotFound) {
		t.Fatalf("leaving an unknown room: %v", err)
	}
	f.db.Close()
	err = f.l.LeaveRoom(ctx, "user_alice", room)
	if err == nil || errs.Is(err, errs.RoomNotFound) || errs.Is(err, errs.Forbidden) {
		t.Fatalf("with the database gone, leave answered %v (a database failure must not read as 'you have no room')", err)
	}
}

// A user's first room is their default; SetDefault moves it, only to a room
// of theirs; with the default room gone, the earliest remaining room is the
// default (and a new room does not take over silently).
func TestDefaultRoom(t *testing.T) {
	f := newFixture(t, "alice", "bob")
	ctx := context.Background()
	defaults := func() (out []string) {
		rooms, err := f.l.UserRooms(ctx, "user_alice")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rooms {
			if r.Default {
				out = append(out, r.ID)
			}
		}
		return out
	}
	for _, id := range []string{"one", "two", "three"} {
		if _, err := f.l.CreateRoom(ctx, "user_alice", id, ""); err != nil {
			t.Fatal(err)
		}
	}
	if d := defaults(); len(d) != 1 || d[0] != "one" {
		t.Fatalf("defaults %v, want [one]", d)
	}
	if err := f.l.SetDefault(ctx, "user_alice", "three"); err != nil {
		t.Fatal(err)
	}
	if d := defaults(); len(d) != 1 || d[0] != "three" {
		t.Fatalf("after SetDefault: %v", d)
	}
	if _, err := f.l.CreateRoom(ctx, "user_bob", "bobs", ""); err != nil {
		t.Fatal(err)
	}
	if err := f.l.SetDefault(ctx, "user_alice", "bobs"); !errs.Is(err, errs.RoomNotFound) {
		t.Fatalf("default on another's room: %v", err)
	}
	if err := f.l.DeleteRoom(ctx, "user_alice", "three"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.CreateRoom(ctx, "user_alice", "four", ""); err != nil {
		t.Fatal(err)
	}
	if d := defaults(); len(d) != 1 || d[0] != "one" {
		t.Fatalf("with the default gone: %v, want [one]", d)
	}
}
