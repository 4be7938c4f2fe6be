package write_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/write"
)

// An action's write template becomes the write it makes for its invoker:
// templates filled, the scope defaulted and self resolved, names held to
// the limits, the target asked of the registrar's authority, and an
// expression's result stored (a merge's only when it is a map).
func TestRender(t *testing.T) {
	r := &defs.Renderer{Params: map[string]any{"task": "t1", "v": json.Number("2")}, Self: "ann"}
	var asked []string
	may := func(scope string) error {
		asked = append(asked, scope)
		if scope == "bob" {
			return errs.New(errs.Forbidden, "not bob's")
		}
		return nil
	}
	eval := func(src string) (any, error) {
		switch src {
		case "map":
			return map[string]any{"a": 1}, nil
		case "list":
			return []any{1}, nil
		}
		return nil, errors.New("eval " + src)
	}
	render := func(w defs.WriteTemplate) (write.Op, error) { return write.Render(r, w, "ann", lim, may, eval) }

	o, err := render(defs.WriteTemplate{Key: "${params.task}", Value: json.RawMessage(`{"n":"${params.v}"}`)})
	if err != nil || o.Scope != "_shared" || o.Key != "t1" || string(o.Value) != `{"n":2}` || !o.Deep {
		t.Fatalf("a value write: %+v, %v", o, err)
	}
	if o, err = render(defs.WriteTemplate{Scope: "self", Key: "k", Increment: json.RawMessage(`"${params.v}"`)}); err != nil || o.Scope != "ann" || o.Increment.String() != "2" {
		t.Fatalf("an increment of self: %+v, %v", o, err)
	}
	if o, err = render(defs.WriteTemplate{Key: "k", Expr: true, Merge: json.RawMessage(`"map"`), IfVersion: json.RawMessage(`3`)}); err != nil || string(o.Merge) != `{"a":1}` || *o.IfVersion != 3 {
		t.Fatalf("a merge expression: %+v, %v", o, err)
	}
	if _, err = render(defs.WriteTemplate{Scope: "bob", Key: "k", Value: json.RawMessage(`1`)}); err == nil || err.(*errs.Error).Code != errs.Forbidden {
		t.Fatalf("another agent's scope: %v", err)
	}
	if _, err = render(defs.WriteTemplate{Scope: "a scope too long to name", Key: "k"}); err == nil || asked[len(asked)-1] != "bob" {
		t.Fatalf("a scope past the limit: %v, asked %v (the name is checked before authority)", err, asked)
	}
	if _, err = render(defs.WriteTemplate{Key: "", Value: json.RawMessage(`1`)}); err == nil {
		t.Fatal("a keyless write that is not an append is refused")
	}
	if o, err = render(defs.WriteTemplate{Append: true, Value: json.RawMessage(`1`)}); err != nil || o.Key != "" || !o.Append {
		t.Fatalf("a keyless append: %+v, %v", o, err)
	}
	wantErr(t, ignore(render(defs.WriteTemplate{Key: "k", Expr: true, Merge: json.RawMessage(`"list"`)})), errs.CELError, "merge expression gave an array, not a map")
	if _, err = render(defs.WriteTemplate{Key: "k", Expr: true, Value: json.RawMessage(`"boom"`)}); err == nil || err.Error() != "eval boom" {
		t.Fatalf("an expression's error is the write's: %v", err)
	}
	wantErr(t, ignore(render(defs.WriteTemplate{Key: "k", Value: json.RawMessage(`1`), IfVersion: json.RawMessage(`-1`)})), errs.InvalidParam, "if_version rendered to -1")
}
