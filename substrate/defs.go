package substrate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
)

// ActionDef is a registered action (seed 001 §Actions). It is stored as the
// value of state entry _actions/<id>.
type ActionDef struct {
	ID string `json:"id"`
	// Scope is the registrar's authority: "_shared" (the default) or an
	// agent id, whose private scope the action may then write.
	Scope       string `json:"scope,omitempty"`
	Description string `json:"description,omitempty"`
	// Intent is the free-text purpose (seed 000 §7.2).
	Intent string               `json:"intent,omitempty"`
	Params map[string]ParamSpec `json:"params,omitempty"`
	// If gates invocation (CEL, with params).
	If string `json:"if,omitempty"`
	// Enabled gates visibility and availability (CEL).
	Enabled string          `json:"enabled,omitempty"`
	Writes  []WriteTemplate `json:"writes,omitempty"`
	// Result is evaluated after the writes and returned (CEL, with params).
	Result string `json:"result,omitempty"`
	// Timer is the action's own lifecycle.
	Timer *Timer `json:"timer,omitempty"`
	// OnInvoke.Timer starts at each invocation: effect "enable" (the
	// default here) is a cooldown, "delete" retires the action.
	OnInvoke     *OnInvoke `json:"on_invoke,omitempty"`
	RegisteredBy string    `json:"registered_by,omitempty"`
}

// OnInvoke holds what an invocation starts.
type OnInvoke struct {
	Timer *Timer `json:"timer,omitempty"`
}

// ParamSpec describes one action parameter.
type ParamSpec struct {
	// Type is string, number, integer, boolean, object, array or any
	// (the default).
	Type        string `json:"type,omitempty"`
	Enum        []any  `json:"enum,omitempty"`
	Required    bool   `json:"required,omitempty"`
	Description string `json:"description,omitempty"`
	Default     any    `json:"default,omitempty"`
}

// WriteTemplate is one write of an action. Scope, key and values may hold
// templates: ${params.<name>}, ${self} (the invoking agent) and ${now}.
// A string that is exactly one template takes the parameter's JSON type.
type WriteTemplate struct {
	Scope string `json:"scope,omitempty"` // default _shared
	Key   string `json:"key,omitempty"`
	// Exactly one of Value, Merge (deep), Increment and Delete; Append
	// goes with Value.
	Value     json.RawMessage `json:"value,omitempty"`
	Merge     json.RawMessage `json:"merge,omitempty"`
	Append    bool            `json:"append,omitempty"`
	Delete    bool            `json:"delete,omitempty"`
	Increment json.RawMessage `json:"increment,omitempty"` // a number or a template
	// Expr makes Value (or Merge) a CEL expression whose result is written.
	Expr      bool            `json:"expr,omitempty"`
	IfVersion json.RawMessage `json:"if_version,omitempty"` // a number or a template
	Timer     *Timer          `json:"timer,omitempty"`
	Enabled   string          `json:"enabled,omitempty"`
}

// ViewDef is a registered view (seed 001 §Views), stored as the value of
// state entry _views/<id>.
type ViewDef struct {
	ID string `json:"id"`
	// Scope is the registrar's read authority: "_shared" or an agent id,
	// whose private scope the expression may read.
	Scope       string          `json:"scope,omitempty"`
	Expr        string          `json:"expr"`
	Description string          `json:"description,omitempty"`
	Enabled     string          `json:"enabled,omitempty"`
	Render      json.RawMessage `json:"render,omitempty"`
	Timer       *Timer          `json:"timer,omitempty"`
	// Deps are the views the expression reads (derived, not set by clients).
	Deps         []string `json:"deps,omitempty"`
	RegisteredBy string   `json:"registered_by,omitempty"`
}

// Limits on definitions.
const (
	maxWritesPerAction = 32
	maxParams          = 32
	maxTextField       = 4000
)

var paramTypes = []string{"", "any", "string", "number", "integer", "boolean", "object", "array"}

var templateRE = regexp.MustCompile(`\$\{([^}]*)\}`)

// templateNames lists the templates in s, refusing unknown ones.
func checkTemplates(field, s string, params map[string]ParamSpec) error {
	for _, m := range templateRE.FindAllStringSubmatch(s, -1) {
		name := m[1]
		switch {
		case name == "self" || name == "now":
		case strings.HasPrefix(name, "params.") && len(name) > len("params."):
			p := strings.SplitN(strings.TrimPrefix(name, "params."), ".", 2)[0]
			if len(params) > 0 {
				if _, ok := params[p]; !ok {
					return errs.New(errs.InvalidField, "%s uses ${%s}, but the action declares no parameter %q", field, name, p).
						WithHint("declare it under params, or fix the name")
				}
			}
		default:
			return errs.New(errs.InvalidField, "%s uses ${%s}, which is not a template", field, name).
				WithHint("templates are ${params.<name>}, ${self} and ${now}")
		}
	}
	return nil
}

