package expr

// When does `now` change what an expression gives? A wait on
// `now > timestamp("…")`, or on a view or gate that compares now with a
// deadline, changes with no write and no timer behind it. An evaluation
// run with a Clock in its context reports the moments after its `now` at
// which a comparison of now may change its outcome, solved from the
// expression: for `now OP x`, `now ± d OP x` and `now - t OP d` (either
// side), where x, d and t do not read now, the moment is x ∓ d (or t + d),
// evaluated with the same variables. A use of now it cannot solve (a
// function of now, a comparison inside a comprehension whose other side
// reads the comprehension's variable) makes the clock opaque: the reader
// then re-checks on a cadence.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/parser"
)

// Clock collects, over the evaluations of one read, the earliest moment
// at which now alone may change what one of them gives. It is safe for
// concurrent use.
type Clock struct {
	// Reads, when set, reports whether the reader's outcome depends on
	// the part of a read named (messages, agents, actions, views); the
	// reader's sites consult it (see the substrate's clockFor).
	Reads func(part string) bool

	mu     sync.Mutex
	next   time.Time
	opaque bool
}

type clockKey struct{}

// WithClock returns ctx whose evaluations report to c (nil: to none).
func WithClock(ctx context.Context, c *Clock) context.Context {
	return context.WithValue(ctx, clockKey{}, c)
}

// ClockOf is the clock ctx's evaluations report to (nil: none).
func ClockOf(ctx context.Context) *Clock {
	c, _ := ctx.Value(clockKey{}).(*Clock)
	return c
}

// Note records that what a read saw may change at t.
func (c *Clock) Note(t time.Time) {
	c.mu.Lock()
	if c.next.IsZero() || t.Before(c.next) {
		c.next = t
	}
	c.mu.Unlock()
}

// Opaque records that now was read in a way whose changes cannot be
// foreseen.
func (c *Clock) Opaque() {
	c.mu.Lock()
	c.opaque = true
	c.mu.Unlock()
}

// Next is the earliest moment noted (zero: none), and whether some use of
// now could not be foreseen.
func (c *Clock) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next, c.opaque
}

// clockPlan is how to find the moments at which now changes a program's
// comparisons: one program per comparison giving the moment, and whether
// some use of now is not covered by them.
type clockPlan struct {
	moments []cel.Program
	opaque  bool
}

// clockPlan is p's plan, made on first use.
func (e *Env) clockPlan(p *Program) *clockPlan {
	p.clockOnce.Do(func() { p.clock = e.planClock(p) })
	return p.clock
}

// planClock finds p's comparisons with now and compiles, for each, the
// expression of the moment it may flip at.
func (e *Env) planClock(p *Program) *clockPlan {
	plan := &clockPlan{}
	if p.checked == nil {
		plan.opaque = true
		return plan
	}
	native := p.checked.NativeRep()
	info := native.SourceInfo()
	uses, covered := 0, 0
	var sources []string
	visitor := ast.NewExprVisitor(func(x ast.Expr) {
		switch x.Kind() {
		case ast.IdentKind:
			if x.AsIdent() == "now" {
				uses++
			}
		case ast.CallKind:
			c := x.AsCall()
			if !comparison[c.FunctionName()] || len(c.Args()) != 2 {
				return
			}
			l, r := c.Args()[0], c.Args()[1]
			for _, sides := range [2][2]ast.Expr{{l, r}, {r, l}} {
				terms, ok := nowAffine(sides[0])
				if !ok || readsNow(sides[1]) {
					continue
				}
				src, err := momentSource(sides[1], terms, info)
				if err != nil {
					return
				}
				sources = append(sources, src)
				covered++
				return
			}
		}
	})
	ast.PostOrderVisit(native.Expr(), visitor)
	if covered != uses {
		plan.opaque = true
	}
	for _, src := range sources {
		checked, iss := e.env.Compile(src)
		if iss != nil && iss.Err() != nil {
			// It reads a comprehension's variable, say: not solvable
			// apart from the expression.
			plan.opaque = true
			continue
		}
		if t := checked.OutputType(); !t.IsExactType(cel.TimestampType) && t.Kind() != types.DynKind {
			plan.opaque = true
			continue
		}
		prg, err := e.env.Program(checked, cel.CostLimit(e.opt.CostLimit), cel.InterruptCheckFrequency(100),
			cel.EvalOptions(cel.OptOptimize, cel.OptTrackCost))
		if err != nil {
			plan.opaque = true
			continue
		}
		plan.moments = append(plan.moments, prg)
	}
	return plan
}

