package substrate

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// The hot statements must not scan the state table or a room's whole
// history: on a table of realistic size (a busy room with 60,000 log
// entries among 400,000 rows), every plan reads state through an index.
// Without the partial index on mutable entries the snapshot load and the
// scope count were sequential scans of the whole table (72 ms at 194,000
// rows, and growing), so a plan regression fails here, not in production.
func TestHotQueryPlans(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO rooms (id, token_hash, view_token_hash, seq) SELECT 'r' || i, ('t' || i)::bytea, ('v' || i)::bytea, 2000 FROM generate_series(0, 199) i`,
		`INSERT INTO rooms (id, token_hash, view_token_hash, seq) VALUES ('hot', 'th', 'vh', 120000)`,
		// 200 quiet rooms: 40 mutable keys and 1,700 messages each.
		`INSERT INTO state (room_id, scope, key, value, revision, writer) SELECT 'r' || r, '_shared', 'k' || k, '1', 1, '_room'
			FROM generate_series(0, 199) r, generate_series(1, 40) k`,
		`INSERT INTO state (room_id, scope, key, sort_key, value, revision, writer) SELECT 'r' || r, '_messages', s::text, s, '{"body": "hi"}', s, 'a'
			FROM generate_series(0, 199) r, generate_series(1, 1700) s`,
		// The busy room: 500 keys, 30,000 messages and 30,000 audit entries.
		`INSERT INTO state (room_id, scope, key, value, revision, writer) SELECT 'hot', '_shared', 'task-' || k, '{"done": false}', 1, '_room'
			FROM generate_series(1, 500) k`,
		`INSERT INTO state (room_id, scope, key, sort_key, value, revision, writer) SELECT 'hot', '_messages', s::text, s, '{"body": "hi", "to": "b"}', s, 'a'
			FROM generate_series(1, 60000, 2) s`,
		`INSERT INTO state (room_id, scope, key, sort_key, value, revision, writer) SELECT 'hot', '_audit', s::text, s, '{"kind": "invoke", "action": "x", "ok": true}', s, 'a'
			FROM generate_series(2, 60000, 2) s`,
		`ANALYZE state`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	cases := []struct {
		name string
		sql  string
		args []any
		// index, when set, is an index the plan must read (an index scan
		// of the room's whole history is no better than a scan).
		index string
	}{
		{"snapshot", sqlSnapshot, []any{"hot"}, ""},
		{"scope keys", sqlScopeKeys, []any{"hot", "_messages"}, ""},
		{"load rows", sqlLoadRows, []any{"hot", []string{"_shared", "_shared"}, []string{"task-1", "task-2"}}, ""},
		{"scope entries", sqlScopeEntries, []any{"hot", "_shared"}, ""},
		{"scope log page", sqlScopeLogPage, []any{"hot", "_messages", int64(59000), 100, []string{}}, ""},
		{"recent messages", sqlMessagesRecent, []any{"hot", 100, int64(60000)}, ""},
		{"messages after", sqlMessagesAfter, []any{"hot", int64(100), 100, int64(60000)}, ""},
		{"unread", sqlUnread, []any{"hot", int64(59000), "b", int64(60000), maxUnreadCount}, ""},
		{"log page", sqlLogPage, []any{"hot", "_audit", 100, int64(60000)}, ""},
		{"invocation counts", sqlInvocationCounts, []any{"hot"}, ""},
		{"log window", sqlLogWindow, []any{"hot", windowSize, int64(60000), []int64{59990, 59995}}, ""},
		{"usage", sqlUsage, []any{"hot"}, ""},
		{"audit page", sqlAuditPage, []any{"hot", int64(1000), int64(60000), 500}, ""},
		{"key chain", sqlKeyChain, []any{"hot", "_shared", "task-1", int64(59998), 100}, ""},
		{"key last write", sqlKeyLastWrite, []any{"hot", int64(60000), `[{"scope": "_shared", "key": "task-1"}]`}, ""},
		// Search reads the GIN index (state_search), and one thread its
		// index (state_thread), never a room's log.
		{"search", sqlSearch, []any{"hot", "task", int64(60000), "", "", "", int64(0), nil, nil, []string{}, false,
			[]string{"_shared"}, []string{"task-1"}, []string{}, []string{"_messages"}, []*string{nil}, []string{}, []string{}, 21, 0}, "state_search"},
		{"search gates", sqlSearchGates, []any{"hot", "task", int64(60000), "", "", "", int64(0), nil, nil, []string{}, false}, "state_search"},
		{"thread", sqlThreadMessages, []any{"hot", int64(101), int64(0), 100, int64(60000)}, "state_thread"},
		{"hidden messages", sqlHiddenMessages, []any{"hot", int64(60000)}, "state_hidden"},
		// Messages to a reader are read through their own index
		// (state_directed_to, by recipient), whatever its backlog and
		// whatever is directed to others.
		{"directed unread", sqlDirectedUnread, []any{"hot", "b", int64(1000), int64(60000), 21}, "state_directed_to"},
		{"newest messages after", sqlMessagesNewestAfter, []any{"hot", int64(1000), 500, int64(60000)}, ""},
		{"unseen changes", sqlUnseen, []any{"hot", int64(59000), int64(60000)}, ""},
		{"public messages", `SELECT ` + sqlPublicMessages + ` FROM rooms r WHERE id = ANY($1)`, []any{[]string{"hot", "r1"}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var raw []byte
			if err := db.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+c.sql, c.args...).Scan(&raw); err != nil {
				t.Fatal(err)
			}
			var plan []struct{ Plan planNode }
			if err := json.Unmarshal(raw, &plan); err != nil {
				t.Fatal(err)
			}
			if bad := seqScans(plan[0].Plan); len(bad) > 0 {
				t.Fatalf("plan scans %v sequentially:\n%s", bad, raw)
			}
			if c.index != "" && !usesIndex(plan[0].Plan, c.index) {
				t.Fatalf("plan does not read index %s:\n%s", c.index, raw)
			}
		})
	}
}

type planNode struct {
	NodeType string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Plans    []planNode `json:"Plans"`
	// On Citus (pgtest.CitusEnv), the plans of the statement's tasks on
	// the workers, whose tables and indexes are the shards' (state_102008).
	Distributed *struct {
		Job struct {
			Tasks []struct {
				Remote [][]struct{ Plan planNode } `json:"Remote Plan"`
			}
		}
	} `json:"Distributed Query"`
}

// children are the plans under n, those of its tasks on Citus included.
func (n planNode) children() []planNode {
	out := n.Plans
	if n.Distributed != nil {
		for _, t := range n.Distributed.Job.Tasks {
			for _, r := range t.Remote {
				for _, p := range r {
					out = append(out, p.Plan)
				}
			}
		}
	}
	return out
}

// shardSuffix is what Citus appends to a shard's table and index names.
var shardSuffix = regexp.MustCompile(`_[0-9]{6,}$`)

// usesIndex reports whether the plan reads index name.
func usesIndex(n planNode, name string) bool {
	if shardSuffix.ReplaceAllString(n.Index, "") == name {
		return true
	}
	for _, c := range n.children() {
		if usesIndex(c, name) {
			return true
		}
	}
	return false
}

func seqScans(n planNode) []string {
	var out []string
	if n.NodeType == "Seq Scan" && shardSuffix.ReplaceAllString(n.Relation, "") == "state" {
		out = append(out, fmt.Sprintf("%s on %s", n.NodeType, n.Relation))
	}
	for _, c := range n.children() {
		out = append(out, seqScans(c)...)
	}
	return out
}
