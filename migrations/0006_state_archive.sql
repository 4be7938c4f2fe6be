-- Log entries (_messages, _audit) past a room's retention limit move here
-- from state, so a room that runs for months keeps its hot table small;
-- exports that need the whole history read both.
CREATE TABLE state_archive (
    LIKE state INCLUDING DEFAULTS,
    archived_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (room_id, scope, key)
);
CREATE INDEX state_archive_sort ON state_archive (room_id, scope, sort_key);
