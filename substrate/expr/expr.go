// Package expr is the CEL environment of rooms (google/cel-go, published as
// cel.dev/cel-go): the variables an expression sees, the helper functions,
// compilation with a program cache, and evaluation under a cost limit, a
// source-length limit and a deadline. Every failure is an errs.Error with
// code cel_error naming the stage (parse, check, evaluate), the position
// where known, and a hint.
package expr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/ext"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// CELError is the code of every expression failure.
const CELError = errs.CELError

// Variables every expression may use.
var Variables = []string{"state", "views", "agents", "actions", "messages", "self", "params", "now"}

// Functions added to CEL's standard library (besides cel-go's string, list,
// math, set and optional extensions).
var Functions = []string{"map.keys() → list", "map.values() → list", "map.entries() → list of {key, value}"}

// Options configure an Env. Zero fields take their defaults.
type Options struct {
	// MaxSourceBytes caps an expression's source. Default 4,096.
	MaxSourceBytes int
	// CostLimit caps the cel-go runtime cost of one evaluation (roughly one
	// unit per operation or element visited). Default 100,000.
	CostLimit uint64
	// Timeout bounds one evaluation's wall time, whatever its cost.
	// Default 250 ms.
	Timeout time.Duration
	// CacheSize caps the compiled programs kept. Default 4,096.
	CacheSize int
}

// Env compiles and evaluates room expressions. It is safe for concurrent
// use.
type Env struct {
	env *cel.Env
	opt Options

	mu    sync.Mutex
	cache map[string]*Program

	// Evaluations and their summed cel-go cost, for metrics.
	evals, cost atomic.Uint64
}

// Stats reports how many evaluations ran and their summed runtime cost.
func (e *Env) Stats() (evaluations, cost uint64) { return e.evals.Load(), e.cost.Load() }

// Program is a compiled expression.
type Program struct {
	Source string
	prg    cel.Program
	// ViewDeps are the view ids the expression reads as views.<id> or
	// views["<id>"], in order of first use.
	ViewDeps []string
	// UsesParams and UsesMessages report whether the expression reads
	// params or messages.
	UsesParams, UsesMessages bool
	// DynamicViews reports that the expression reads views other than
	// by a literal name (views[x]): ViewDeps then does not list them all.
	DynamicViews bool
	idents       map[string]bool
	checked      *cel.Ast
	// clock is how to foresee when now changes the result (clock.go),
	// planned on first need.
	clockOnce sync.Once
	clock     *clockPlan
}

// Uses reports whether the expression names the top-level variable name
// (state, views, agents, actions, messages, self, params, now).
func (p *Program) Uses(name string) bool { return p.idents[name] }

// Vars are the values an expression sees. Maps hold JSON-shaped values:
// map[string]any, []any, string, bool, nil, int64 for whole numbers and
// float64 for others (see Decode).
type Vars struct {
	State    map[string]any
	Views    map[string]any
	Agents   map[string]any
	Actions  map[string]any
	Messages map[string]any
	Self     string
	Params   map[string]any
	Now      time.Time
}

func (o *Options) fill() {
	if o.MaxSourceBytes <= 0 {
		o.MaxSourceBytes = 4096
	}
	if o.CostLimit == 0 {
		o.CostLimit = 100_000
	}
	if o.Timeout <= 0 {
		o.Timeout = 250 * time.Millisecond
	}
	if o.CacheSize <= 0 {
		o.CacheSize = 4096
	}
}

