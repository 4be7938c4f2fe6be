package substrate_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// A room keeps the newest KeepLogEntries of _messages and _audit in state;
// older ones move to state_archive, and the message count follows.
func TestRetainLogsArchivesOldEntries(t *testing.T) {
	db := pgtest.New(t)
	svc := substrate.New(db, substrate.Options{Limits: substrate.Limits{KeepLogEntries: 100}})
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
