-- The PostgreSQL bound for one invocation (PERFORMANCE.md): lock the room
-- row and bump its sequence, two upserts, one audit insert. Set-up as in
-- pgbench_write.sql.
--
--   pgbench -n -f pgbench_invoke.sql -D nrooms=1 -c 1 -j 1 -T 20 <url>
\set r random(1, :nrooms)
BEGIN;
UPDATE rooms SET seq = seq + 1 WHERE id = 'pgb' || :r RETURNING seq, now();
INSERT INTO state (room_id, scope, key, value, version, revision, writer, updated_at)
  VALUES ('pgb' || :r, '_shared', 'moves', '1', 1, 0, 'bench', now())
  ON CONFLICT (room_id, scope, key) DO UPDATE SET value = EXCLUDED.value, version = state.version + 1, updated_at = now();
INSERT INTO state (room_id, scope, key, value, version, revision, writer, updated_at)
  VALUES ('pgb' || :r, 'agent' || :client_id, 'last', '1', 1, 0, 'bench', now())
  ON CONFLICT (room_id, scope, key) DO UPDATE SET value = EXCLUDED.value, version = state.version + 1, updated_at = now();
INSERT INTO state (room_id, scope, key, sort_key, value, revision, writer)
  SELECT 'pgb' || :r, '_audit', seq::text, seq, '{"kind": "invoke"}', seq, 'bench' FROM rooms WHERE id = 'pgb' || :r;
SELECT pg_notify('sync_room', 'pgb' || :r);
COMMIT;
