// Package workmeter is the token buckets beneath a room's expression
// budget: per budget key, a bucket of cost that refills at a share of a
// rate, charged without a lock by the evaluations of the requests it
// admitted. What costs what, whose budget a request draws on (the key and
// its share) and the refusal are the rule: substrate/exprbudget.
package workmeter

import (
	"sync"
	"sync/atomic"
	"time"
)

// Bucket is one budget: a token bucket of cost. Evaluations add to spent
// without a lock (a read may run thousands); refill settles it under the
// meter's lock.
type Bucket struct {
	spent  atomic.Int64
	tokens float64
	at     time.Time
	// share of the meter's rate this bucket refills at.
	share float64
	// inUse counts the requests admitted on this bucket and not yet
	// done: they charge it, so the sweep keeps it.
	inUse atomic.Int64
}

// Charge counts cost against b (settled at the next admission).
func (b *Bucket) Charge(cost int64) { b.spent.Add(cost) }

// Release ends one admitted request's use of b.
func (b *Bucket) Release() { b.inUse.Add(-1) }

// Meter holds every active budget's bucket. It is safe for concurrent
// use.
type Meter struct {
	mu      sync.Mutex
	buckets map[string]*Bucket
	rate    float64 // cost per second
	burst   float64 // the bucket's size
}

// MaxBuckets bounds the buckets kept; past it, full buckets (budgets
// nothing spent lately) that no request still charges are dropped, which
// loses nothing.
const MaxBuckets = 4096

// New returns a meter whose buckets refill at perSecond (times their
// share) and hold twice that.
func New(perSecond int) *Meter {
	return &Meter{buckets: map[string]*Bucket{}, rate: float64(perSecond), burst: 2 * float64(perSecond)}
}

// refill brings b up to now; mu is held.
func (m *Meter) refill(b *Bucket, now time.Time) {
	b.tokens = min(m.burst*b.share, b.tokens+now.Sub(b.at).Seconds()*m.rate*b.share) - float64(b.spent.Swap(0))
	b.at = now
}

// Admit reports whether the budget key (refilling at share of the rate)
// may start more work now, and if not, how long until it may; admitted,
// it returns the bucket to charge, which the caller releases when the
// request is done. A request admitted while the budget lasted finishes
// even if it overdraws it: the debt delays the next requests on the same
// budget, never anyone else's.
func (m *Meter) Admit(key string, share float64, now time.Time) (*Bucket, time.Duration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.buckets[key]
	if !ok {
		if len(m.buckets) >= MaxBuckets {
			m.sweep(now)
		}
		b = &Bucket{tokens: m.burst * share, at: now, share: share}
		m.buckets[key] = b
	}
	m.refill(b, now)
	if b.tokens > 0 {
		b.inUse.Add(1)
		return b, 0, true
	}
	return nil, time.Duration((-b.tokens + 1) / (m.rate * b.share) * float64(time.Second)), false
}

// sweep drops the buckets that have refilled and that no request still
// charges; mu is held.
func (m *Meter) sweep(now time.Time) {
	for id, b := range m.buckets {
		if m.refill(b, now); b.tokens >= m.burst*b.share && b.inUse.Load() == 0 {
			delete(m.buckets, id)
		}
	}
}

// InUse is, for every bucket kept, how many admitted requests have not
// released it.
func (m *Meter) InUse() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int64, len(m.buckets))
	for k, b := range m.buckets {
		out[k] = b.inUse.Load()
	}
	return out
}
