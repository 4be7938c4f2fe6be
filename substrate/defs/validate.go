package defs

// What makes an action or a view valid, apart from the room it is
// registered in: the room (its limits on how many, who may replace one,
// the per-read budgets) is the core's.

import (
	"encoding/json"
	"fmt"
	"iter"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
)

// Limits on definitions.
const (
	maxWritesPerAction = 32
	maxParams          = 32
	// MaxTextField bounds a definition's free text (description, intent).
	MaxTextField = 4000
)

var paramTypes = []string{"", "any", "string", "number", "integer", "boolean", "object", "array"}

// Checks are what validating a definition needs from the server.
type Checks struct {
	// CEL compiles the definition's expressions.
	CEL *expr.Env
	// MaxIDBytes bounds an action's or a view's id (Limits.MaxScopeBytes).
	MaxIDBytes int
	// ValidName checks an id or a name the way the core checks scopes.
	ValidName func(what, s string, max int, allowUnderscore bool) error
	// Builtin reports the ids of the builtin actions.
	Builtin func(id string) bool
}

// CompileField compiles src ("" is none), naming field in its error.
func CompileField(cel *expr.Env, field, src string) error {
	if src == "" {
		return nil
	}
	if _, err := cel.Compile(src); err != nil {
		if e, ok := err.(*errs.Error); ok {
			return e.With("field", field)
		}
		return err
	}
	return nil
}

// ValidateAction checks a definition and fills defaults.
func ValidateAction(def *ActionDef, c Checks) error {
	if err := validActionID(def, c); err != nil {
		return err
	}
	if err := validActionFields(def, c); err != nil {
		return err
	}
	if len(def.Writes) == 0 && def.Result == "" {
		return actionDoesNothing(def)
	}
	if err := validActionWrites(def, c); err != nil {
		return err
	}
	return validActionTimers(def)
}

// validActionID refuses an id that is not a name, or is a builtin's
// (but help) or reserved for builtins.
func validActionID(def *ActionDef, c Checks) error {
	if err := c.ValidName("action id", def.ID, c.MaxIDBytes, true); err != nil {
		return err
	}
	if c.Builtin(def.ID) && def.ID != "help" {
		return errs.New(errs.InvalidField, "%q is a builtin action", def.ID).WithHint("choose another id (only help may be overridden)")
	}
	if strings.HasPrefix(def.ID, "_") {
		return errs.New(errs.InvalidField, "action ids starting with _ are reserved for builtins").WithHint("choose an id that starts with a letter or digit")
	}
	return nil
}

// validActionFields bounds the description and intent, and checks the
// params' names and types.
func validActionFields(def *ActionDef, c Checks) error {
	for _, f := range []struct{ name, v string }{{"description", def.Description}, {"intent", def.Intent}} {
		if len(f.v) > MaxTextField {
			return errs.New(errs.InvalidField, "%s is %d bytes, over the limit of %d", f.name, len(f.v), MaxTextField).With("field", f.name).With("limit", MaxTextField).
				WithHint("shorten %s to %d bytes or less and register again", f.name, MaxTextField)
		}
	}
	if len(def.Params) > maxParams {
		return errs.New(errs.InvalidField, "%d params, over the limit of %d", len(def.Params), maxParams).WithHint("take fewer parameters, or one object")
	}
	for name, p := range def.Params {
		if err := c.ValidName("param name", name, 64, true); err != nil {
			return err
		}
		if !slices.Contains(paramTypes, p.Type) {
			return errs.New(errs.InvalidField, "param %q has type %q", name, p.Type).WithHint("types are string, number, integer, boolean, object, array, any")
		}
	}
	return nil
}

// actionDoesNothing refuses an action that neither writes nor computes:
// it does nothing when invoked; most often the caller expected a library
// definition by its id, which the error then offers.
func actionDoesNothing(def *ActionDef) error {
	for _, lib := range StandardLibrary {
		if lib.ID == def.ID {
			raw, _ := json.Marshal(lib)
			var args map[string]any
			_ = json.Unmarshal(raw, &args)
			return errs.New(errs.InvalidField, "action %q has no writes and no result: registering an id does not fetch the standard library's %q", def.ID, def.ID).
				With("field", "writes").WithHint("register the library's definition as it is (next), or adapt it; sync_help key standard_library lists them all").
				WithNext(errs.Step{Op: errs.OpRegisterAction, Args: args})
		}
	}
	return errs.New(errs.InvalidField, "action %q has no writes and no result, so invoking it would do nothing", def.ID).With("field", "writes").
		WithHint("give writes (what it changes, e.g. [{\"scope\": \"_shared\", \"key\": \"phase\", \"value\": \"${params.phase}\"}]) or a result (a CEL value it returns); ready-made definitions are in help key standard_library")
}

