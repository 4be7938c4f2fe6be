package httpmw

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxBuckets bounds a limiter's memory whatever its keys: past it, new
// keys share one bucket until idle ones are swept.
const maxBuckets = 100_000

// overflowKey is the bucket keys share when a limiter is full.
const overflowKey = "\x00overflow"

// Limiter keeps one token bucket per key. Buckets idle for longer than it
// takes them to refill are dropped, so memory stays bounded by the number
// of recently active keys (and by maxBuckets).
type Limiter struct {
	mu      sync.Mutex
	rps     rate.Limit
	burst   int
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

// NewLimiter returns a limiter allowing rps requests per second per key,
// with bursts of burst.
func NewLimiter(rps float64, burst int) *Limiter {
	return &Limiter{rps: rate.Limit(rps), burst: burst, buckets: map[string]*bucket{}, swept: time.Now()}
}

// Allow takes one token for key; when none is left it reports how long
// until one is.
func (l *Limiter) Allow(key string) (time.Duration, bool) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	// Sweep idle buckets every minute, or every second while full.
	if since := now.Sub(l.swept); since > time.Minute || (since > time.Second && len(l.buckets) >= maxBuckets) {
		idle := time.Duration(float64(l.burst)/float64(l.rps)*float64(time.Second)) + time.Minute
		for k, b := range l.buckets {
			if now.Sub(b.seen) > idle {
				delete(l.buckets, k)
			}
		}
		l.swept = now
	}
	b := l.buckets[key]
	if b == nil && len(l.buckets) >= maxBuckets {
		key = overflowKey
		b = l.buckets[key]
	}
	if b == nil {
		b = &bucket{lim: rate.NewLimiter(l.rps, l.burst)}
		l.buckets[key] = b
	}
	b.seen = now
	res := b.lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d, false
	}
	return 0, true
}
