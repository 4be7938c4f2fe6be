package bench

import (
	"context"
	"strings"
	"sync/atomic"
	"time"
)

// ParsePGBench is parsePGBench, for the tests.
var ParsePGBench = parsePGBench

// StallsCounted runs the soak's stall watcher over two page streams for
// d, the room changing all along: one stream receives an update at each
// change, the other none after the first. It returns the errors counted
// for each (by their message) and in all.
func StallsCounted(d, after, period time.Duration) (quiet, live, all int64) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	t := newTally(start, start.Add(time.Hour))
	ss := []*stream{{}, {}}
	var changed atomic.Int64
	for _, s := range ss {
		s.lastEvent.Store(time.Now().UnixNano())
	}
	done := make(chan struct{})
	go func() { watchStalls(ctx, ss, &changed, t, after, period); close(done) }()
	for ctx.Err() == nil {
		now := time.Now().UnixNano()
		changed.Store(now)
		time.Sleep(period / 4)
		ss[1].lastEvent.Store(time.Now().UnixNano()) // the update that reflects it
		ss[1].stalled.Store(false)
	}
	<-done
	s := t.s[surfPage]
	if strings.Contains(s.FirstError, "live stream 0:") {
		quiet = 1
	}
	if strings.Contains(s.FirstError, "live stream 1:") {
		live = 1
	}
	return quiet, live, s.Errors
}

// AttachBounds is attachBounds, for the tests.
var AttachBounds = attachBounds

// ContextTokenOf is the token the context workload's reader c sends for
// credential as, of a room whose room token is "room", view token "view"
// and agents' tokens "agent0" and "agent1".
func ContextTokenOf(as string, c int) string {
	return contextToken(&room{token: "room", viewToken: "view", agents: []string{"agent0", "agent1"}}, as, c)
}
