package substrate

// The statements a request runs against state on its hot paths, named so
// that TestHotQueryPlans can EXPLAIN each one on a realistically large
// table: a plan that scans the whole table (or a room's whole history)
// fails the test, not production. Each must cost what the request needs,
// whatever the length of the room's _messages and _audit.
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
	sqlScopeLogPage = entryCols + `WHERE room_id = $1 AND scope = $2 AND sort_key > $3` + liveSQL + ` ORDER BY sort_key LIMIT $4`
	// sqlMessagesRecent reads the newest messages up to a seq.
	sqlMessagesRecent = `SELECT sort_key, value, writer, via FROM (SELECT sort_key, value, writer, via FROM state
		WHERE room_id = $1 AND scope = '_messages' AND sort_key <= $3` + liveSQL + `
		ORDER BY sort_key DESC LIMIT $2) t ORDER BY sort_key`
	// sqlMessagesAfter pages messages after a seq, up to the read's seq.
	sqlMessagesAfter = `SELECT sort_key, value, writer, via FROM state WHERE room_id = $1 AND scope = '_messages'
		AND sort_key > $2 AND sort_key <= $4` + liveSQL + `
		ORDER BY sort_key LIMIT $3`
	// sqlUnread counts a reader's unread (and directed) messages, bounded;
	// its own messages are not unread.
	sqlUnread = `SELECT count(*), count(*) FILTER (WHERE directed) FROM (
			SELECT (value->'to') ? $3 AS directed FROM state
			WHERE room_id = $1 AND scope = '_messages' AND sort_key > $2 AND sort_key <= $4 AND writer <> $3` + liveSQL + `
			LIMIT $5) t`
	// sqlLogPage reads the newest entries of a log up to a seq.
	sqlLogPage = `SELECT key, value, writer, via FROM state WHERE room_id = $1 AND scope = $2 AND sort_key <= $4` + liveSQL + `
		ORDER BY sort_key DESC LIMIT $3`
	// sqlInvocationCounts counts invocations over the last 500 audit
	// entries.
	sqlInvocationCounts = `SELECT value->>'action' FROM (SELECT value FROM state
		WHERE room_id = $1 AND scope = '_audit' AND sort_key IS NOT NULL ORDER BY sort_key DESC LIMIT 500) t
		WHERE value->>'kind' = 'invoke' AND (value->>'ok')::boolean`
)
