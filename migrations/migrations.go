// Package migrations holds the numbered SQL files that define the schema.
//
// Files are named NNNN_description.sql and applied in numeric order by
// store.Migrate. A released file is never edited: add a new one instead.
//
// On Citus, store.Migrate then distributes the schema (README, "Scaling
// out"): the room-owned tables listed in RoomTables by their room, every
// other table as a reference table. A migration runs on both kinds of
// database, so once the tables are distributed it may alter them (Citus
// carries the DDL to every shard), and a new room-owned table is listed
// in RoomTables. Citus refuses a foreign key from a table not yet
// distributed to one that is: a new room-owned table refers to rooms in a
// later migration than the one creating it, once it is distributed.
package migrations

import "embed"

// FS holds every migration file, embedded in the binary.
//
//go:embed *.sql
var FS embed.FS

// RoomTable is a room-owned table and the column that names its room: its
// distribution column on Citus, which every unique key and every foreign
// key between room-owned tables includes.
type RoomTable struct{ Name, Column string }

// RoomTables are the room-owned tables, rooms first: the others are
// co-located with it (a room's rows on one worker). Every other table is
// small, per user or per client, and is a reference table on Citus.
var RoomTables = []RoomTable{
	{"rooms", "id"},
	{"rooms_retired", "id"},
	{"agents", "room_id"},
	{"state", "room_id"},
	{"state_archive", "room_id"},
	{"vocabulary_usage", "room_id"},
	{"mcp_tasks", "room_id"},
}

// LocalTables stay plain tables on the coordinator: the migrations'
// own bookkeeping, read and written only by store.Migrate.
var LocalTables = []string{"schema_migrations"}
