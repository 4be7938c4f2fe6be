// Package ratelimit keeps one token bucket per key (a credential, a client
// IP) for the HTTP layers: the REST API and the authorization server.
package ratelimit

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter keeps one token bucket per key. Buckets idle for longer than it
// takes them to refill are dropped, so memory stays bounded by the number
// of recently active keys.
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

// New returns a limiter allowing rps requests per second per key, with
// bursts of burst.
func New(rps float64, burst int) *Limiter {
	return &Limiter{rps: rate.Limit(rps), burst: burst, buckets: map[string]*bucket{}, swept: time.Now()}
}

// Allow takes one token for key; when none is left it reports how long
// until one is.
func (l *Limiter) Allow(key string) (time.Duration, bool) {
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

// ClientIP is the request's remote address without the port. (Behind a
// reverse proxy every client shares the proxy's address; the limits are
// sized for that to stay generous.)
func ClientIP(r *http.Request) string {
	host := r.RemoteAddr
	if i := strings.LastIndexByte(host, ':'); i > 0 {
		host = host[:i]
	}
	return host
}
