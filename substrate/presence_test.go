package substrate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Any authenticated call by an agent counts as its heartbeat, refreshed at
// most once per HeartbeatEvery.
func TestCallsCountAsHeartbeat(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures, HeartbeatEvery: time.Millisecond})
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

// A deleted room's id is retired: creating a room under it again is
// refused, so nothing that still names the old room (a cached snapshot, a
// lobby membership, a session's focus, a link) can reach a new one.
func TestDeletedRoomIDIsRetired(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures})
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "phoenix"})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := svc.Authenticate(ctx, room.Token)
	if err := svc.DeleteRoom(ctx, p, "phoenix"); err != nil {
		t.Fatal(err)
	}
	_, err = svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "phoenix"})
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != errs.RoomExists || e.Hint == "" {
		t.Fatalf("creating the deleted room's id again: %v", err)
	}
	if _, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "phoenix2"}); err != nil {
		t.Fatal(err)
	}
}

// Expired entries are purged once they have been invisible a while, and
// the room's message count follows.
func TestPurgeExpired(t *testing.T) {
	db := pgtest.New(t)
	svc := substrate.New(db, substrate.Options{Features: testFeatures})
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "tidy"})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := svc.Authenticate(ctx, room.Token)
	timer := &substrate.Timer{MS: 60_000}
	if _, err := svc.WriteState(ctx, p, "tidy", []substrate.Write{
		{Scope: "_shared", Key: "flash", Value: []byte(`1`), Timer: timer},
		{Scope: "_messages", Append: true, Value: []byte(`{"body":"soon gone"}`), Timer: timer},
		{Scope: "_messages", Append: true, Value: []byte(`{"body":"stays"}`)},
		{Scope: "_shared", Key: "keep", Value: []byte(`1`)},
	}, true); err != nil {
		t.Fatal(err)
	}
	if n, err := svc.PurgeExpired(ctx); err != nil || n != 0 {
		t.Fatalf("purged %d live entries (%v)", n, err)
	}
	// Age the timers past expiry plus the minute of grace.
	if _, err := db.Exec(ctx, `UPDATE state SET timer_expires_at = now() - interval '2 minutes' WHERE timer_effect IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	if n, err := svc.PurgeExpired(ctx); err != nil || n != 2 {
		t.Fatalf("purged %d, want 2 (%v)", n, err)
	}
	var rows, count int
	_ = db.QueryRow(ctx, `SELECT (SELECT count(*) FROM state WHERE room_id = 'tidy' AND scope IN ('_shared', '_messages')),
		(SELECT message_count FROM rooms WHERE id = 'tidy')`).Scan(&rows, &count)
	if rows != 2 || count != 1 {
		t.Fatalf("after purge: %d entries, message_count %d; want 2 and 1", rows, count)
	}
}
