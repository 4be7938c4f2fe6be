package write

import (
	"encoding/json"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
)

// Render turns one of an action's write templates into the write it
// makes for the invoking agent self (seed 001 §Write authority model):
// its templates filled by r, its scope and key held to lim, the target
// scope checked by mayWrite (the registrar's authority over it), and an
// Expr write's value the result of eval on the template's source (a merge
// expression must give a map). Any refusal is the first one met, in that
// order.
func Render(r *defs.Renderer, w defs.WriteTemplate, self string, lim Limits, mayWrite func(scope string) error, eval func(src string) (any, error)) (Op, error) {
	scope := r.Str(w.Scope)
	if scope == "" {
		scope = defs.ScopeShared
	}
	if scope == defs.ScopeSelf {
		scope = self
	}
	o := Op{Scope: scope, Key: r.Str(w.Key), Append: w.Append, Delete: w.Delete, Deep: true, Timer: w.Timer, Enabled: w.Enabled}
	if err := authority.ValidName("scope", o.Scope, lim.MaxScopeBytes, true); err != nil {
		return o, err
	}
	if o.Key != "" || !o.Append {
		if err := authority.ValidKey(o.Key, lim.MaxKeyBytes); err != nil {
			return o, err
		}
	}
	if err := mayWrite(o.Scope); err != nil {
		return o, err
	}
	var err error
	switch {
	case w.Expr:
		err = evalInto(&o, w, eval)
	case len(w.Value) > 0:
		o.Value, err = r.JSON(w.Value)
	case len(w.Merge) > 0:
		o.Merge, err = r.JSON(w.Merge)
	case len(w.Increment) > 0:
		var n json.Number
		n, err = r.Number("increment", w.Increment)
		o.Increment = &n
	}
	if err != nil {
		return o, err
	}
	if len(w.IfVersion) > 0 {
		n, err := r.Number("if_version", w.IfVersion)
		if err != nil {
			return o, err
		}
		v, err := n.Int64()
		if err != nil || v < 0 {
			return o, errs.New(errs.InvalidParam, "if_version rendered to %s, not a version", n).WithHint("pass the version you read (0: must not exist)")
		}
		o.IfVersion = &v
	}
	return o, nil
}

// evalInto sets o's value (or merge) to what the write's expression
// evaluates to.
func evalInto(o *Op, w defs.WriteTemplate, eval func(src string) (any, error)) error {
	v, err := eval(w.ExprSource())
	if err != nil {
		return err
	}
	out, err := json.Marshal(v)
	if err != nil {
		return errs.New(errs.CELError, "write expression result cannot be stored: %v", err).WithHint("return JSON-shaped values")
	}
	if len(w.Merge) == 0 {
		o.Value = out
		return nil
	}
	if _, isMap := v.(map[string]any); !isMap {
		return errs.New(errs.CELError, "merge expression gave %s, not a map", expr.KindOf(v)).WithHint("return a map from a merge expression")
	}
	o.Merge = out
	return nil
}
