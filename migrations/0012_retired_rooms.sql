-- Ready for distributed PostgreSQL (README, "Scaling out"): the lobby's
-- tables, reference tables once rooms are distributed, no longer point at
-- rooms with foreign keys (Citus forbids a reference table referencing a
-- distributed one). What the keys did is done otherwise:
--   * a deleted room's id is retired, never created again, so a membership
--     or a session's focus that outlives its room can never reach a new
--     room under the same id;
--   * the lobby removes memberships and focus when it deletes a room, and
--     drops memberships of rooms deleted by other means when it lists them.
ALTER TABLE smcp_user_rooms DROP CONSTRAINT smcp_user_rooms_room_id_fkey;
ALTER TABLE smcp_user_sessions DROP CONSTRAINT smcp_user_sessions_room_id_fkey;

-- Owned by substrate; distributed by id beside rooms.
CREATE TABLE rooms_retired (
    id         text        PRIMARY KEY,
    deleted_at timestamptz NOT NULL DEFAULT now()
);