// New builds the environment.
func New(opt Options) (*Env, error) {
	opt.fill()
	mapT := cel.MapType(cel.StringType, cel.DynType)
	anyMap := cel.MapType(cel.DynType, cel.DynType)
	env, err := cel.NewEnv(
		cel.Variable("state", mapT),
		cel.Variable("views", mapT),
		cel.Variable("agents", mapT),
		cel.Variable("actions", mapT),
		cel.Variable("messages", mapT),
		cel.Variable("self", cel.StringType),
		cel.Variable("params", mapT),
		cel.Variable("now", cel.TimestampType),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		cel.ParserRecursionLimit(100),
		cel.ParserExpressionSizeLimit(opt.MaxSourceBytes),
		// Explain prints a false clause back as source: without the macro
		// calls kept, a clause with filter, map, exists… cannot be, and
		// the explanation skipped it (issue 42 bug 8).
		cel.EnableMacroCallTracking(),
		ext.Strings(),
		ext.Lists(ext.ListsMaxRangeSize(10_000)),
		ext.Math(),
		ext.Sets(),
		ext.Encoders(),
		cel.Function("keys", cel.MemberOverload("map_keys", []*cel.Type{anyMap}, cel.ListType(cel.DynType),
			cel.UnaryBinding(func(v ref.Val) ref.Val { return mapParts(v, 0) }))),
		cel.Function("values", cel.MemberOverload("map_values", []*cel.Type{anyMap}, cel.ListType(cel.DynType),
			cel.UnaryBinding(func(v ref.Val) ref.Val { return mapParts(v, 1) }))),
		cel.Function("entries", cel.MemberOverload("map_entries", []*cel.Type{anyMap}, cel.ListType(mapT),
			cel.UnaryBinding(func(v ref.Val) ref.Val { return mapParts(v, 2) }))),
	)
	if err != nil {
		return nil, fmt.Errorf("expr: build environment: %w", err)
	}
	return &Env{env: env, opt: opt, cache: map[string]*Program{}}, nil
}

// MustNew is New for static set-up; it panics on error.
func MustNew(opt Options) *Env {
	e, err := New(opt)
	if err != nil {
		panic(err)
	}
	return e
}

// Limits returns the options in force (for help texts).
func (e *Env) Limits() Options { return e.opt }

// mapParts returns a map's keys (0), values (1) or {key, value} entries (2),
// keys sorted so results are deterministic.
func mapParts(v ref.Val, part int) ref.Val {
	m, ok := v.(traits.Mapper)
	if !ok {
		return types.NewErr("keys/values/entries need a map, got %s", v.Type().TypeName())
	}
	var ks []ref.Val
	it := m.Iterator()
	for it.HasNext() == types.True {
		ks = append(ks, it.Next())
	}
	sortVals(ks)
	out := make([]ref.Val, len(ks))
	for i, k := range ks {
		switch part {
		case 0:
			out[i] = k
		case 1:
			out[i] = m.Get(k)
		default:
			out[i] = types.NewStringInterfaceMap(types.DefaultTypeAdapter, map[string]any{"key": k, "value": m.Get(k)})
		}
	}
	return types.NewRefValList(types.DefaultTypeAdapter, out)
}

func sortVals(vs []ref.Val) {
	less := func(a, b ref.Val) bool { return fmt.Sprint(a.Value()) < fmt.Sprint(b.Value()) }
	for i := 1; i < len(vs); i++ {
		for j := i; j > 0 && less(vs[j], vs[j-1]); j-- {
			vs[j], vs[j-1] = vs[j-1], vs[j]
		}
	}
}

// Compile parses and checks src, returning a cached program when the same
// source was compiled before.
func (e *Env) Compile(src string) (*Program, error) {
	if len(src) > e.opt.MaxSourceBytes {
		return nil, errs.New(CELError, "expression is %d bytes, over the limit of %d", len(src), e.opt.MaxSourceBytes).
			With("stage", "parse").WithHint("shorten the expression; move shared parts into views")
	}
	if strings.TrimSpace(src) == "" {
		return nil, errs.New(CELError, "expression is empty").With("stage", "parse").WithHint("write a CEL expression, e.g. state._shared.phase == \"done\"")
	}
	e.mu.Lock()
	p := e.cache[src]
	e.mu.Unlock()
	if p != nil {
		return p, nil
	}
	parsed, iss := e.env.Parse(src)
	if iss != nil && iss.Err() != nil {
		return nil, issueError("parse", src, iss)
	}
	checked, iss := e.env.Check(parsed)
	if iss != nil && iss.Err() != nil {
		return nil, issueError("check", src, iss)
	}
	prg, err := e.env.Program(checked,
		cel.CostLimit(e.opt.CostLimit),
		cel.InterruptCheckFrequency(100),
		cel.EvalOptions(cel.OptOptimize, cel.OptTrackCost),
	)
	if err != nil {
		return nil, errs.New(CELError, "expression cannot be planned: %v", err).With("stage", "check").With("expression", src).
			WithHint("simplify the expression")
	}
	deps, idents, dynamic := scan(checked)
	p = &Program{Source: src, prg: prg, ViewDeps: deps, UsesParams: idents["params"], UsesMessages: idents["messages"],
		DynamicViews: dynamic, idents: idents, checked: checked}
	e.mu.Lock()
	if len(e.cache) >= e.opt.CacheSize {
		n := 0
		for k := range e.cache { // drop about half, arbitrarily
			if n%2 == 0 {
				delete(e.cache, k)
			}
			n++
		}
	}
	e.cache[src] = p
	e.mu.Unlock()
	return p, nil
}

