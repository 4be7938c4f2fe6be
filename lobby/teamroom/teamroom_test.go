package teamroom_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/lobby/teamroom"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/loom"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The room has the shape its package comment promises, read back through
// the product's own reads.
func TestBuildMakesTheRoomOfRealSize(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	for _, u := range []string{"maya", "raj"} {
		if _, err := db.Exec(ctx, `INSERT INTO smcp_users (id, username, webauthn_handle) VALUES ($1, $2, $3)`, "user_"+u, u, []byte(u)); err != nil {
			t.Fatal(err)
		}
	}
	svc := substrate.New(db, substrate.Options{Features: testFeatures, Wait: substrate.WaitOptions{Recheck: time.Hour}})
	t.Cleanup(svc.Close)
	lob := lobby.New(db, svc)
	start := time.Now()
	room, err := teamroom.Build(ctx, svc, lob, teamroom.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built in %v", time.Since(start))
	admin := substrate.RoomPrincipal(room.ID)
	agents, err := svc.ListAgents(ctx, admin, room.ID)
	if err != nil || len(agents) != teamroom.Agents {
		t.Errorf("%d agents (%v), want %d", len(agents), err, teamroom.Agents)
	}
	actions, err := svc.ListActions(ctx, admin, room.ID)
	own := 0
	for _, a := range actions {
		if a.ID[0] != '_' {
			own++
		}
	}
	if err != nil || own != teamroom.Actions {
		t.Errorf("%d actions (%v), want %d", own, err, teamroom.Actions)
	}
	views, err := svc.ListViews(ctx, admin, room.ID)
	hinted := 0
	for _, v := range views {
		if len(v.Render) > 0 {
			hinted++
		}
	}
	if err != nil || len(views) != teamroom.Views || hinted != teamroom.Surfaces {
		t.Errorf("%d views, %d with render hints (%v), want %d and %d", len(views), hinted, err, teamroom.Views, teamroom.Surfaces)
	}
	for _, v := range views {
		if v.ID == "task_table" {
			if rows, _ := v.Value.([]any); len(rows) != teamroom.Tasks {
				t.Errorf("task_table has %d rows, want %d", len(rows), teamroom.Tasks)
			}
		}
		if m, ok := v.Value.(map[string]any); ok && m["_error"] != nil {
			t.Errorf("view %s fails: %v", v.ID, m["_error"])
		}
	}
	threads, err := svc.ReadState(ctx, admin, room.ID, substrate.ReadQuery{Scope: substrate.ScopeThreads})
	if err != nil {
		t.Fatal(err)
	}
	var sent int64
	for _, e := range threads.Entries {
		var th substrate.ThreadRecord
		if err := json.Unmarshal(e.Value, &th); err != nil {
			t.Fatal(err)
		}
		sent += th.Count
	}
	if len(threads.Entries) != teamroom.ThreadsN || sent != teamroom.Messages {
		t.Errorf("%d threads holding %d messages, want %d and %d", len(threads.Entries), sent, teamroom.ThreadsN, teamroom.Messages)
	}
	// The log: the messages and the invocations' entries.
	logged := 0
	for after := int64(0); ; {
		page, err := svc.ReadState(ctx, admin, room.ID, substrate.ReadQuery{Scope: substrate.ScopeMessages, After: after, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Entries {
			if e.SortKey != nil {
				logged++
				after = *e.SortKey
			}
		}
		if !page.More {
			break
		}
	}
	if logged != teamroom.Messages+teamroom.Invocations {
		t.Errorf("_messages holds %d entries, want %d", logged, teamroom.Messages+teamroom.Invocations)
	}
	// The loom: every node of both trees, by people and the model.
	lm := loom.Of(svc)
	nodes, people, models := 0, map[string]bool{}, 0
	for tree := 1; tree <= 2; tree++ {
		for id := 1; ; id++ {
			res, err := lm.Run(ctx, admin, room.ID, fmt.Sprintf("→ view tree:%d %d", tree, id))
			if errs.Is(err, errs.NotFound) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Errors > 0 || len(res.Steps) == 0 || len(res.Steps[0].Nodes) == 0 {
				break
			}
			nodes++
			if n := res.Steps[0].Nodes[0]; n.Model {
				models++
			} else {
				people[n.By] = true
			}
		}
	}
	if nodes != teamroom.LoomNodes || len(people) != 2 || models == 0 {
		t.Errorf("the loom has %d nodes, by %d people (%v) and %d by a model; want %d, 2 and some", nodes, len(people), people, models, teamroom.LoomNodes)
	}
}
