package store_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/syncsubstrate/sync/migrations"
	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// On Citus (SYNC_TEST_CITUS), Migrate has distributed the schema: the
// room-owned tables by their room, co-located with rooms, every other
// table but the local ones as a reference table, the foreign keys as the
// migrations made them; rooms land on every worker; and migrating again
// changes nothing.
func TestMigrateDistributesOnCitus(t *testing.T) {
	if !pgtest.Citus() {
		t.Skip("needs a Citus cluster: " + pgtest.CitusEnv + "=2")
	}
	db := pgtest.New(t)
	ctx := context.Background()
	checkDistributed(t, db)
	if _, err := db.Exec(ctx, `INSERT INTO rooms (id, token_hash, view_token_hash) SELECT 'r' || i, ('t' || i)::bytea, ('v' || i)::bytea FROM generate_series(1, 20) i`); err != nil {
		t.Fatal(err)
	}
	var nodes int
	if err := db.QueryRow(ctx, `SELECT count(DISTINCT s.nodeport) FROM rooms r
		JOIN pg_dist_shard_placement s ON s.shardid = get_shard_id_for_distribution_column('rooms', r.id)`).Scan(&nodes); err != nil {
		t.Fatal(err)
	}
	var workers int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_dist_node WHERE groupid <> 0`).Scan(&workers); err != nil {
		t.Fatal(err)
	}
	if nodes != workers || workers < 2 {
		t.Errorf("20 rooms on %d nodes of %d workers", nodes, workers)
	}

}

// checkDistributed checks that db's schema is distributed as Migrate
// leaves it on Citus, and that migrating again changes nothing.
func checkDistributed(t *testing.T, db *store.DB) {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Query(ctx, `SELECT c.relname, coalesce(p.partmethod::text, ''), coalesce(column_to_column_name(p.logicalrelid, p.partkey), ''),
			coalesce(p.colocationid, 0) = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'rooms'::regclass)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_dist_partition p ON p.logicalrelid = c.oid
		WHERE n.nspname = 'public' AND c.relkind = 'r'`)
	if err != nil {
		t.Fatal(err)
	}
	type table struct {
		method, column string
		withRooms      bool
	}
	tables := map[string]table{}
	for rows.Next() {
		var name string
		var tb table
		if err := rows.Scan(&name, &tb.method, &tb.column, &tb.withRooms); err != nil {
			t.Fatal(err)
		}
		tables[name] = tb
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	room := map[string]string{}
	for _, rt := range migrations.RoomTables {
		room[rt.Name] = rt.Column
	}
	for name, tb := range tables {
		switch {
		case room[name] != "":
			if tb.method != "h" || tb.column != room[name] || !tb.withRooms {
				t.Errorf("%s: distribution %q by %q (co-located with rooms: %v), want hash by %s beside rooms", name, tb.method, tb.column, tb.withRooms, room[name])
			}
		case slices.Contains(migrations.LocalTables, name):
			if tb.method != "" {
				t.Errorf("%s: distributed (%q), want a local table", name, tb.method)
			}
		case tb.method != "n":
			t.Errorf("%s: distribution %q, want a reference table", name, tb.method)
		}
	}
	var keys int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND connamespace = 'public'::regnamespace`).Scan(&keys); err != nil {
		t.Fatal(err)
	}
	if keys < 10 {
		t.Errorf("%d foreign keys after distribution: those set aside were not put back", keys)
	}

	if _, err := db.Migrate(ctx); err != nil {
		t.Fatalf("migrating a distributed database again: %v", err)
	}
	var again int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_dist_partition`).Scan(&again); err != nil {
		t.Fatal(err)
	}
	if again != len(tables)-len(migrations.LocalTables) {
		t.Errorf("%d tables in Citus's metadata after migrating again, want %d", again, len(tables)-len(migrations.LocalTables))
	}
}

// A table a later migration adds to a distributed schema is distributed
// at the next migration (here a table of no room: a reference table),
// and migrations from two processes at once, under the advisory lock,
// distribute it once.
func TestMigrateDistributesAnAddedTable(t *testing.T) {
	if !pgtest.Citus() {
		t.Skip("needs a Citus cluster: " + pgtest.CitusEnv + "=2")
	}
	url := pgtest.URL(t)
	ctx := context.Background()
	procs := make([]*store.DB, 2)
	for i := range procs {
		db, err := store.Open(ctx, url, store.Options{MaxConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		procs[i] = db
	}
	if _, err := procs[0].Exec(ctx, `CREATE TABLE zz_added (id text PRIMARY KEY, note text)`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(procs))
	for i, db := range procs {
		wg.Go(func() { _, errs[i] = db.Migrate(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migration %d: %v", i, err)
		}
	}
	var method string
	if err := procs[0].QueryRow(ctx, `SELECT partmethod::text FROM pg_dist_partition WHERE logicalrelid = 'zz_added'::regclass`).Scan(&method); err != nil || method != "n" {
		t.Fatalf("the added table: distribution %q (%v), want a reference table", method, err)
	}
	checkDistributed(t, procs[1])
}

// Search runs on the workers (README, "Scaling out"): every shard of
// state carries the GIN index over its tsvector, and every worker has
// the text search configuration the generated column names.
func TestSearchIndexOnEveryShard(t *testing.T) {
	if !pgtest.Citus() {
		t.Skip("needs a Citus cluster: " + pgtest.CitusEnv + "=2")
	}
	db := pgtest.New(t)
	ctx := context.Background()
	rows, err := db.Query(ctx, `SELECT shardid, success, result FROM run_command_on_shards('state',
		$$SELECT count(*) FROM pg_indexes WHERE tablename = '%s' AND indexdef LIKE '%%USING gin (search_tsv)%%'$$)`)
	if err != nil {
		t.Fatal(err)
	}
	shards := 0
	for rows.Next() {
		var id int64
		var ok bool
		var result string
		if err := rows.Scan(&id, &ok, &result); err != nil {
			t.Fatal(err)
		}
		shards++
		if !ok || result != "1" {
			t.Errorf("shard %d of state: %v %q, want its search index", id, ok, result)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if shards < 2 {
		t.Errorf("%d shards of state", shards)
	}
	rows, err = db.Query(ctx, `SELECT nodeport, success, result FROM run_command_on_workers(
		$$SELECT count(*) FROM pg_ts_config WHERE cfgname = 'sync_search'$$)`)
	if err != nil {
		t.Fatal(err)
	}
	workers := 0
	for rows.Next() {
		var port int
		var ok bool
		var result string
		if err := rows.Scan(&port, &ok, &result); err != nil {
			t.Fatal(err)
		}
		workers++
		if !ok || result != "1" {
			t.Errorf("worker on port %d: %v %q, want the sync_search configuration", port, ok, result)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if workers < 2 {
		t.Errorf("%d workers answered", workers)
	}
}
