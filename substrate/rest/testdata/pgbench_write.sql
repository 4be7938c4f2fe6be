-- The PostgreSQL bound for a direct state write: the same statements one
-- PUT /rooms/:id/state runs (lock the room row and take a seq, upsert the
-- entry, insert the audit entry), with nothing else. Run against a database
-- migrated by syncd, after: INSERT INTO rooms (id, token_hash, view_token_hash)
-- SELECT 'pgb' || i, 't' || i, 'v' || i FROM generate_series(1, 64) i;
--
--   pgbench -n -f pgbench_write.sql -D nrooms=1 -c 1 -T 20 <url>
\set r random(1, :nrooms)
BEGIN;
UPDATE rooms SET seq = seq + 1 WHERE id = 'pgb' || :r RETURNING seq, now();
INSERT INTO state (room_id, scope, key, value, version, revision, writer, updated_at)
  VALUES ('pgb' || :r, '_shared', 'k' || :client_id, '{"n": 1}', 1, 0, 'bench', now())
  ON CONFLICT (room_id, scope, key) DO UPDATE SET value = EXCLUDED.value, version = state.version + 1, updated_at = now();
INSERT INTO state (room_id, scope, key, sort_key, value, revision, writer)
  SELECT 'pgb' || :r, '_audit', seq::text, seq, '{"kind": "state_write"}', seq, 'bench' FROM rooms WHERE id = 'pgb' || :r;
SELECT pg_notify('sync_room', 'pgb' || :r);
COMMIT;