// validActionWrites bounds the writes and compiles the expressions and
// the write templates.
func validActionWrites(def *ActionDef, c Checks) error {
	if len(def.Writes) > maxWritesPerAction {
		return errs.New(errs.InvalidField, "%d writes, over the limit of %d per action", len(def.Writes), maxWritesPerAction).WithHint("split the action")
	}
	for _, f := range []struct{ name, src string }{{"if", def.If}, {"enabled", def.Enabled}, {"result", def.Result}} {
		if err := CompileField(c.CEL, f.name, f.src); err != nil {
			return err
		}
	}
	for i := range def.Writes {
		if err := validateWrite(c.CEL, def, i); err != nil {
			if e, ok := err.(*errs.Error); ok {
				return e.With("write", i)
			}
			return err
		}
	}
	return nil
}

// validActionTimers checks the action's timer and the one it sets when
// invoked (an "enable" timer unless it says).
func validActionTimers(def *ActionDef) error {
	if def.Timer != nil {
		if err := def.Timer.Validate("timer"); err != nil {
			return err
		}
	}
	if def.OnInvoke != nil && def.OnInvoke.Timer != nil {
		if def.OnInvoke.Timer.Effect == "" {
			def.OnInvoke.Timer.Effect = "enable"
		}
		if err := def.OnInvoke.Timer.Validate("on_invoke.timer"); err != nil {
			return err
		}
	}
	return nil
}

// validateWrite checks def's write i.
func validateWrite(cel *expr.Env, def *ActionDef, i int) error {
	w := &def.Writes[i]
	field := fmt.Sprintf("writes[%d]", i)
	n := 0
	for _, set := range []bool{len(w.Value) > 0, len(w.Merge) > 0, len(w.Increment) > 0, w.Delete} {
		if set {
			n++
		}
	}
	if n != 1 {
		return errs.New(errs.InvalidField, "%s needs exactly one of value, merge, increment and delete", field).
			WithHint(`e.g. {"scope": "_shared", "key": "phase", "value": "${params.phase}"}`)
	}
	if w.Key == "" && !w.Append {
		return errs.New(errs.InvalidField, "%s has no key", field).WithHint("give it a key (append writes may omit it)")
	}
	if w.Append && len(w.Value) == 0 {
		return errs.New(errs.InvalidField, "%s: append takes a value", field).WithHint("give the entry to append as value")
	}
	if err := CheckTemplates(field+".scope", w.Scope, def.Params); err != nil {
		return err
	}
	if err := CheckTemplates(field+".key", w.Key, def.Params); err != nil {
		return err
	}
	if err := checkWriteValue(cel, def, w, field); err != nil {
		return err
	}
	if w.Timer != nil {
		if err := w.Timer.Validate(field + ".timer"); err != nil {
			return err
		}
	}
	return CompileField(cel, field+".enabled", w.Enabled)
}

// checkWriteValue checks what write w (named field) writes: a CEL
// expression with expr, else JSON whose templates name declared params.
func checkWriteValue(cel *expr.Env, def *ActionDef, w *WriteTemplate, field string) error {
	if w.Expr {
		src := w.Value
		if len(src) == 0 {
			src = w.Merge
		}
		var code string
		if json.Unmarshal(src, &code) != nil {
			return errs.New(errs.InvalidField, "%s: with expr: true, value (or merge) is a CEL expression string", field).
				WithHint(`e.g. "value": "state._shared.score + params.points", "expr": true`)
		}
		return CompileField(cel, field+".value", code)
	}
	for _, raw := range []json.RawMessage{w.Value, w.Merge, w.Increment, w.IfVersion} {
		if len(raw) > 0 {
			if err := CheckJSONTemplates(field, raw, def.Params); err != nil {
				return err
			}
		}
	}
	if len(w.Merge) > 0 && w.Merge[0] != '{' {
		return errs.New(errs.InvalidField, "%s: merge must be an object", field).WithHint("use value to store a non-object")
	}
	return nil
}

// ValidateView checks a view's definition and fills what is derived
// from it (Deps, the views its expression reads).
func ValidateView(def *ViewDef, c Checks) error {
	if err := c.ValidName("view id", def.ID, c.MaxIDBytes, false); err != nil {
		return err
	}
	if len(def.Description) > MaxTextField {
		return errs.New(errs.InvalidField, "description is over %d bytes", MaxTextField).WithHint("shorten it")
	}
	if def.Expr == "" {
		return errs.New(errs.InvalidField, "a view needs expr").WithHint(`e.g. {"id": "phase", "expr": "state._shared.phase"}`)
	}
	prog, err := c.CEL.Compile(def.Expr)
	if err != nil {
		return err.(*errs.Error).With("field", "expr")
	}
	def.Deps = prog.ViewDeps
	if err := CompileField(c.CEL, "enabled", def.Enabled); err != nil {
		return err
	}
	if len(def.Render) > 0 && def.Render[0] != '{' {
		return errs.New(errs.InvalidField, "render must be an object").WithHint(`e.g. {"type": "metric", "label": "Score"}`)
	}
	if def.Timer != nil {
		if err := def.Timer.Validate("timer"); err != nil {
			return err
		}
	}
	return nil
}

