package substrate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// A room keeps the newest KeepLogEntries of _messages and _audit in state;
// older ones move to state_archive, and the message count follows.
func TestRetainLogsArchivesOldEntries(t *testing.T) {
	db := pgtest.New(t)
	svc := substrate.New(db, substrate.Options{Features: testFeatures, Limits: substrate.Limits{KeepLogEntries: 100}})
	ctx := context.Background()
	admin := newRoom(t, svc, "long")
	for i := range 150 {
		raw, _ := json.Marshal(map[string]any{"body": i})
		if _, err := svc.Invoke(ctx, admin, "long", "_send_message", raw); err != nil {
			t.Fatal(err)
		}
	}
	moved, err := svc.RetainLogs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var inState, archived, newestArchived, oldestKept int64
	_ = db.QueryRow(ctx, `SELECT count(*), min(sort_key) FROM state WHERE room_id = 'long' AND scope = '_messages'`).Scan(&inState, &oldestKept)
	_ = db.QueryRow(ctx, `SELECT count(*), coalesce(max(sort_key), 0) FROM state_archive WHERE room_id = 'long' AND scope = '_messages'`).Scan(&archived, &newestArchived)
	if inState != 100 || archived != 50 || newestArchived >= oldestKept {
		t.Fatalf("messages: %d kept (oldest %d), %d archived (newest %d); moved %d", inState, oldestKept, archived, newestArchived, moved)
	}
	var audit int64
	_ = db.QueryRow(ctx, `SELECT count(*) FROM state WHERE room_id = 'long' AND scope = '_audit'`).Scan(&audit)
	if audit != 100 {
		t.Fatalf("%d audit entries kept, want 100", audit)
	}
	env, err := svc.Context(ctx, admin, "long", substrate.ContextRequest{Depth: "lean", MessagesLimit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if env.Messages.Count != 100 || len(env.Messages.Recent) != 10 {
		t.Fatalf("messages after archiving: count %d, %d recent", env.Messages.Count, len(env.Messages.Recent))
	}
	if again, err := svc.RetainLogs(ctx); err != nil || again != 0 {
		t.Fatalf("second run moved %d (%v)", again, err)
	}
}

// Archiving a room's messages while the room is deleted finishes both,
// whichever comes first: the archiver must take the room row before the
// rows it moves, as a deletion does, or each waits for the other until
// PostgreSQL aborts one of them as a deadlock.
func TestRetainLogsBesideRoomDeletion(t *testing.T) {
	db := pgtest.New(t)
	svc := substrate.New(db, substrate.Options{Features: testFeatures, Limits: substrate.Limits{KeepLogEntries: 10}})
	ctx := context.Background()
	const rooms = 12
	admins := make([]*substrate.Principal, rooms)
	for i := range rooms {
		id := fmt.Sprintf("doomed%d", i)
		admins[i] = newRoom(t, svc, id)
		// Many messages, written as the server writes appends, quickly.
		if _, err := db.Exec(ctx, `INSERT INTO state (room_id, scope, key, sort_key, value, version, revision, writer, via, created_at, updated_at)
			SELECT $1, '_messages', (1000 + g)::text, 1000 + g, '{"body": "x"}', 1, 1000 + g, '_room', 'direct', now(), now()
			FROM generate_series(1, 20000) g`, id); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, `UPDATE rooms SET seq = 30000, message_count = 20000 WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := svc.RetainLogs(ctx)
		done <- err
	}()
	for i := range rooms {
		if err := svc.DeleteRoom(ctx, admins[i], fmt.Sprintf("doomed%d", i)); err != nil {
			t.Errorf("deleting room %d beside the archiver: %v", i, err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("archiving beside room deletions: %v", err)
	}
}

// A deleted room's archived history goes with it (the archive has no
// foreign key onto rooms).
func TestDeletedRoomTakesItsArchive(t *testing.T) {
	db := pgtest.New(t)
	svc := substrate.New(db, substrate.Options{Features: testFeatures, Limits: substrate.Limits{KeepLogEntries: 10}})
	ctx := context.Background()
	admin := newRoom(t, svc, "ashes")
	for i := range 30 {
		raw, _ := json.Marshal(map[string]any{"body": fmt.Sprint("old ", i)})
		if _, err := svc.Invoke(ctx, admin, "ashes", "_send_message", raw); err != nil {
			t.Fatal(err)
		}
	}
	if moved, err := svc.RetainLogs(ctx); err != nil || moved == 0 {
		t.Fatalf("archived %d (%v)", moved, err)
	}
	if err := svc.DeleteRoom(ctx, admin, "ashes"); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM state_archive WHERE room_id = 'ashes'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d archived entries outlive their room (%v)", left, err)
	}
}
