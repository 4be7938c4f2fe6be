package rest

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiter keeps one token bucket per credential. Buckets idle for longer
// than it takes them to refill are dropped, so memory stays bounded by the
// number of recently active credentials.
type limiter struct {
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

func newLimiter(rps float64, burst int) *limiter {
	return &limiter{rps: rate.Limit(rps), burst: burst, buckets: map[string]*bucket{}, swept: time.Now()}
}

// allow takes one token for key; when none is left it reports how long
// until one is.
func (l *limiter) allow(key string) (time.Duration, bool) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) > time.Minute {
		idle := time.Duration(float64(l.burst)/float64(l.rps)*float64(time.Second)) + time.Minute
		for k, b := range l.buckets {
			if now.Sub(b.seen) > idle {
				delete(l.buckets, k)
			}
		}
		l.swept = now
	}
	b := l.buckets[key]
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
