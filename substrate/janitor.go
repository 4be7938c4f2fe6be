package substrate

import (
	"context"
	"time"
)

// PurgeExpired deletes entries whose "delete" timer ran out more than a
// minute ago (they are already invisible), keeping each room's message
// count in step. It takes no room lock: a mutation that renews such an
// entry meanwhile makes it no longer match, and one that recreates it
// inserts afresh. It returns how many entries went.
func (s *Service) PurgeExpired(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.QueryRow(ctx, `WITH gone AS (
			DELETE FROM state WHERE timer_effect = 'delete'
				AND (timer_expires_at < now() - interval '1 minute' OR timer_ticks_left <= 0)
			RETURNING room_id, scope, sort_key),
		msgs AS (SELECT room_id, count(*) AS n FROM gone WHERE scope = '_messages' AND sort_key IS NOT NULL GROUP BY room_id),
		fix AS (UPDATE rooms SET message_count = greatest(message_count - msgs.n, 0) FROM msgs WHERE rooms.id = msgs.room_id)
		SELECT count(*) FROM gone`).Scan(&n)
	return n, err
}

// RunJanitor purges expired entries every interval until ctx ends.
func (s *Service) RunJanitor(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := s.PurgeExpired(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("purging expired entries failed", "err", err)
			} else if n > 0 {
				s.log.Debug("purged expired entries", "count", n)
			}
		}
	}
}
