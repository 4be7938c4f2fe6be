-- Seed 003 §VI: smcp_user_rooms.is_default, the room sync_lobby focuses
-- when the session has none. At most one per user; a user's first room
-- becomes it (AddMember), and sync_lobby {default} moves it. Existing
-- users get their earliest room. Owned by the lobby.
ALTER TABLE smcp_user_rooms ADD COLUMN is_default boolean NOT NULL DEFAULT false;
UPDATE smcp_user_rooms u SET is_default = true
WHERE (u.created_at, u.room_id) = (SELECT created_at, room_id FROM smcp_user_rooms f WHERE f.user_id = u.user_id ORDER BY created_at, room_id LIMIT 1);
CREATE UNIQUE INDEX smcp_user_rooms_one_default ON smcp_user_rooms (user_id) WHERE is_default;
