package loom_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// BenchmarkLoom measures one command's latency on trees of 1,000 and
// 100,000 nodes (go test ./substrate/... -run '^$' -bench Loom). The tree
// is a binary tree (node i's parent is i/2, depth ~17) written in bulk with
// SQL in the loom's layout; the commands run as an agent, so each is a
// mutation with its trace line. Each command also reports the size of
// its result in bytes and estimated tokens. Context is the room's context read, which
// the tree's nodes (append entries, outside the snapshot) do not slow.
func BenchmarkLoom(b *testing.B) {
	for _, size := range []int{1_000, 100_000} {
		db := pgtest.New(b)
		svc := substrate.New(db, substrate.Options{Features: testFeatures})
		ctx := context.Background()
		room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "loom"})
		if err != nil {
			b.Fatal(err)
		}
		admin, _ := svc.Authenticate(ctx, room.Token)
		if _, err := loom.Of(svc).Run(ctx, admin, "loom", `→ new tree "bench" "root"`); err != nil {
			b.Fatal(err)
		}
		j, err := svc.Join(ctx, admin, "loom", substrate.JoinRequest{ID: "w", Name: "w"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := loom.Of(svc).Run(ctx, admin, "loom", "→ permit w loom_write"); err != nil {
			b.Fatal(err)
		}
		w, _ := svc.Authenticate(ctx, j.Token)
		for _, sql := range []string{
			`INSERT INTO state (room_id, scope, key, sort_key, value, version, revision, writer)
			 SELECT 'loom', '_loom.1', 'n:' || i, i, jsonb_build_object('id', i, 'parent', i / 2,
			   'content', 'node ' || i || ' — a line of prose long enough to look like a paragraph of a story being written together',
			   'by', 'bench', 'model', i % 3 = 0, 'edge', 'primary', 'branch', CASE WHEN i % 2 = 0 THEN '1' ELSE (i / 2) || '.2' END,
			   'depth', floor(log(2, i))::int, 'k', i % 2 + 1, 'created_at', now()), 1, 1, 'bench'
			 FROM generate_series(2, $1::int) i`,
			`INSERT INTO state (room_id, scope, key, sort_key, value, version, revision, writer)
			 SELECT 'loom', '_loom.1', 'c:' || (i / 2) || ':' || (i % 2 + 1), i, jsonb_build_object('id', i), 1, 1, 'bench'
			 FROM generate_series(2, $1::int) i`,
			`UPDATE state SET value = jsonb_set(value, '{next}', to_jsonb($1::int + 1)) WHERE room_id = 'loom' AND scope = '_loom' AND key = 'tree:1'`,
			`ANALYZE state`,
		} {
			var args []any
			if sql != "ANALYZE state" {
				args = append(args, size)
			}
			if _, err := db.Exec(ctx, sql, args...); err != nil {
				b.Fatal(err)
			}
		}
		deep := size - 1 // a leaf, depth ~log2(size)
		for _, c := range []struct{ name, cmd string }{
			{"view", fmt.Sprintf("→ view %d", deep)},
			{"list", fmt.Sprintf("→ list %d continuations", deep/2)},
			{"tree", fmt.Sprintf("→ tree from:%d depth:3", deep/16)},
			{"prose", fmt.Sprintf("→ view branch:%d as:prose", deep)},
			{"summary", "→ tree summary"},
			{"annotate", fmt.Sprintf(`→ annotate %d "a note"`, deep)},
		} {
			b.Run(fmt.Sprintf("nodes=%d/%s", size, c.name), func(b *testing.B) {
				var res *loom.Result
				for b.Loop() {
					if res, err = loom.Of(svc).Run(ctx, w, "loom", c.cmd); err != nil {
						b.Fatal(err)
					}
				}
				// What the model reads: bytes, and tokens at ~4 bytes each
				// (the arrows and brackets are 3 bytes, about one token).
				b.ReportMetric(float64(len(res.Text)), "bytes/result")
				b.ReportMetric(float64(len(res.Text))/4, "tokens/result")
			})
		}
		b.Run(fmt.Sprintf("nodes=%d/add", size), func(b *testing.B) {
			if _, err := loom.Of(svc).Run(ctx, w, "loom", fmt.Sprintf("→ switch to %d", deep)); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := loom.Of(svc).Run(ctx, w, "loom", `→ add "more"`); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("nodes=%d/context", size), func(b *testing.B) {
			for b.Loop() {
				if _, err := svc.Context(ctx, w, "loom", substrate.ContextRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		svc.Close()
	}
}
