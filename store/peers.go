package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"
)

// PeerOptions configure RunPeers.
type PeerOptions struct {
	// Every is how often the process refreshes its row and recounts.
	// Default 2 s.
	Every time.Duration
	// OnCount receives the number of live processes, this one included,
	// after each refresh. Required.
	OnCount func(n int)
}

// RunPeers keeps this process's row in syncd_processes fresh until ctx
// ends, then removes it, and reports how many processes refreshed theirs
// within the last three periods. A process that dies without removing its
// row is counted for three periods more: its peers are stricter for a few
// seconds, never looser. Database errors are logged and retried on the
// next tick; the last count stands meanwhile.
func (db *DB) RunPeers(ctx context.Context, o PeerOptions) {
	if o.Every <= 0 {
		o.Every = 2 * time.Second
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	beat := func() {
		var n int
		// EXCLUDED.seen, the proposed row's now(): Citus refuses a
		// function that is not immutable in DO UPDATE.
		err := db.QueryRow(ctx, `WITH me AS (
				INSERT INTO syncd_processes (id, seen) VALUES ($1, now())
				ON CONFLICT (id) DO UPDATE SET seen = EXCLUDED.seen),
			gone AS (DELETE FROM syncd_processes WHERE seen < now() - make_interval(secs => $2 * 10))
			SELECT 1 + count(*) FROM syncd_processes WHERE id <> $1 AND seen > now() - make_interval(secs => $2 * 3)`,
			id, o.Every.Seconds()).Scan(&n)
		if err != nil {
			if ctx.Err() == nil {
				db.log.Warn("refreshing this process's row failed", "err", err)
			}
			return
		}
		o.OnCount(n)
	}
	beat()
	t := time.NewTicker(o.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_, _ = db.Exec(dctx, `DELETE FROM syncd_processes WHERE id = $1`, id)
			cancel()
			return
		case <-t.C:
			beat()
		}
	}
}
