package expr_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/substrate/expr"
)

// An evaluation with a clock reports when now next changes a comparison
// of now, solved from the expression, or that it cannot tell.
func TestClockForeseesComparisonsOfNow(t *testing.T) {
	v := vars()
	v.State["_shared"].(map[string]any)["due"] = "2026-01-02T03:10:00Z"
	at := func(s string) time.Time { t, _ := time.Parse(time.RFC3339, s); return t }
	cases := []struct {
		src    string
		next   time.Time // zero: none
		opaque bool
	}{
		{src: `now > timestamp("2026-01-02T03:05:00Z")`, next: at("2026-01-02T03:05:00Z")},
		{src: `timestamp("2026-01-02T03:05:00Z") <= now`, next: at("2026-01-02T03:05:00Z")},
		{src: `now < timestamp("2026-01-01T00:00:00Z")`}, // past: nothing to come
		{src: `timestamp(state._shared.due) < now`, next: at("2026-01-02T03:10:00Z")},
		{src: `now - timestamp(state._shared.due) > duration("5m")`, next: at("2026-01-02T03:15:00Z")},
		{src: `now + duration("1h") >= timestamp(state._shared.due)`, next: at("2026-01-02T02:10:00Z").Add(0)}, // already past
		{src: `duration("30s") + now > timestamp("2026-01-02T03:05:00Z")`, next: at("2026-01-02T03:04:30Z")},
		{src: `state._shared.turn > 5 || now > timestamp("2026-01-02T04:00:00Z") && now > timestamp("2026-01-02T03:30:00Z")`, next: at("2026-01-02T03:30:00Z")},
		{src: `timestamp(state._shared.missing) < now`}, // an error: a write must come first
		{src: `now.getHours() > 5`, opaque: true},
		{src: `int(now) > 0`, opaque: true},
		{src: `now - now > duration("1s")`, opaque: true},
		{src: `[state._shared.due].exists(d, timestamp(d) < now)`, opaque: true},
		{src: `state._shared.turn > 5`},
		{src: `now > timestamp(state._shared.?due.orValue("2030-01-01T00:00:00Z"))`, next: at("2026-01-02T03:10:00Z")},
		{src: `has(state._shared.due) && now >= timestamp(state._shared.due) - duration("1m")`, next: at("2026-01-02T03:09:00Z")},
		// A comprehension on the other side is written back as an
		// expression of its own (the environment keeps macro calls, for
		// Explain): its moment is foreseen.
		{src: `now > timestamp("2030-01-01T00:00:00Z") + duration(string([1].map(x, x).size()) + "s")`, next: at("2030-01-01T00:00:01Z")},
	}
	for _, c := range cases {
		p, err := env.Compile(c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		clk := &expr.Clock{}
		if _, err := env.Eval(expr.WithClock(context.Background(), clk), p, v); err != nil && !c.opaque && c.src != `timestamp(state._shared.missing) < now` {
			t.Fatalf("%s: %v", c.src, err)
		}
		next, opaque := clk.Next()
		if c.next.Before(v.Now) {
			c.next = time.Time{}
		}
		if !next.Equal(c.next) || opaque != c.opaque {
			t.Errorf("%s: next %v opaque %v, want %v %v", c.src, next, opaque, c.next, c.opaque)
		}
	}
}

// BenchmarkClock is what foreseeing the moment adds to an evaluation of
// a comparison of now: go test -run - -bench Clock ./substrate/expr/
func BenchmarkClock(b *testing.B) {
	v := vars()
	v.State["_shared"].(map[string]any)["due"] = "2026-01-02T03:10:00Z"
	p, err := env.Compile(`timestamp(state._shared.due) < now`)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			if _, err := env.Eval(ctx, p, v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("clock", func(b *testing.B) {
		for b.Loop() {
			if _, err := env.Eval(expr.WithClock(ctx, &expr.Clock{}), p, v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// The moments of an expression with many comparisons of now cost, all
// together, about one more evaluation at most: past it the clock cannot
// foresee (the reader re-checks on its cadence).
func TestClockMomentsAreBounded(t *testing.T) {
	small := expr.MustNew(expr.Options{CostLimit: 50})
	src := `false`
	for i := range 30 {
		src += fmt.Sprintf(` || now > timestamp(state._shared.due) + duration("%ds")`, i)
	}
	p, err := small.Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	v := vars()
	v.State["_shared"].(map[string]any)["due"] = "2030-01-01T00:00:00Z"
	clk := &expr.Clock{}
	var cost uint64
	ctx := expr.WithMeter(expr.WithClock(context.Background(), clk), func(c uint64) { cost += c })
	if _, err := small.Eval(ctx, p, v); err != nil && !strings.Contains(err.Error(), "cost limit") {
		t.Fatal(err)
	}
	next, opaque := clk.Next()
	t.Logf("charged %d, next %v, opaque %v", cost, next, opaque)
	if !opaque || cost > 3*50 {
		t.Errorf("30 moments at a cost limit of 50: charged %d, opaque %v; want at most about twice the limit and opaque", cost, opaque)
	}
}
