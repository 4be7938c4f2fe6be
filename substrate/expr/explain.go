package expr

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
)

// Explanation says why a condition did not hold: its first top-level
// clause (of a && b && …) that is not true, and the values that clause
// reads, so a caller can tell "out of turn" from "cell taken" without
// re-deriving it.
type Explanation struct {
	// Clause is the source of the first clause that is false or fails.
	Clause string `json:"clause"`
	// Error is why the clause could not be evaluated, if it could not.
	Error string `json:"error,omitempty"`
	// Read maps each path the clause reads (state._shared.turn,
	// params.cell…) to its value, or to "<missing>" when it is absent.
	// Large values are replaced by their size.
	Read map[string]any `json:"read,omitempty"`
}

// maxExplainedReads and maxExplainedValue bound an explanation's size.
const (
	maxExplainedReads = 8
	maxExplainedValue = 200
)

// Explain evaluates p's top-level clauses in order and explains the first
// that is not true; nil when every clause holds.
func (e *Env) Explain(ctx context.Context, p *Program, vars *Vars) *Explanation {
	if p.checked == nil {
		return nil
	}
	info := p.checked.NativeRep().SourceInfo()
	var clauses []ast.Expr
	var flatten func(x ast.Expr)
	flatten = func(x ast.Expr) {
		if x.Kind() == ast.CallKind && x.AsCall().FunctionName() == "_&&_" {
			for _, a := range x.AsCall().Args() {
				flatten(a)
			}
			return
		}
		clauses = append(clauses, x)
	}
	flatten(p.checked.NativeRep().Expr())
	for _, c := range clauses {
		src, err := cel.ExprToString(c, info)
		if err != nil {
			continue
		}
		cp, err := e.Compile(src)
		if err != nil {
			continue
		}
		ok, err := e.EvalBool(ctx, cp, vars)
		if err == nil && ok {
			continue
		}
		out := &Explanation{Clause: src, Read: e.reads(ctx, c, info, vars)}
		if err != nil {
			out.Error = err.Error()
		}
		return out
	}
	return nil
}

// reads evaluates the outermost paths (a.b.c, a["b"]) under x.
func (e *Env) reads(ctx context.Context, x ast.Expr, info *ast.SourceInfo, vars *Vars) map[string]any {
	out := map[string]any{}
	var visit func(x ast.Expr)
	visit = func(x ast.Expr) {
		if len(out) >= maxExplainedReads {
			return
		}
		if isPath(x) {
			src, err := cel.ExprToString(x, info)
			if err != nil {
				return
			}
			v, ok := e.readPath(ctx, src, vars)
			if !ok {
				return
			}
			out[src] = v
			// A computed index (tasks[params.id]) read its key too.
			for _, k := range indexKeys(x) {
				visit(k)
			}
			return
		}
		if x.Kind() == ast.IdentKind && (x.AsIdent() == "self" || x.AsIdent() == "now") {
			// The scalar variables explain a comparison by themselves.
			out[x.AsIdent()] = identValue(x.AsIdent(), vars)
			return
		}
		switch x.Kind() {
		case ast.CallKind:
			c := x.AsCall()
			if c.IsMemberFunction() {
				visit(c.Target())
			}
			for _, a := range c.Args() {
				visit(a)
			}
		case ast.ListKind:
			for _, el := range x.AsList().Elements() {
				visit(el)
			}
		}
	}
	visit(x)
	return out
}

// readPath is one path's value as an explanation shows it; false when
// src does not compile.
func (e *Env) readPath(ctx context.Context, src string, vars *Vars) (any, bool) {
	cp, err := e.Compile(src)
	if err != nil {
		return nil, false
	}
	v, err := e.Eval(ctx, cp, vars)
	if err != nil {
		return "<missing>", true
	}
	if raw, _ := json.Marshal(v); len(raw) > maxExplainedValue {
		v = fmt.Sprintf("<%d bytes>", len(raw))
	}
	return v, true
}

// ReadAgain evaluates paths an Explanation read (its Read keys) under
// other vars, shown the same way; a path that does not compile is left
// out.
func (e *Env) ReadAgain(ctx context.Context, paths []string, vars *Vars) map[string]any {
	out := make(map[string]any, len(paths))
	for _, src := range paths {
		if v, ok := e.readPath(ctx, src, vars); ok {
			out[src] = v
		}
	}
	return out
}

// isPath reports a variable path: a select chain or index rooted at a
// variable (not a bare variable: "state" alone explains nothing).
func isPath(x ast.Expr) bool {
	switch x.Kind() {
	case ast.SelectKind:
		if x.AsSelect().IsTestOnly() { // has(a.b): its clause already says it
			return false
		}
		op := x.AsSelect().Operand()
		return op.Kind() == ast.IdentKind || isPath(op)
	case ast.CallKind:
		c := x.AsCall()
		if c.FunctionName() == "_[_]" && len(c.Args()) == 2 {
			op := c.Args()[0]
			return op.Kind() == ast.IdentKind || isPath(op)
		}
	}
	return false
}

// indexKeys are the computed (non-literal) index keys along path x.
func indexKeys(x ast.Expr) []ast.Expr {
	var out []ast.Expr
	for {
		switch x.Kind() {
		case ast.SelectKind:
			x = x.AsSelect().Operand()
			continue
		case ast.CallKind:
			c := x.AsCall()
			if c.FunctionName() == "_[_]" && len(c.Args()) == 2 {
				if c.Args()[1].Kind() != ast.LiteralKind {
					out = append(out, c.Args()[1])
				}
				x = c.Args()[0]
				continue
			}
		}
		return out
	}
}

// identValue is a scalar variable's value as an explanation shows it.
func identValue(name string, vars *Vars) any {
	if name == "self" {
		return vars.Self
	}
	return vars.Now.UTC().Format(time.RFC3339)
}
