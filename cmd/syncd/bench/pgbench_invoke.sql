-- PostgreSQL's bound for one invocation of the bench's "move" action
-- (an `if` and two writes), with the statements the server's transaction
-- runs and nothing else: lock the room row and take its sequence numbers
-- (one for the invocation's _messages entry, one for its _audit entry),
-- two upserts, the message and the audit entry with the values the server
-- writes today (an audit entry of ~890 bytes: the writes and their delta),
-- the notification. `syncd bench -pgbench` runs it on the
-- server's own database; by hand, after creating rooms pgb1…pgbN:
--
--   INSERT INTO rooms (id, token_hash, view_token_hash)
--     SELECT 'pgb' || i, ('t' || i)::bytea, ('v' || i)::bytea FROM generate_series(1, 64) i;
--   pgbench -n -f pgbench_invoke.sql -D nrooms=1 -c 1 -j 1 -T 20 <url>
\set r random(1, :nrooms)
BEGIN;
UPDATE rooms SET seq = seq + 2, message_count = message_count + 1 WHERE id = 'pgb' || :r RETURNING seq;
INSERT INTO state (room_id, scope, key, value, version, revision, writer, via, created_at, updated_at)
  VALUES ('pgb' || :r, '_shared', 'moves', '1', 1, 0, 'agent' || :client_id, 'action:move', now(), now())
  ON CONFLICT (room_id, scope, key) DO UPDATE SET value = EXCLUDED.value, version = state.version + 1, revision = EXCLUDED.revision,
    writer = EXCLUDED.writer, via = EXCLUDED.via, updated_at = EXCLUDED.updated_at;
INSERT INTO state (room_id, scope, key, value, version, revision, writer, via, created_at, updated_at)
  VALUES ('pgb' || :r, 'agent' || :client_id, 'last', '1', 1, 0, 'agent' || :client_id, 'action:move', now(), now())
  ON CONFLICT (room_id, scope, key) DO UPDATE SET value = EXCLUDED.value, version = state.version + 1, revision = EXCLUDED.revision,
    writer = EXCLUDED.writer, via = EXCLUDED.via, updated_at = EXCLUDED.updated_at;
INSERT INTO state (room_id, scope, key, sort_key, value, version, revision, writer, via, created_at, updated_at)
  SELECT 'pgb' || :r, '_messages', (seq - 1)::text, seq - 1,
    '{"body": "move(n=609)", "from": "agent0", "kind": "action_invocation", "action": "move", "params": {"n": 609}}', 1, seq, 'agent' || :client_id, 'action:move', now(), now()
  FROM rooms WHERE id = 'pgb' || :r;
INSERT INTO state (room_id, scope, key, sort_key, value, version, revision, writer, via, created_at, updated_at)
  SELECT 'pgb' || :r, '_audit', seq::text, seq, 
    '{"by": "agent0", "ok": true, "ts": "2026-11-24T02:36:25.172767Z", "seq": 1225, "kind": "invoke", "agent": "agent0", "delta": [{"key": "moves", "after": 610, "scope": "_shared", "before": 609, "version_after": 611, "version_before": 610, "revision_before": 1223}, {"key": "last", "after": 609, "scope": "agent0", "before": 608, "version_after": 610, "version_before": 609, "revision_before": 1223}, {"key": "1224", "after": {"body": "move(n=609)", "from": "agent0", "kind": "action_invocation", "action": "move", "params": {"n": 609}}, "scope": "_messages", "sort_key": 1224, "version_after": 1, "version_before": 0}], "action": "move", "params": {"n": 609}, "writes": [{"op": "increment", "key": "moves", "scope": "_shared", "version": 611}, {"op": "set", "key": "last", "scope": "agent0", "version": 610}, {"op": "append", "key": "1224", "scope": "_messages", "version": 1}], "prev_seq": 1223}', 1, seq, 'agent' || :client_id, 'system', now(), now()
  FROM rooms WHERE id = 'pgb' || :r;
SELECT pg_notify('sync_room', 'pgb' || :r || ' 0');
COMMIT;
