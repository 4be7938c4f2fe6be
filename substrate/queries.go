package substrate

// The statements a request runs against state on its hot paths, named so
// that TestHotQueryPlans can EXPLAIN each one on a realistically large
// table: a plan that scans the whole table (or a room's whole history)
// fails the test, not production. Each must cost what the request needs,
// whatever the length of the room's _messages and _audit.
// rowCols are a state row's columns, as scanRow reads them.
const rowCols = `scope, key, value, version, sort_key, revision, writer, updated_at,
	timer_json, timer_expires_at, timer_ticks_left, timer_tick_on, timer_effect, timer_started_at, enabled_expr`

const entryCols = `SELECT ` + rowCols + ` FROM state `

// liveSQL keeps the rows whose timer lets them be seen now: a "delete"
// timer that has not run out, or an "enable" timer that has.
const liveSQL = ` AND (timer_effect IS NULL OR ((coalesce(timer_expires_at <= now(), false) OR coalesce(timer_ticks_left <= 0, false)) = (timer_effect = 'enable')))`

const (
	// sqlSnapshot loads a room's mutable entries (index state_mutable).
	sqlSnapshot = `SELECT ` + rowCols + ` FROM state WHERE room_id = $1 AND sort_key IS NULL ORDER BY scope, key`
	// sqlScopeKeys counts a scope's mutable keys (index state_mutable).
	sqlScopeKeys = `SELECT count(*) FROM state WHERE room_id = $1 AND scope = $2 AND sort_key IS NULL`
	// sqlLoadRows reads the rows a mutation writes (primary key).
	sqlLoadRows = `SELECT ` + rowCols + ` FROM state s
		JOIN unnest($2::text[], $3::text[]) AS t(sc, k) ON s.scope = t.sc AND s.key = t.k
		WHERE s.room_id = $1`
	// sqlScopeEntries reads one scope's mutable entries.
	sqlScopeEntries = entryCols + `WHERE room_id = $1 AND scope = $2 AND sort_key IS NULL` + liveSQL + ` ORDER BY key`
	// sqlScopeLogPage pages one scope's log (index state_scope_sort).
	// $5 are key prefixes the reader does not see (Visibility.HiddenPrefixes).
	sqlScopeLogPage = entryCols + `WHERE room_id = $1 AND scope = $2 AND sort_key > $3` + liveSQL + ` AND NOT coalesce(key ^@ ANY($5::text[]), false) ORDER BY sort_key LIMIT $4`
	// sqlScopeLogNewest is sqlScopeLogPage from the log's newest end:
	// the newest $4 with $3 < sort_key < $6, oldest first.
	sqlScopeLogNewest = `SELECT ` + rowCols + ` FROM (` + entryCols + `WHERE room_id = $1 AND scope = $2 AND sort_key > $3 AND sort_key < $6` + liveSQL +
		` AND NOT coalesce(key ^@ ANY($5::text[]), false) ORDER BY sort_key DESC LIMIT $4) t ORDER BY sort_key`
	// sqlMessagesRecent reads the newest messages up to a seq.
	sqlMessagesRecent = `SELECT sort_key, value, writer, via, enabled_expr FROM (SELECT sort_key, value, writer, via, enabled_expr FROM state
		WHERE room_id = $1 AND scope = '_messages' AND sort_key <= $3` + liveSQL + `
		ORDER BY sort_key DESC LIMIT $2) t ORDER BY sort_key`
	// sqlMessagesAfter pages messages after a seq, up to the read's seq.
	sqlMessagesAfter = `SELECT sort_key, value, writer, via, enabled_expr FROM state WHERE room_id = $1 AND scope = '_messages'
		AND sort_key > $2 AND sort_key <= $4` + liveSQL + `
		ORDER BY sort_key LIMIT $3`
	// sqlThreadMessages pages one thread's messages (its first message
	// and those whose thread names it) after a seq, up to the read's seq
	// (index state_thread).
	sqlThreadMessages = `SELECT sort_key, value, writer, via, enabled_expr FROM state WHERE room_id = $1 AND scope = '_messages'
		AND (sort_key = $2 OR value->>'thread' = $2::text) AND sort_key > $3 AND sort_key <= $5` + liveSQL + `
		ORDER BY sort_key LIMIT $4`
	// sqlUnread counts a reader's unread messages and, apart, those
	// addressed to it (index state_directed_to), each bounded; its own
	// messages are not unread. Counted among the unread, the directed
	// ones past the first thousand were missed: a reader with that
	// backlog was never woken by a message to it. The gated ones come back
	// with their gates (the unread's, then the directed ones' not among
	// them), for the reader's gates to take out those it cannot see
	// (msgCounts.hideGated).
	sqlUnread = `WITH u AS (SELECT sort_key, coalesce((value->'to') ? $3, false) AS directed, enabled_expr AS gate FROM state
			WHERE room_id = $1 AND scope = '_messages' AND sort_key > $2 AND sort_key <= $4 AND writer <> $3` + liveSQL + `
			LIMIT $5),
		d AS (SELECT sort_key, enabled_expr AS gate FROM state
			WHERE room_id = $1 AND scope = '_messages' AND value ? 'to' AND (value->'to') ? $3 AND sort_key > $2 AND sort_key <= $4 AND writer <> $3` + liveSQL + `
			LIMIT $5)
		SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM d), g.gates, g.directed,
			coalesce((SELECT array_agg(gate) FROM d WHERE gate IS NOT NULL AND sort_key NOT IN (SELECT sort_key FROM u)), '{}')
		FROM (SELECT coalesce(array_agg(gate), '{}') AS gates, coalesce(array_agg(directed), '{}') AS directed FROM u WHERE gate IS NOT NULL) g`
	// sqlDirectedUnread reads the messages addressed to a reader ($2)
	// after its last read ($3), oldest first, up to the read's seq
	// (index state_directed_to). Ordered by sort_key itself, the plan
	// walked state_directed in order through every message directed to
	// others (a flood of them to one agent cost every reader); sort_key + 0
	// is sorted after the reader's own are found.
	sqlDirectedUnread = `SELECT sort_key, value, writer, via, enabled_expr FROM state WHERE room_id = $1 AND scope = '_messages'
		AND value ? 'to' AND (value->'to') ? $2 AND sort_key > $3 AND sort_key <= $4 AND writer <> $2` + liveSQL + `
		ORDER BY sort_key + 0 LIMIT $5`
	// sqlMessagesNewestAfter reads the newest messages after a seq, up to
	// the read's seq, oldest first: what a delta shows.
	sqlMessagesNewestAfter = `SELECT sort_key, value, writer, via, enabled_expr FROM (SELECT sort_key, value, writer, via, enabled_expr FROM state
		WHERE room_id = $1 AND scope = '_messages' AND sort_key > $2 AND sort_key <= $4` + liveSQL + `
		ORDER BY sort_key DESC LIMIT $3) t ORDER BY sort_key`
	// sqlLogPage reads the newest entries of a log up to a seq.
	sqlLogPage = `SELECT key, value, writer, via, enabled_expr FROM state WHERE room_id = $1 AND scope = $2 AND sort_key <= $4` + liveSQL + `
		ORDER BY sort_key DESC LIMIT $3`
	// sqlInvocationCounts counts invocations over the last 500 audit
	// entries.
	sqlInvocationCounts = `SELECT value->>'action' FROM (SELECT value FROM state
		WHERE room_id = $1 AND scope = '_audit' AND sort_key IS NOT NULL ORDER BY sort_key DESC LIMIT 500) t
		WHERE value->>'kind' = 'invoke' AND (value->>'ok')::boolean`
	// sqlUsage reads the room's vocabulary usage (adaptive salience).
	sqlUsage = `SELECT kind, id, uses, last_used_seq, score, reads_at_use FROM vocabulary_usage WHERE room_id = $1`
	// sqlTouchVocabulary records uses and registrations of actions and
	// views at a seq: the score is decayed by the room's context reads
	// since the item's last use, then reinforced by one. $8 is the room's
	// context reads now (mutation.roomReads), counted in Go from the
	// overlaid presence, not summed here from the agents' rows: a write of
	// read marks that commits between the two would count twice. The room
	// comes from its (locked) row: on Citus that makes the statement one
	// the room's worker runs whole, where from unnest alone it was pulled
	// through the coordinator, which loses the type of the parameter in
	// DO UPDATE ("could not determine data type of parameter").
	sqlTouchVocabulary = `INSERT INTO vocabulary_usage AS u (room_id, kind, id, uses, last_used_seq, last_used_at, score, reads_at_use)
		SELECT r.id, t.kind, t.id, CASE WHEN t.used THEN 1 ELSE 0 END, CASE WHEN t.used THEN $5::bigint END,
			CASE WHEN t.used THEN $6::timestamptz END, 1, $8::bigint
		FROM rooms r, unnest($2::text[], $3::text[], $4::bool[]) AS t(kind, id, used) WHERE r.id = $1
		ON CONFLICT (room_id, kind, id) DO UPDATE SET
			uses = u.uses + EXCLUDED.uses,
			last_used_seq = coalesce(EXCLUDED.last_used_seq, u.last_used_seq),
			last_used_at = coalesce(EXCLUDED.last_used_at, u.last_used_at),
			score = u.score * power($7::float8, greatest(EXCLUDED.reads_at_use - u.reads_at_use, 0)) + 1,
			reads_at_use = EXCLUDED.reads_at_use`
	// sqlLogWindow reads the newest entries of both logs up to a seq
	// (index state_scope_sort), for message pattern detection: of the
	// messages, those the reader sees ($4: the seqs of those it does not,
	// msgCounts.unseen). Of each value only the fields read (LogRow): an
	// audit entry holds whole values written and definitions registered,
	// and sending and decoding 500 of them whole at every read was the
	// room page's largest cost at real size (issue 42); of an audit entry's
	// writes only where they went (contested claims).
	sqlLogWindow = `(SELECT scope, sort_key, jsonb_build_object('kind', value->'kind', 'body', value->'body', 'subject', value->'subject'), writer
			FROM state WHERE room_id = $1 AND scope = '_messages' AND sort_key <= $3
			AND sort_key <> ALL($4::bigint[])
			ORDER BY sort_key DESC LIMIT $2)
		UNION ALL
		(SELECT scope, sort_key, jsonb_build_object('kind', value->'kind', 'ok', value->'ok', 'builtin', value->'builtin', 'action', value->'action',
				'agent', value->'agent', 'params', value->'params',
				'writes', (SELECT jsonb_agg(jsonb_build_object('op', w->'op', 'scope', w->'scope', 'key', w->'key'))
					FROM jsonb_array_elements(CASE WHEN jsonb_typeof(value->'writes') = 'array' THEN value->'writes' ELSE '[]' END) w)), writer
			FROM state WHERE room_id = $1 AND scope = '_audit' AND sort_key <= $3
			ORDER BY sort_key DESC LIMIT $2)`
	// sqlMarkRead records an agent's context read: the room seq it saw,
	// one more read, and the newest message it was shown (monotonic, so
	// concurrent reads cannot move the marks back).
	sqlMarkRead = `UPDATE agents SET last_context_seq = greatest(last_context_seq, $3), context_reads = context_reads + 1,
		last_seen_seq = greatest(last_seen_seq, $4) WHERE room_id = $1 AND id = $2`
	// sqlAuditPage reads a page of a room's _audit entries in seq order,
	// from state and from state_archive, where retention moves old log
	// entries (indexes state_scope_sort, state_archive_sort).
	sqlAuditPage = `SELECT sort_key, value FROM (
		(SELECT sort_key, value FROM state WHERE room_id = $1 AND scope = '_audit' AND sort_key > $2 AND sort_key <= $3
			ORDER BY sort_key LIMIT $4)
		UNION ALL
		(SELECT sort_key, value FROM state_archive WHERE room_id = $1 AND scope = '_audit' AND sort_key > $2 AND sort_key <= $3
			ORDER BY sort_key LIMIT $4)) t ORDER BY sort_key LIMIT $4`
	// sqlAuditNewest reads a room's newest _audit entries up to a seq,
	// newest first (the live log only: the feed is recent).
	sqlAuditNewest = `SELECT sort_key, value FROM state WHERE room_id = $1 AND scope = '_audit' AND sort_key <= $2
		ORDER BY sort_key DESC LIMIT $3`
	// sqlAuditOfKind reads a room's _audit entries of one kind up to a
	// seq, in seq order, archive included.
	sqlAuditOfKind = `SELECT sort_key, value FROM (
		SELECT sort_key, value FROM state WHERE room_id = $1 AND scope = '_audit' AND sort_key <= $2 AND value->>'kind' = $3
		UNION ALL
		SELECT sort_key, value FROM state_archive WHERE room_id = $1 AND scope = '_audit' AND sort_key <= $2 AND value->>'kind' = $3) t
		ORDER BY sort_key LIMIT $4`
	// sqlGatedKeys finds which of a room's keys (scope $2[i], key $3[i])
	// have an enabled expression.
	sqlGatedKeys = `SELECT s.scope, s.key FROM state s JOIN unnest($2::text[], $3::text[]) AS k(scope, key)
			ON s.scope = k.scope AND s.key = k.key WHERE s.room_id = $1 AND s.enabled_expr IS NOT NULL`
	// sqlKeyChain follows one key's versions back from the audit entry at
	// seq $4, through each delta's revision_before: two primary-key
	// lookups (state, state_archive) per version, at most $5 versions.
	sqlKeyChain = `WITH RECURSIVE chain(seq, value, n) AS (
			SELECT sort_key, value, 1 FROM (
				SELECT sort_key, value FROM state WHERE room_id = $1 AND scope = '_audit' AND key = $4::bigint::text
				UNION ALL
				SELECT sort_key, value FROM state_archive WHERE room_id = $1 AND scope = '_audit' AND key = $4::bigint::text) s
		UNION ALL
			SELECT a.sort_key, a.value, c.n + 1 FROM chain c
			CROSS JOIN LATERAL (SELECT (d->>'revision_before')::bigint AS prev FROM jsonb_array_elements(c.value->'delta') d
				WHERE d->>'scope' = $2::text AND d->>'key' = $3::text LIMIT 1) l
			CROSS JOIN LATERAL (
				SELECT sort_key, value FROM state WHERE room_id = $1 AND scope = '_audit' AND key = l.prev::text
				UNION ALL
				SELECT sort_key, value FROM state_archive WHERE room_id = $1 AND scope = '_audit' AND key = l.prev::text) a
			WHERE c.n < $5 AND l.prev > 0)
		SELECT seq, value FROM chain ORDER BY n`
	// sqlKeyLastWrite finds a key's newest write before a seq, where no
	// link leads to it (across a deletion): a backward walk of the log
	// (index state_scope_sort) that stops at the first entry touching it.
	sqlKeyLastWrite = `SELECT sort_key FROM state WHERE room_id = $1 AND scope = '_audit' AND sort_key < $2
		AND value->'delta' @> $3::jsonb ORDER BY sort_key DESC LIMIT 1`
	// sqlKeyLastWriteArchived is sqlKeyLastWrite over state_archive.
	sqlKeyLastWriteArchived = `SELECT sort_key FROM state_archive WHERE room_id = $1 AND scope = '_audit' AND sort_key < $2
		AND value->'delta' @> $3::jsonb ORDER BY sort_key DESC LIMIT 1`
)
