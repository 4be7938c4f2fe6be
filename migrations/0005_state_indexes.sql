-- Mutable entries of a room, without its logs: the snapshot load, scope
-- reads and the scope-capacity count read only these, and with no index
-- that excludes log entries PostgreSQL scanned every row of the room (or,
-- once the table was large, the whole table) on each of them.
CREATE INDEX state_mutable ON state (room_id, scope, key) WHERE sort_key IS NULL;
