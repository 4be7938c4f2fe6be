package httpmw

import (
	"sync"
	"sync/atomic"
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
	peers   *Peers
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
	n    int // the process count its rate was divided by
}

// Peers is how many syncd processes share the rate limits. Each process
// allows its share (the limit divided by the count), so however a load
// balancer spreads a credential's requests, all processes together allow
// no more than the configured limit; with even spreading they allow about
// that much. The zero value, and a nil *Peers, count one process.
type Peers struct{ n atomic.Int32 }

// Set records the number of live processes (at least one).
func (p *Peers) Set(n int) { p.n.Store(int32(max(n, 1))) }

// N is the number of live processes, at least one.
func (p *Peers) N() int {
	if p == nil {
		return 1
	}
	return max(int(p.n.Load()), 1)
}

// NewLimiter returns a limiter allowing rps requests per second per key,
// with bursts of burst, shared among peers (nil: this process alone).
func NewLimiter(rps float64, burst int, peers *Peers) *Limiter {
	return &Limiter{rps: rate.Limit(rps), burst: burst, peers: peers, buckets: map[string]*bucket{}, swept: time.Now()}
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
	n := l.peers.N()
	if b == nil {
		b = &bucket{lim: rate.NewLimiter(l.rps/rate.Limit(n), max(l.burst/n, 1)), n: n}
		l.buckets[key] = b
	} else if b.n != n {
		b.lim.SetLimitAt(now, l.rps/rate.Limit(n))
		b.lim.SetBurstAt(now, max(l.burst/n, 1))
		b.n = n
	}
	b.seen = now
	res := b.lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d, false
	}
	return 0, true
}
