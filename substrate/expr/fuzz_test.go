package expr_test

import (
	"context"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// Any source text either fails to compile with a cel_error or evaluates to
// a value or a cel_error, without panicking and within the deadline.
func FuzzCompileEval(f *testing.F) {
	for _, s := range []string{
		`state._shared.phase == "active"`, `views.total + params.n`, `state._shared.tasks.keys()`,
		`lists.range(100).map(i, i * i).size()`, `"a".repeat(3)`, `has(state._shared.x)`, `[1,2,3].filter(x, x > 1)`,
		`state._shared.?missing.orValue(1)`, `{"k": [1, 2.5, "s", null, true]}`, `now - duration("1h")`,
		`math.greatest([1, 2])`, `state._shared.tasks.entries().map(e, e.value)`, `1 / 0`, `"x" + `, `((((`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		p, err := env.Compile(src)
		if err != nil {
			if e, ok := err.(*errs.Error); !ok || e.Code != errs.CELError {
				t.Fatalf("compile %q: %v is not a cel_error", src, err)
			}
			return
		}
		start := time.Now()
		_, err = env.Eval(context.Background(), p, vars())
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("eval %q ran %v past the %v deadline", src, d, env.Limits().Timeout)
		}
		if err != nil {
			if e, ok := err.(*errs.Error); !ok || e.Code != errs.CELError {
				t.Fatalf("eval %q: %v is not a cel_error", src, err)
			}
		}
	})
}
