package pgtest

import (
	"testing"
	"time"
)

// Eventually waits until cond holds, checking it every few milliseconds,
// and fails the test naming what it waited for (what, formatted with
// args) once within has passed without it. It is for a test that waits on
// something another process, goroutine or the database makes true (a
// row written, a wait parked, a page updated) and has no channel to
// receive it on: the test goes on as soon as the condition holds, not
// after a guess at how long it takes, and a condition that never holds
// fails with what was missing instead of an assertion later. An arg that
// is a func() any is called when the message is written, so the message
// can say how far things got (how many of n were seen).
func Eventually(t testing.TB, within time.Duration, cond func() bool, what string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(within)
	for tick := time.Millisecond; !cond(); tick = min(2*tick, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			say := []any{within}
			for _, a := range args {
				if f, ok := a.(func() any); ok {
					a = f()
				}
				say = append(say, a)
			}
			t.Fatalf("waited %v for "+what, say...)
		}
		time.Sleep(tick)
	}
}