var comparison = map[string]bool{"_<_": true, "_<=_": true, "_>_": true, "_>=_": true, "_==_": true, "_!=_": true}

// nowTerm is a term added to (plus) or taken from now in a side of a
// comparison.
type nowTerm struct {
	x    ast.Expr
	plus bool
}

// nowAffine reports whether x is now plus or minus terms that do not read
// now (now, now + d, d + now, now - d, now - t, and so on), and the terms.
// Each `now` it reads is then the one it covers.
func nowAffine(x ast.Expr) ([]nowTerm, bool) {
	switch x.Kind() {
	case ast.IdentKind:
		return nil, x.AsIdent() == "now"
	case ast.CallKind:
		c := x.AsCall()
		if len(c.Args()) != 2 {
			return nil, false
		}
		a, b := c.Args()[0], c.Args()[1]
		switch c.FunctionName() {
		case "_+_":
			if terms, ok := nowAffine(a); ok && !readsNow(b) {
				return append(terms, nowTerm{b, true}), true
			}
			if terms, ok := nowAffine(b); ok && !readsNow(a) {
				return append(terms, nowTerm{a, true}), true
			}
		case "_-_":
			if terms, ok := nowAffine(a); ok && !readsNow(b) {
				return append(terms, nowTerm{b, false}), true
			}
		}
	}
	return nil, false
}

// readsNow reports whether x names now.
func readsNow(x ast.Expr) bool {
	found := false
	ast.PostOrderVisit(x, ast.NewExprVisitor(func(y ast.Expr) {
		if y.Kind() == ast.IdentKind && y.AsIdent() == "now" {
			found = true
		}
	}))
	return found
}

// momentSource is the expression of the moment at which now plus the
// terms equals other: other with each term taken back (now - t OP d
// gives d + t, a timestamp).
func momentSource(other ast.Expr, terms []nowTerm, info *ast.SourceInfo) (string, error) {
	src, err := parser.Unparse(other, info)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("(" + src + ")")
	for _, t := range terms {
		s, err := parser.Unparse(t.x, info)
		if err != nil {
			return "", err
		}
		op := "+"
		if t.plus {
			op = "-"
		}
		fmt.Fprintf(&b, " %s (%s)", op, s)
	}
	return b.String(), nil
}

// noteMoments tells c the moments after now at which p's comparisons of
// now may flip, evaluated with act (the evaluation's own variables). Their
// cost is charged to the meter as the evaluation's is, but not returned
// with it: a read's budgets (gates, views, actions) decide what a reader
// sees, and a wait's read must see what any other read sees. Together
// they may cost the per-expression limit once more at most (the last
// one started may take it past): past it, the clock is told it cannot
// foresee.
func (e *Env) noteMoments(ctx context.Context, p *Program, act map[string]any, now time.Time, c *Clock) {
	plan := e.clockPlan(p)
	if plan.opaque {
		c.Opaque()
	}
	meter, _ := ctx.Value(meterKey{}).(func(uint64))
	spent := uint64(0)
	for _, prg := range plan.moments {
		if spent >= e.opt.CostLimit {
			c.Opaque()
			return
		}
		out, cost, err := safeRun(ctx, prg, act)
		if err != nil && strings.Contains(err.Error(), "cost limit") {
			cost = e.opt.CostLimit
		}
		spent += max(cost, 1)
		e.evals.Add(1)
		e.cost.Add(cost)
		if meter != nil {
			meter(cost)
		}
		if err != nil {
			// What it reads is missing or of the wrong kind: a write
			// must change it first, and a write wakes the reader.
			continue
		}
		if ts, ok := out.(types.Timestamp); ok && ts.Time.After(now) {
			c.Note(ts.Time)
		}
	}
}