// ChangedFields are the fields (by JSON name) a re-registration of a
// changes in b, its registrar aside.
func ChangedFields(a, b ActionDef) []string {
	a.RegisteredBy, b.RegisteredBy = "", ""
	var out []string
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	t := va.Type()
	for i := 0; i < t.NumField(); i++ {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			out = append(out, tag)
		}
	}
	return out
}

// StaticTargets are the "<scope>.<key>" entries def's writes name
// without templates (which entry a templated write hits depends on the
// invocation).
func StaticTargets(def *ActionDef) []string {
	var out []string
	for _, w := range def.Writes {
		scope := w.Scope
		if scope == "" {
			scope = ScopeShared
		}
		if w.Append || strings.Contains(scope+w.Key, "${") {
			continue
		}
		out = append(out, scope+"."+w.Key)
	}
	return out
}

// SelfOf is the scope a definition registered in scope reads as
// state.self: an agent's, none for a communal one.
func SelfOf(scope string) string {
	if scope != ScopeShared && !strings.HasPrefix(scope, "_") {
		return scope
	}
	return ""
}

// RegistrarOf is who a definition in scope, registered by registeredBy,
// reads views as: its scope's agent, or for a communal one the agent that
// registered it ("" for room authority, which reads as the room token).
func RegistrarOf(scope, registeredBy string) string {
	if self := SelfOf(scope); self != "" {
		return self
	}
	if strings.HasPrefix(registeredBy, "_") {
		return ""
	}
	return registeredBy
}

// ActionWarnings flag the likely mistakes in def that do not stop its
// registration, in this order: each static key other actions of the room
// (actions, by id) write too, and each write to a fixed scope that
// mayWrite (the action's authority, asked for no invoker in particular)
// refuses, so that every invocation would be refused.
func ActionWarnings(def *ActionDef, actions iter.Seq2[string, *ActionDef], mayWrite func(scope string) error) []map[string]any {
	var warnings []map[string]any
	for _, t := range StaticTargets(def) {
		var others []string
		for id, a := range actions {
			if id != def.ID && slices.Contains(StaticTargets(a), t) {
				others = append(others, id)
			}
		}
		if len(others) > 0 {
			sort.Strings(others)
			warnings = append(warnings, map[string]any{"warning": "competing_write_targets", "target": t, "actions": others,
				"hint": "several actions write this key; see help key contested_actions"})
		}
	}
	for i, w := range def.Writes {
		if w.Scope == "" || strings.Contains(w.Scope, "${") {
			continue
		}
		if err := mayWrite(w.Scope); err != nil && w.Scope != ScopeSelf {
			warnings = append(warnings, map[string]any{"warning": "write_scope_denied", "write": i, "scope": w.Scope,
				"hint": "an action writes communal (_) scopes, its own scope (" + def.Scope + ") and the invoker's (${self}); this write would be refused"})
		}
	}
	return warnings
}

// Contested maps "<scope>.<key>" to the actions (ids, sorted) that write
// it, for the keys more than one of actions writes (the _contested view).
// Templated keys are left out: which key they hit depends on the
// invocation.
func Contested(actions iter.Seq2[string, *ActionDef]) map[string]any {
	writers := map[string][]string{}
	for id, a := range actions {
		for _, t := range StaticTargets(a) {
			if !slices.Contains(writers[t], id) {
				writers[t] = append(writers[t], id)
			}
		}
	}
	out := map[string]any{}
	for t, ids := range writers {
		if len(ids) > 1 {
			sort.Strings(ids)
			list := make([]any, len(ids))
			for i, id := range ids {
				list[i] = id
			}
			out[t] = list
		}
	}
	return out
}

// ContestedAmong is contested (Contested's) as a reader sees it: only the
// actions shown to it, and only the targets two or more of those write.
func ContestedAmong(contested map[string]any, shown func(id string) bool) map[string]any {
	out := map[string]any{}
	for t, ids := range contested {
		var seen []any
		for _, id := range ids.([]any) {
			if shown(id.(string)) {
				seen = append(seen, id)
			}
		}
		if len(seen) > 1 {
			out[t] = seen
		}
	}
	return out
}
