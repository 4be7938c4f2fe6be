// Package waitclock schedules a wait's sleeps: when a wait that read the
// room at some moment reads it again, and the one timer that wakes it for
// that or for its timeout. No write and no notification marks the moment
// at which now changes a condition's outcome, or a timer changes what the
// room shows, so the wait sleeps until then instead of polling.
//
// It decides nothing of what a wait sees: which moments matter (the
// foreseen moments of now, the timers that change what the wait reads)
// is the core's rule (substrate/wait.go, which reads them off the read
// and its expr.Clock); this package only turns them into a sleep.
package waitclock

import "time"

// Margin is how long after a foreseen moment a wait reads again:
// `now > t` holds only once t has passed.
const Margin = time.Millisecond

// Next is when a read made at now must be made again for what its clock
// saw (zero: not for it): foreseen (zero when nothing was foreseen) plus
// Margin, or, when some use of now could not be foreseen (opaque), the
// next step of cadence, aligned on the wall clock so that the waits of a
// room re-read together and share their round trips.
func Next(now, foreseen time.Time, opaque bool, cadence time.Duration) time.Time {
	next := foreseen
	if !next.IsZero() {
		next = next.Add(Margin)
	}
	if opaque {
		if t := now.Truncate(cadence).Add(cadence); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}

// Sleep is how long a wait that read at now sleeps: until the earliest
// of moments (zero ones are none), at least a millisecond, or recheck
// (the safety net's period) when that comes first.
func Sleep(now time.Time, recheck time.Duration, moments ...time.Time) time.Duration {
	next := recheck
	for _, t := range moments {
		if !t.IsZero() && t.Sub(now) < next {
			next = max(t.Sub(now), time.Millisecond)
		}
	}
	return next
}

// Alarm is a wait's one timer, for both its next read and its timeout.
// It is stopped while the wait reads.
type Alarm struct {
	t        *time.Timer
	deadline time.Time
}

// NewAlarm is a stopped alarm for a wait that times out at deadline.
func NewAlarm(deadline time.Time) *Alarm {
	t := time.NewTimer(time.Until(deadline))
	t.Stop()
	return &Alarm{t: t, deadline: deadline}
}

// Set rings the alarm after d, or at the deadline if that comes first;
// last reports the latter (the wait times out when it rings).
func (a *Alarm) Set(d time.Duration) (last bool) {
	if left := time.Until(a.deadline); left <= d {
		d, last = left, true
	}
	a.t.Reset(d)
	return last
}

// C rings when the alarm set last runs out.
func (a *Alarm) C() <-chan time.Time { return a.t.C }

// Stop stops the alarm.
func (a *Alarm) Stop() { a.t.Stop() }