func issueError(stage, src string, iss *cel.Issues) error {
	errList := iss.Errors()
	msg := iss.Err().Error()
	e := errs.New(CELError, "%s error: %s", stage, firstLine(errList[0].Message)).With("stage", stage).With("expression", src)
	if loc := errList[0].Location; loc != nil && loc.Line() > 0 {
		e = e.With("line", loc.Line()).With("column", loc.Column()+1)
		e.Message = fmt.Sprintf("%s error at %d:%d: %s", stage, loc.Line(), loc.Column()+1, firstLine(errList[0].Message))
	}
	switch {
	case strings.Contains(msg, "has(") || strings.Contains(msg, "'has'"):
		e.Hint = "has() takes one field selection, e.g. has(state._shared.phase); to test a key by name use \"phase\" in state._shared"
	case stage == "parse":
		e.Hint = "check the syntax at that position: strings use double quotes, maps are {\"k\": v}, && || ! for logic; see help key expressions"
	case strings.Contains(msg, "undeclared reference"):
		e.Hint = "the variables are " + strings.Join(Variables, ", ") + "; see help key expressions"
	case strings.Contains(msg, "found no matching overload"):
		e.Hint = "an operator or function got types it does not take; whole numbers are int and others double (convert with double() or int()); see help key expressions"
	default:
		e.Hint = "see help key expressions"
	}
	return e
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// scan finds views.<id> and views["<id>"] in the checked AST, and the
// identifiers it reads.
func scan(a *cel.Ast) (deps []string, idents map[string]bool, dynamicViews bool) {
	idents = map[string]bool{}
	add := func(id string) {
		for _, d := range deps {
			if d == id {
				return
			}
		}
		deps = append(deps, id)
	}
	isViews := func(x ast.Expr) bool { return x.Kind() == ast.IdentKind && x.AsIdent() == "views" }
	viewsIdents, literal := 0, 0 // uses of the views variable, and of them by a literal name
	visitor := ast.NewExprVisitor(func(x ast.Expr) {
		switch x.Kind() {
		case ast.IdentKind:
			idents[x.AsIdent()] = true
			if x.AsIdent() == "views" {
				viewsIdents++
			}
		case ast.SelectKind:
			if s := x.AsSelect(); isViews(s.Operand()) {
				add(s.FieldName())
				literal++
			}
		case ast.CallKind:
			c := x.AsCall()
			if c.FunctionName() == "_[_]" && len(c.Args()) == 2 && isViews(c.Args()[0]) && c.Args()[1].Kind() == ast.LiteralKind {
				if s, ok := c.Args()[1].AsLiteral().(types.String); ok {
					add(string(s))
					literal++
				}
			}
		}
	})
	ast.PostOrderVisit(a.NativeRep().Expr(), visitor)
	return deps, idents, viewsIdents > literal
}

type meterKey struct{}

// WithMeter returns ctx with a meter: every evaluation run with it (or a
// context derived from it) reports its cel-go cost to charge, so a caller
// can bill the work of a whole request (a room's budget per second) rather
// than count requests.
func WithMeter(ctx context.Context, charge func(cost uint64)) context.Context {
	return context.WithValue(ctx, meterKey{}, charge)
}

// Charge reports cost to ctx's meter (WithMeter), if it has one: work
// that is not an evaluation but is billed with them (a search's database
// time, in the same units).
func Charge(ctx context.Context, cost uint64) {
	if m, ok := ctx.Value(meterKey{}).(func(uint64)); ok {
		m(cost)
	}
}

// Eval runs p against vars and returns a JSON-shaped result.
func (e *Env) Eval(ctx context.Context, p *Program, vars *Vars) (any, error) {
	v, _, err := e.EvalCost(ctx, p, vars)
	return v, err
}

// EvalCost is Eval that also reports the evaluation's cel-go runtime cost
// (what the per-expression cost limit counts), for budgets across several
// expressions.
func (e *Env) EvalCost(ctx context.Context, p *Program, vars *Vars) (any, uint64, error) {
	act := map[string]any{
		"state":    orEmpty(vars.State),
		"views":    orEmpty(vars.Views),
		"agents":   orEmpty(vars.Agents),
		"actions":  orEmpty(vars.Actions),
		"messages": orEmpty(vars.Messages),
		"self":     vars.Self,
		"params":   orEmpty(vars.Params),
		"now":      vars.Now,
	}
	ctx, cancel := context.WithTimeout(ctx, e.opt.Timeout)
	defer cancel()
	out, cost, err := safeRun(ctx, p.prg, act)
	if p.idents["now"] {
		if c := ClockOf(ctx); c != nil {
			e.noteMoments(ctx, p, act, vars.Now, c)
		}
	}
	if err != nil && strings.Contains(err.Error(), "cost limit") {
		cost = e.opt.CostLimit
	}
	e.evals.Add(1)
	e.cost.Add(cost)
	if m, ok := ctx.Value(meterKey{}).(func(uint64)); ok {
		m(cost)
	}
	if err != nil {
		return nil, cost, e.evalError(p.Source, err)
	}
	v, err := ToNative(out)
	if err != nil {
		return nil, cost, e.evalError(p.Source, err)
	}
	return v, cost, nil
}

// EvalBool runs p and requires a boolean result.
func (e *Env) EvalBool(ctx context.Context, p *Program, vars *Vars) (bool, error) {
	v, err := e.Eval(ctx, p, vars)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, errs.New(CELError, "expression gave %s, and a condition must give true or false", KindOf(v)).
			With("stage", "evaluate").With("gave", KindOf(v)).With("expression", p.Source).WithHint("compare or test something, e.g. size(x) > 0")
	}
	return b, nil
}

