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

// A room deleted and created again under the same id never shows the old
// room's cached state, though its seq starts over.
func TestRecreatedRoomIsFresh(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{})
	ctx := context.Background()
	for i, want := range []string{"old", "new"} {
		room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "phoenix"})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := svc.Authenticate(ctx, room.Token)
		if i == 0 {
			if _, err := svc.WriteState(ctx, p, "phoenix", []substrate.Write{{Scope: "_shared", Key: "era", Value: []byte(`"old"`)}}, false); err != nil {
				t.Fatal(err)
			}
		} else {
			// Same seq as the old room had when it was cached.
			if _, err := svc.WriteState(ctx, p, "phoenix", []substrate.Write{{Scope: "_shared", Key: "other", Value: []byte(`1`)}}, false); err != nil {
				t.Fatal(err)
			}
		}
		v, err := svc.Eval(ctx, p, "phoenix", `"era" in state._shared ? state._shared.era : "new"`, nil)
		if err != nil {
			t.Fatal(err)
		}
		if v.Value != want {
			t.Fatalf("incarnation %d sees era %v", i, v.Value)
		}
		if i == 0 {
			if err := svc.DeleteRoom(ctx, p, "phoenix"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond) // a distinct created_at
		}
	}
}

// Expired entries are purged once they have been invisible a while, and
// the room's message count follows.
func TestPurgeExpired(t *testing.T) {
	db := pgtest.New(t)
	svc := substrate.New(db, substrate.Options{})
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
