// Package sweep schedules the janitor: the retention sweeps run in turn
// at an interval, each logged by what it did. It decides nothing of what
// goes: the sweeps themselves (which entries ran out, which log entries
// are archived, in which lock order) are the core's rules
// (substrate/janitor.go).
package sweep

import (
	"context"
	"log/slog"
	"time"
)

// Job is one sweep.
type Job struct {
	// Run sweeps once and returns how many entries it handled. Required.
	Run func(context.Context) (int64, error)
	// Failed is logged at Warn, with the error, when Run fails (and the
	// sweep is not ending). Required.
	Failed string
	// Done is logged at Level, with the count, when Run handled entries.
	// Required.
	Done string
	// Level is Done's level; the zero value is slog.LevelInfo.
	Level slog.Level
}

// Every runs jobs in turn every interval until ctx ends.
func Every(ctx context.Context, interval time.Duration, log *slog.Logger, jobs ...Job) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, j := range jobs {
				if n, err := j.Run(ctx); err != nil && ctx.Err() == nil {
					log.Warn(j.Failed, "err", err)
				} else if n > 0 {
					log.Log(ctx, j.Level, j.Done, "count", n)
				}
			}
		}
	}
}
