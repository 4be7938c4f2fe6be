package migrations_test

import (
	"context"
	"os"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// Ready for distributed PostgreSQL (README, "Scaling out"): a foreign key
// may point at a room-owned table only from another room-owned table, on
// the room (co-located tables, which Citus allows). From any other table,
// a reference table once rooms are distributed, Citus refuses it.
func TestOnlyRoomTablesReferenceRooms(t *testing.T) {
	db := pgtest.New(t)
	rows, err := db.Query(context.Background(), `SELECT c.conname, c.conrelid::regclass::text, c.confrelid::regclass::text,
			(SELECT array_agg(a.attname ORDER BY a.attname) FROM pg_attribute a WHERE a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey))
		FROM pg_constraint c WHERE c.contype = 'f'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	checked := 0
	for rows.Next() {
		var name, from, to string
		var cols []string
		if err := rows.Scan(&name, &from, &to, &cols); err != nil {
			t.Fatal(err)
		}
		if _, ok := shardKey[to]; !ok {
			continue
		}
		checked++
		key, roomOwned := shardKey[from]
		if !roomOwned {
			t.Errorf("%s: %s references the room-owned %s; a reference table cannot point at a distributed one", name, from, to)
			continue
		}
		found := false
		for _, c := range cols {
			found = found || c == key
		}
		if !found {
			t.Errorf("%s: %s references %s without its shard key %s (%v): not co-located", name, from, to, key, cols)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no foreign key onto a room-owned table found: the query is wrong")
	}
}