// checkJSONTemplates checks every string (and object key) in a JSON value.
func checkJSONTemplates(field string, raw json.RawMessage, params map[string]ParamSpec) error {
	var v any
	if err := decodeNumber(raw, &v); err != nil {
		return errs.New(errs.InvalidJSON, "%s is not valid JSON: %v", field, err).WithHint("send valid JSON")
	}
	var walk func(v any) error
	walk = func(v any) error {
		switch x := v.(type) {
		case string:
			return checkTemplates(field, x, params)
		case []any:
			for _, e := range x {
				if err := walk(e); err != nil {
					return err
				}
			}
		case map[string]any:
			for k, e := range x {
				if err := checkTemplates(field, k, params); err != nil {
					return err
				}
				if err := walk(e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(v)
}

// renderer substitutes templates for one invocation.
type renderer struct {
	params map[string]any // JSON-shaped (json.Number for numbers)
	self   string
	now    string
}

func (r *renderer) lookup(name string) (any, bool) {
	switch name {
	case "self":
		return r.self, true
	case "now":
		return r.now, true
	}
	path := strings.Split(strings.TrimPrefix(name, "params."), ".")
	var cur any = r.params
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// str renders templates inside a string as text.
func (r *renderer) str(s string) string {
	if !strings.Contains(s, "${") {
		return s
	}
	return templateRE.ReplaceAllStringFunc(s, func(m string) string {
		v, ok := r.lookup(m[2 : len(m)-1])
		if !ok || v == nil {
			return ""
		}
		switch x := v.(type) {
		case string:
			return x
		case json.Number:
			return x.String()
		}
		b, _ := json.Marshal(v)
		return string(b)
	})
}

// value renders a JSON value; a string that is exactly one template keeps
// the parameter's type.
func (r *renderer) value(v any) any {
	switch x := v.(type) {
	case string:
		if m := templateRE.FindStringSubmatchIndex(x); m != nil && m[0] == 0 && m[1] == len(x) {
			got, ok := r.lookup(x[m[2]:m[3]])
			if !ok {
				return nil
			}
			return got
		}
		return r.str(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = r.value(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[r.str(k)] = r.value(e)
		}
		return out
	}
	return v
}

func (r *renderer) json(raw json.RawMessage) (json.RawMessage, error) {
	var v any
	if err := decodeNumber(raw, &v); err != nil {
		return nil, err
	}
	return json.Marshal(r.value(v))
}

// number renders a number-or-template field.
func (r *renderer) number(field string, raw json.RawMessage) (json.Number, error) {
	out, err := r.json(raw)
	if err != nil {
		return "", err
	}
	var n json.Number
	if err := decodeNumber(out, &n); err == nil {
		return n, nil
	}
	var s string
	if json.Unmarshal(out, &s) == nil {
		n = json.Number(strings.TrimSpace(s))
		if _, err := n.Float64(); err == nil {
			return n, nil
		}
	}
	return "", errs.New(errs.InvalidParam, "%s rendered to %s, not a number", field, out).WithHint("pass a number for the parameter it uses")
}

// checkParams validates invocation params against the spec and fills
// defaults. Params are JSON-shaped with json.Number numbers.
func checkParams(def *ActionDef, params map[string]any) error {
	if params == nil {
		return nil
	}
	for name, spec := range def.Params {
		v, ok := params[name]
		if !ok || v == nil {
			if spec.Default != nil {
				params[name] = spec.Default
				continue
			}
			if spec.Required {
				return errs.New(errs.InvalidParam, "parameter %q is required", name).With("param", name).
					WithHint("invoke %s with params {%q: …}%s", def.ID, name, describeParam(spec))
			}
			continue
		}
		if !typeMatches(spec.Type, v) {
			return errs.New(errs.InvalidParam, "parameter %q must be %s, got %s", name, typeArticle(spec.Type), expr.KindOf(v)).
				With("param", name).With("expected", spec.Type).WithHint("pass %q as %s", name, typeArticle(spec.Type))
		}
		if len(spec.Enum) > 0 && !enumHas(spec.Enum, v) {
			return errs.New(errs.InvalidParam, "parameter %q is %v, not one of %v", name, v, spec.Enum).
				With("param", name).With("allowed", spec.Enum).WithHint("pass one of %v", spec.Enum)
		}
	}
	if len(def.Params) > 0 {
		for name := range params {
			if _, ok := def.Params[name]; !ok {
				known := make([]string, 0, len(def.Params))
				for k := range def.Params {
					known = append(known, k)
				}
				slices.Sort(known)
				return errs.New(errs.InvalidParam, "action %s has no parameter %q", def.ID, name).With("param", name).
					WithHint("its parameters are %v", known)
			}
		}
	}
	return nil
}

func describeParam(p ParamSpec) string {
	if len(p.Enum) > 0 {
		return fmt.Sprintf(", one of %v", p.Enum)
	}
	if p.Type != "" && p.Type != "any" {
		return ", " + typeArticle(p.Type)
	}
	return ""
}

func typeArticle(t string) string {
	switch t {
	case "integer", "object", "array":
		return "an " + t
	case "", "any":
		return "any value"
	}
	return "a " + t
}

func typeMatches(t string, v any) bool {
	switch t {
	case "", "any":
		return true
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		_, err := n.Int64()
		return err == nil
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	}
	return false
}

func enumHas(enum []any, v any) bool {
	vb, _ := json.Marshal(v)
	for _, e := range enum {
		eb, _ := json.Marshal(e)
		if bytes.Equal(vb, eb) {
			return true
		}
		// Numbers may differ in spelling (1 vs 1.0).
		if n, ok := v.(json.Number); ok {
			if f, err := n.Float64(); err == nil {
				if ef, ok := e.(float64); ok && ef == f {
					return true
				}
				if en, ok := e.(json.Number); ok {
					if g, err := en.Float64(); err == nil && g == f {
						return true
					}
				}
			}
		}
	}
	return false
}
