package substrate

import (
	"context"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// Each reader of a shared presence read gets rows of its own: the read
// marks are laid over them per read.
func TestPresenceReadsAreEachReadersOwn(t *testing.T) {
	db := pgtest.NewPool(t, 2)
	s := New(db, Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	room, err := s.CreateRoom(ctx, CreateRoomRequest{ID: "presence-own"})
	if err != nil {
		t.Fatal(err)
	}
	pr, _ := s.Authenticate(ctx, room.Token)
	if _, err := s.Join(ctx, pr, "presence-own", JoinRequest{ID: "a", Name: "A"}); err != nil {
		t.Fatal(err)
	}
	out, err := newPresenceReads(db).Run(ctx, "presence-own", make([]struct{}, 2))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || len(out[0].agents) != 1 || out[0].agents[0].ID != "a" {
		t.Fatalf("presence read: %+v", out)
	}
	out[0].agents[0].ContextReads = 99
	if out[1].agents[0].ContextReads == 99 {
		t.Fatal("two readers share the rows of one presence read")
	}
	if _, err := newPresenceReads(db).Run(ctx, "no-such-room", make([]struct{}, 1)); err == nil {
		t.Fatal("a room that does not exist read without error")
	}
}