// safeRun turns a panic inside cel-go into an error: a bad expression must
// never take the server down.
func safeRun(ctx context.Context, prg cel.Program, act map[string]any) (out ref.Val, cost uint64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal evaluation failure: %v", r)
		}
	}()
	out, det, err := prg.ContextEval(ctx, act)
	if det != nil {
		if c := det.ActualCost(); c != nil {
			cost = *c
		}
	}
	return out, cost, err
}

func (e *Env) evalError(src string, err error) error {
	msg := err.Error()
	ee := errs.New(CELError, "evaluation error: %s", msg).With("stage", "evaluate").With("expression", src)
	switch {
	case strings.Contains(msg, "cost limit"):
		ee.Message = fmt.Sprintf("evaluation stopped: the expression exceeded its cost limit of %d", e.opt.CostLimit)
		ee.Hint = "the expression does too much work (large comprehensions, big strings); simplify it or let a view precompute part of it"
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "interrupt"):
		ee.Message = fmt.Sprintf("evaluation stopped after %v", e.opt.Timeout)
		ee.Hint = "the expression runs too long; simplify it"
	case strings.Contains(msg, "no such key"):
		ee.Hint = "a key is missing: test first with has(state._shared.k) or \"k\" in state._shared, or use state._shared.?k.orValue(default)"
	case strings.Contains(msg, "no such overload"), strings.Contains(msg, "no matching overload"):
		ee.Hint = "an operator got types it does not take; whole numbers are int and others double (convert with double() or int())"
	default:
		ee.Hint = "see help key expressions"
	}
	return ee
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// KindOf names a decoded JSON value's kind for messages ("a string", "an
// object"…): the one describer of value kinds, for expressions and
// parameters alike.
func KindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case int64, float64, uint64, json.Number:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// NotBoolean names the type the expression gives when the checker knows it
// is not a boolean ("" when it is one, or could be: a dynamic value).
func (p *Program) NotBoolean() string {
	if p.checked == nil {
		return ""
	}
	t := p.checked.OutputType()
	if t == nil || t.IsExactType(cel.BoolType) || t.IsExactType(cel.DynType) || t.Kind() == types.DynKind || t.Kind() == types.AnyKind || t.Kind() == types.ErrorKind {
		return ""
	}
	return t.String()
}
