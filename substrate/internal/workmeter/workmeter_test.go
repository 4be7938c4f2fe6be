package workmeter

import (
	"fmt"
	"testing"
	"time"
)

// The meter's sweep (past MaxBuckets buckets) dropped every full bucket,
// those of requests admitted and still running included: what such a
// request spent after the sweep went to a bucket nobody read, and the
// room's next request got a fresh, full one. A bucket in use is kept.
func TestSweepKeepsBucketsInUse(t *testing.T) {
	m := New(100)
	now := time.Now()
	b, _, ok := m.Admit("busy", 1, now)
	if !ok {
		t.Fatal("not admitted")
	}
	// An hour on, every bucket is full; enough rooms arrive to sweep.
	later := now.Add(time.Hour)
	for i := range MaxBuckets {
		if _, _, ok := m.Admit(fmt.Sprint("room", i), 1, later); !ok {
			t.Fatal("a fresh room was refused")
		}
	}
	// The request admitted first now spends far past the budget.
	b.Charge(int64(10 * m.burst))
	if _, _, ok := m.Admit("busy", 1, later); ok {
		t.Fatal("the room's spending while the sweep ran was forgotten: its next request was admitted")
	}
	// Once the request is done, the bucket may go (when full again).
	b.Release()
	m.Admit("one more", 1, later.Add(time.Hour))
	if _, ok := m.buckets["busy"]; ok {
		t.Fatal("a full bucket nobody uses was kept")
	}
}
