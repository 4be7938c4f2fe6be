package memo

import (
	"fmt"
	"testing"
	"time"
)

// A table answers for the key asked about, across its starting over.
func TestTableAnswersForItsKey(t *testing.T) {
	tab := NewTable[string, string](8)
	calls := 0
	f := func(k string) string { calls++; return "v" + k }
	for i := range 30 {
		k := fmt.Sprint(i % 12)
		if v := tab.Get(k, f); v != "v"+k {
			t.Fatalf("%s: %s", k, v)
		}
	}
	if len(tab.m) > 8 {
		t.Fatalf("the table holds %d answers, past its bound", len(tab.m))
	}
	before := calls
	tab.Get(fmt.Sprint(29%12), f)
	if calls != before {
		t.Fatal("an answer just kept was computed again")
	}
}

func TestBoundedKeepsAtMostItsBound(t *testing.T) {
	var b Bounded[int, int]
	for i := range 10 {
		b.Keep(i, i, 4)
	}
	if _, ok := b.Get(4); ok {
		t.Fatal("an answer past the bound was kept")
	}
	if v, ok := b.Get(3); !ok || v != 3 {
		t.Fatal("an answer within the bound was lost")
	}
	var m Map[int, []int]
	m.Keep(1, nil)
	if _, ok := m.Get(1); !ok {
		t.Fatal("a nil answer reads as not kept")
	}
}

// An answer holds until the moment its computation named, never at or
// after it; one named for no moment holds for good.
func TestUntilHoldsUntilItsMoment(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var u Until[int]
	calls := 0
	at := func(until time.Time) func(time.Time) (int, time.Time) {
		return func(time.Time) (int, time.Time) { calls++; return calls, until }
	}
	if v := u.Get(t0, at(t0.Add(time.Second))); v != 1 {
		t.Fatalf("first answer %d", v)
	}
	if v := u.Get(t0.Add(999*time.Millisecond), at(time.Time{})); v != 1 {
		t.Fatalf("an answer still holding was computed again: %d", v)
	}
	if v := u.Get(t0.Add(time.Second), at(time.Time{})); v != 2 {
		t.Fatalf("an answer was served at the moment it stops holding: %d", v)
	}
	if v := u.Get(t0.Add(1000*time.Hour), at(time.Time{})); v != 2 {
		t.Fatalf("an answer holding for good was computed again: %d", v)
	}
}
