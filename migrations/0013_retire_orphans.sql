-- Rooms deleted before 0012 left their archived log entries behind (the
-- archive has no foreign key) and retired nothing: retire those ids and
-- drop what they left, so no room created later under one of them reads
-- another's history.
INSERT INTO rooms_retired (id)
    SELECT DISTINCT a.room_id FROM state_archive a
    WHERE NOT EXISTS (SELECT 1 FROM rooms r WHERE r.id = a.room_id)
    ON CONFLICT DO NOTHING;
DELETE FROM state_archive a WHERE NOT EXISTS (SELECT 1 FROM rooms r WHERE r.id = a.room_id);
-- A room already created again under such an id holds the old room's
-- archived entries beside its own: those archived before it was born.
DELETE FROM state_archive a USING rooms r WHERE a.room_id = r.id AND a.archived_at < r.created_at;
