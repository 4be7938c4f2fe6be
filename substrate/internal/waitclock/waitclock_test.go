package waitclock

import (
	"testing"
	"time"
)

// A foreseen moment is read just after it passes; a use of now that
// could not be foreseen is read at the next step of the cadence, aligned
// on the wall clock, when that comes first.
func TestNextReadsJustAfterTheMomentOrAtTheCadence(t *testing.T) {
	now := time.Date(2026, 1, 2, 15, 4, 5, 300_000_000, time.UTC)
	moment := now.Add(10 * time.Second)
	cases := []struct {
		name     string
		foreseen time.Time
		opaque   bool
		want     time.Time
	}{
		{"nothing", time.Time{}, false, time.Time{}},
		{"foreseen", moment, false, moment.Add(Margin)},
		{"opaque", time.Time{}, true, time.Date(2026, 1, 2, 15, 4, 10, 0, time.UTC)},
		{"both, the cadence first", moment, true, time.Date(2026, 1, 2, 15, 4, 10, 0, time.UTC)},
		{"both, the moment first", now.Add(time.Second), true, now.Add(time.Second + Margin)},
	}
	for _, c := range cases {
		if got := Next(now, c.foreseen, c.opaque, 5*time.Second); !got.Equal(c.want) {
			t.Errorf("%s: next read at %v, want %v", c.name, got, c.want)
		}
	}
}

// A wait sleeps until the earliest moment, never less than a millisecond
// (a moment already past), and never longer than the safety net.
func TestSleepIsTheEarliestMomentWithinTheRecheck(t *testing.T) {
	now := time.Now()
	if got := Sleep(now, 5*time.Second); got != 5*time.Second {
		t.Errorf("no moment: slept %v, want the recheck", got)
	}
	if got := Sleep(now, 5*time.Second, time.Time{}, now.Add(2*time.Second), now.Add(time.Second)); got != time.Second {
		t.Errorf("slept %v, want 1s", got)
	}
	if got := Sleep(now, 5*time.Second, now.Add(-time.Second)); got != time.Millisecond {
		t.Errorf("a moment past: slept %v, want 1ms", got)
	}
	if got := Sleep(now, 5*time.Second, now.Add(time.Minute)); got != 5*time.Second {
		t.Errorf("a moment beyond the recheck: slept %v, want the recheck", got)
	}
}

// The alarm rings for the next read, or at the deadline when that comes
// first, and says which.
func TestAlarmRingsAtTheDeadlineWhenItComesFirst(t *testing.T) {
	a := NewAlarm(time.Now().Add(time.Hour))
	if last := a.Set(time.Millisecond); last {
		t.Fatal("a read due before the deadline was taken for the timeout")
	}
	<-a.C()
	a = NewAlarm(time.Now())
	if last := a.Set(time.Hour); !last {
		t.Fatal("a deadline before the next read was not the last ring")
	}
	<-a.C()
	a.Stop()
}
