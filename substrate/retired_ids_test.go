package substrate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/trajectory"
)

// a room deleted before this upgrade (DeleteRoom then left its
// archived log entries behind, and retired nothing) leaves orphan
// state_archive rows that migration 0012 neither deletes nor retires. A
// room created later under that id (ids are chosen by their creators)
// reads the old room's archived messages as its own.
func TestOrphanArchiveOfRoomDeletedBeforeUpgrade(t *testing.T) {
	db := pgtest.New(t)
	svc := substrate.New(db, substrate.Options{Features: testFeatures, Limits: substrate.Limits{KeepLogEntries: 10}})
	ctx := context.Background()
	admin := newRoom(t, svc, "legacy")
	for i := range 30 {
		raw, _ := json.Marshal(map[string]any{"body": fmt.Sprint("private note ", i)})
		if _, err := svc.Invoke(ctx, admin, "legacy", "_send_message", raw); err != nil {
			t.Fatal(err)
		}
	}
	if moved, err := svc.RetainLogs(ctx); err != nil || moved == 0 {
		t.Fatalf("archived %d (%v)", moved, err)
	}
	// As DeleteRoom did before e43eea8/bf27a63 (what the upgrade finds).
	if _, err := db.Exec(ctx, `DELETE FROM rooms WHERE id = 'legacy'`); err != nil {
		t.Fatal(err)
	}
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "legacy"})
	if err != nil {
		return // refused: the id is treated as retired
	}
	newAdmin, err := svc.Authenticate(ctx, room.Token)
	if err != nil {
		t.Fatal(err)
	}
	var leaked []string
	err = trajectory.Stream(ctx, svc, newAdmin, "legacy", trajectory.Query{}, func(st *trajectory.Step) error {
		b, _ := json.Marshal(st)
		if strings.Contains(string(b), "private note") {
			leaked = append(leaked, string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(leaked) > 0 {
		t.Fatalf("HOLE: a new room under a reused id reads %d archived entries of the room deleted before the upgrade, e.g. %s", len(leaked), leaked[0])
	}
}
