package store

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/migrations"
)

// distribute spreads the schema over a Citus cluster (README, "Scaling
// out") when the database has the citus extension; on plain PostgreSQL it
// does nothing. The room-owned tables (migrations.RoomTables) are
// distributed by their room, co-located with rooms so that a room's rows
// share a worker; every other table but migrations.LocalTables becomes a
// reference table, copied to every worker. Tables already distributed are
// left as they are, so that it runs at every start and after every
// migration that adds a table.
//
// Citus needs an order the foreign keys forbid: a distributed table may
// refer to a reference table but not to a local one, and a local table
// that refers to a new reference table becomes a Citus local table that
// can no longer be co-located. So, in one transaction (a failure leaves
// the schema as it was), the foreign keys touching the tables to
// distribute are dropped, the tables distributed, rooms first, then the
// reference tables, and the keys added back as they were. It runs under
// the migrations' advisory lock.
func distribute(ctx context.Context, conn *pgx.Conn, log *slog.Logger) error {
	var citus bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&citus); err != nil {
		return fmt.Errorf("store: citus: %w", err)
	}
	if !citus {
		return nil
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		pending, err := undistributed(ctx, tx)
		if err != nil {
			return err
		}
		if len(pending) == 0 {
			log.Info("citus: every table is already distributed")
			return nil
		}
		// One connection per worker for the whole transaction: the
		// distribution's DDL and the keys added back over tables it has
		// just written cannot mix parallel and sequential access.
		if _, err := tx.Exec(ctx, `SET LOCAL citus.multi_shard_modify_mode TO 'sequential'`); err != nil {
			return err
		}
		keys, err := dropForeignKeys(ctx, tx, pending)
		if err != nil {
			return err
		}
		room := map[string]string{}
		for _, t := range migrations.RoomTables {
			room[t.Name] = t.Column
		}
		anchor := migrations.RoomTables[0].Name
		for _, t := range migrations.RoomTables {
			if !slices.Contains(pending, t.Name) {
				continue
			}
			colocate := anchor
			if t.Name == anchor {
				colocate = "default"
			}
			if _, err := tx.Exec(ctx, `SELECT create_distributed_table($1::regclass, $2::text, colocate_with => $3::text)`,
				t.Name, t.Column, colocate); err != nil {
				return fmt.Errorf("store: citus: distribute %s by %s: %w", t.Name, t.Column, err)
			}
			log.Info("citus: distributed a room-owned table by its room", "table", t.Name, "column", t.Column, "colocated_with", colocate)
		}
		for _, name := range pending {
			if _, ok := room[name]; ok {
				continue
			}
			if _, err := tx.Exec(ctx, `SELECT create_reference_table($1::regclass)`, name); err != nil {
				return fmt.Errorf("store: citus: make %s a reference table: %w", name, err)
			}
			log.Info("citus: made a reference table", "table", name)
		}
		for _, k := range keys {
			if _, err := tx.Exec(ctx, `ALTER TABLE `+pgx.Identifier{k.table}.Sanitize()+` ADD CONSTRAINT `+
				pgx.Identifier{k.name}.Sanitize()+` `+k.def); err != nil {
				return fmt.Errorf("store: citus: restore foreign key %s on %s: %w", k.name, k.table, err)
			}
		}
		log.Info("citus: schema distributed", "tables", len(pending), "foreign_keys_restored", len(keys))
		return nil
	})
}

// undistributed lists the tables of the public schema that Citus does
// not distribute yet, but for migrations.LocalTables. Citus local tables
// (what a foreign key to a reference table made by hand turns a table
// into) count as not distributed: distributing them is tried, and what
// Citus refuses rolls the whole step back with its reason.
func undistributed(ctx context.Context, tx pgx.Tx) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
		  AND c.relname <> ALL ($1::text[])
		  AND NOT EXISTS (SELECT 1 FROM pg_dist_partition p WHERE p.logicalrelid = c.oid
		                  AND (p.partmethod <> 'n' OR p.repmodel = 't'))
		ORDER BY c.relname`, migrations.LocalTables)
	if err != nil {
		return nil, fmt.Errorf("store: citus: list tables: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("store: citus: list tables: %w", err)
	}
	return names, nil
}

type foreignKey struct{ table, name, def string }

// dropForeignKeys drops every foreign key from or to one of tables and
// returns them, to be added back once the tables are distributed.
func dropForeignKeys(ctx context.Context, tx pgx.Tx, tables []string) ([]foreignKey, error) {
	rows, err := tx.Query(ctx, `SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)
		FROM pg_constraint c
		WHERE c.contype = 'f' AND c.connamespace = 'public'::regnamespace
		  AND (c.conrelid::regclass::text = ANY ($1::text[]) OR c.confrelid::regclass::text = ANY ($1::text[]))
		ORDER BY 1, 2`, tables)
	if err != nil {
		return nil, fmt.Errorf("store: citus: list foreign keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (foreignKey, error) {
		var k foreignKey
		return k, r.Scan(&k.table, &k.name, &k.def)
	})
	if err != nil {
		return nil, fmt.Errorf("store: citus: list foreign keys: %w", err)
	}
	for _, k := range keys {
		if _, err := tx.Exec(ctx, `ALTER TABLE `+pgx.Identifier{k.table}.Sanitize()+` DROP CONSTRAINT `+pgx.Identifier{k.name}.Sanitize()); err != nil {
			return nil, fmt.Errorf("store: citus: drop foreign key %s on %s: %w", k.name, k.table, err)
		}
	}
	return keys, nil
}

// WorkerHealth is what readiness reports of a Citus cluster's workers.
type WorkerHealth struct {
	// Up is the number of primary workers the coordinator reached.
	Up int `json:"up"`
	// Down names the workers it could not reach ("host:port").
	Down []string `json:"down,omitempty"`
}

// Workers checks that the coordinator reaches each of its primary
// workers (citus_check_connection_to_node). ok is false on plain
// PostgreSQL, where there are none. A worker that is down takes only the
// rooms on its shards with it, so readiness reports it rather than
// failing: a load balancer that took every process out would take every
// room down.
func (db *DB) Workers(ctx context.Context) (h WorkerHealth, ok bool, err error) {
	if isHeld(ctx) {
		return h, false, db.refuse()
	}
	if db.citus.Load() == 0 {
		var citus bool
		if err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&citus); err != nil {
			return h, false, err
		}
		db.citus.Store(map[bool]int32{false: 1, true: 2}[citus])
	}
	if db.citus.Load() != 2 {
		return h, false, nil
	}
	rows, err := db.pool.Query(ctx, `SELECT nodename, nodeport, citus_check_connection_to_node(nodename, nodeport)
		FROM pg_dist_node WHERE noderole = 'primary' AND groupid <> 0 AND isactive ORDER BY nodename, nodeport`)
	if err != nil {
		return h, true, err
	}
	defer rows.Close()
	for rows.Next() {
		var host string
		var port int
		var reached bool
		if err := rows.Scan(&host, &port, &reached); err != nil {
			return h, true, err
		}
		if reached {
			h.Up++
		} else {
			h.Down = append(h.Down, fmt.Sprintf("%s:%d", host, port))
		}
	}
	return h, true, rows.Err()
}
