package substrate_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// A context read that marks messages read answers without writing: not
// the room lock, not the reader's agents row. Another transaction holds
// both locks here; the reads still answer, the second already counting
// what the first showed as read, and the marks land once the locks go.
func TestContextReadMarksOffTheRequestPath(t *testing.T) {
	db := pgtest.NewPool(t, 4)
	svc := substrate.New(db, substrate.Options{Features: testFeatures})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "marks"})
	if err != nil {
		t.Fatal(err)
	}
	pr, _ := svc.Authenticate(ctx, room.Token)
	j, err := svc.Join(ctx, pr, "marks", substrate.JoinRequest{ID: "alice", Name: "Alice"})
	if err != nil {
		t.Fatal(err)
	}
	alice, _ := svc.Authenticate(ctx, j.Token)
	for range 3 {
		if _, err := svc.Invoke(ctx, pr, "marks", "_send_message", json.RawMessage(`{"body":"hello"}`)); err != nil {
			t.Fatal(err)
		}
	}
	lctx, tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(lctx))
	if _, err := tx.Exec(lctx, `SELECT 1 FROM rooms WHERE id = 'marks' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(lctx, `SELECT 1 FROM agents WHERE room_id = 'marks' AND id = 'alice' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	q := substrate.ContextRequest{Depth: "lean", MessagesLimit: 100}
	for i, want := range []int64{3, 0} {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		env, err := svc.Context(rctx, alice, "marks", q)
		cancel()
		if err != nil {
			t.Fatalf("read %d with the room and the reader's row locked: %v", i+1, err)
		}
		if env.Messages.Unread != want {
			t.Errorf("read %d: unread %d, want %d", i+1, env.Messages.Unread, want)
		}
	}
	_ = tx.Rollback(lctx)
	var seen, reads int64
	pgtest.Eventually(t, 5*time.Second, func() bool {
		if err := db.QueryRow(ctx, `SELECT last_seen_seq, context_reads FROM agents WHERE room_id = 'marks' AND id = 'alice'`).Scan(&seen, &reads); err != nil {
			t.Fatal(err)
		}
		return seen > 0 && reads == 2
	}, "the marks written (last_seen_seq > 0, context_reads 2; [seen, reads] = %v)", func() any { return []int64{seen, reads} })
}
