package substrate

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/internal/sweep"
)

// PurgeExpired deletes entries whose "delete" timer ran out more than a
// minute ago (they are already invisible), keeping each room's message
// count in step. It takes each room's row lock first, as a mutation or a
// deletion of the room does (see lockedRoom). It returns how many entries
// went.
//
// It finds the rooms first and then purges room by room, so every change
// names its room (one shard when rooms are sharded; README, "Scaling out").
func (s *Service) PurgeExpired(ctx context.Context) (int64, error) {
	rows, err := s.db.Query(ctx, `SELECT DISTINCT room_id FROM state WHERE timer_effect = 'delete'
		AND (timer_expires_at < now() - interval '1 minute' OR timer_ticks_left <= 0)`)
	if err != nil {
		return 0, err
	}
	rooms, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	var total int64
	for i := 0; i < len(rooms); i++ {
		room := rooms[i]
		var n int64
		// A batch at a time, as RetainLogs does: the room's lock is held
		// for one bounded statement, however many entries ran out.
		err := s.lockedRoom(ctx, room, func(ctx context.Context, tx pgx.Tx) error {
			return tx.QueryRow(ctx, `WITH gone AS (
				DELETE FROM state WHERE (room_id, scope, key) IN (
					SELECT room_id, scope, key FROM state WHERE room_id = $1 AND timer_effect = 'delete'
						AND (timer_expires_at < now() - interval '1 minute' OR timer_ticks_left <= 0)
					LIMIT $2)
				RETURNING scope, sort_key),
			msgs AS (SELECT count(*) AS n FROM gone WHERE scope = '_messages' AND sort_key IS NOT NULL),
			-- The rooms row only when messages went: it is the row every
			-- mutation of the room updates, and a purge of other entries
			-- has no business waiting for it.
			fix AS (UPDATE rooms SET message_count = greatest(message_count - (SELECT n FROM msgs), 0)
				WHERE id = $1 AND (SELECT n FROM msgs) > 0)
			SELECT count(*) FROM gone`, room, retainBatch).Scan(&n)
		})
		if errors.Is(err, errRoomGone) {
			continue
		}
		if err != nil {
			return total, err
		}
		total += n
		if n == retainBatch {
			i-- // more in this room
		}
	}
	return total, nil
}

// errRoomGone: the room was deleted before the janitor reached it.
var errRoomGone = errors.New("room deleted")

// lockedRoom runs fn in a transaction holding the room's row lock, taken
// before anything else. The janitor's statements delete a room's rows and
// update its row; a mutation, and a deletion of the room (which cascades
// to its rows), take the room row first. Taken in the other order, each
// could wait for the other until PostgreSQL aborts one as a deadlock
// (TestRetainLogsBesideRoomDeletion), and rows archived after the room's
// deletion would outlive it. The lock is held for one bounded batch.
func (s *Service) lockedRoom(ctx context.Context, room string, fn func(context.Context, pgx.Tx) error) error {
	return s.db.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM rooms WHERE id = $1 FOR NO KEY UPDATE`, room).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return errRoomGone
		}
		if err != nil {
			return err
		}
		return fn(ctx, tx)
	})
}

// retainedLogs are the logs RetainLogs bounds.
var retainedLogs = []string{ScopeMessages, ScopeAudit}

// retainBatch bounds one archiving statement, so the janitor never holds
// a large transaction, nor the room's lock for long.
const retainBatch = 2_000

// archiveCols are the columns a log entry keeps in state_archive: named,
// since state has columns the archive does not (search_tsv: archived
// entries are not searched).
const archiveCols = `room_id, scope, key, sort_key, value, version, revision, writer, via, created_at, updated_at,
	timer_json, timer_expires_at, timer_ticks_left, timer_tick_on, timer_effect, timer_started_at, enabled_expr`

// RetainLogs moves the entries of each room's _messages and _audit logs
// beyond the newest Limits.KeepLogEntries to state_archive, keeping each
// room's message count in step. It holds the room's lock for each batch
// (see lockedRoom). It returns how many entries moved.
func (s *Service) RetainLogs(ctx context.Context) (int64, error) {
	keep := s.lim.KeepLogEntries
	// Every mutation appends one audit entry, so a room whose seq is
	// below the limit holds fewer entries than that in either log.
	rows, err := s.db.Query(ctx, `SELECT id FROM rooms WHERE seq > $1`, keep)
	if err != nil {
		return 0, err
	}
	rooms, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	var moved int64
	for _, room := range rooms {
		for _, scope := range retainedLogs {
			var cutoff *int64
			err := s.db.QueryRow(ctx, `SELECT sort_key FROM state WHERE room_id = $1 AND scope = $2 AND sort_key IS NOT NULL
				ORDER BY sort_key DESC OFFSET $3 LIMIT 1`, room, scope, keep-1).Scan(&cutoff)
			if errors.Is(err, pgx.ErrNoRows) || cutoff == nil {
				continue
			}
			if err != nil {
				return moved, err
			}
			for {
				var n int64
				err := s.lockedRoom(ctx, room, func(ctx context.Context, tx pgx.Tx) error {
					return tx.QueryRow(ctx, `WITH gone AS (
						DELETE FROM state WHERE (room_id, scope, key) IN (
							SELECT room_id, scope, key FROM state WHERE room_id = $1 AND scope = $2 AND sort_key < $3
							ORDER BY sort_key LIMIT $4)
						RETURNING *),
					kept AS (INSERT INTO state_archive (`+archiveCols+`) SELECT `+archiveCols+` FROM gone ON CONFLICT DO NOTHING),
					fix AS (UPDATE rooms SET message_count = greatest(message_count - (SELECT count(*) FROM gone), 0)
						WHERE id = $1 AND $2 = '_messages')
					SELECT count(*) FROM gone`, room, scope, *cutoff, retainBatch).Scan(&n)
				})
				if errors.Is(err, errRoomGone) {
					break
				}
				if err != nil {
					return moved, err
				}
				moved += n
				if n < retainBatch {
					break
				}
			}
		}
	}
	return moved, nil
}

// RunJanitor purges expired entries and archives old log entries every
// interval until ctx ends.
func (s *Service) RunJanitor(ctx context.Context, interval time.Duration) {
	sweep.Every(ctx, interval, s.log,
		sweep.Job{Run: s.PurgeExpired, Failed: "purging expired entries failed", Done: "purged expired entries", Level: slog.LevelDebug},
		sweep.Job{Run: s.RetainLogs, Failed: "archiving old log entries failed", Done: "archived old log entries", Level: slog.LevelInfo})
}
