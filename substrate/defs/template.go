package defs

// The templates an action's writes hold (${params.<name>}, ${self},
// ${now}): checked when the action is registered, rendered at each
// invocation.

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
)

var templateRE = regexp.MustCompile(`\$\{([^}]*)\}`)

// CheckTemplates refuses a template in s that is not one (field names
// s in the error), or names a parameter params does not declare.
func CheckTemplates(field, s string, params map[string]ParamSpec) error {
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

// CheckJSONTemplates is CheckTemplates for every string (and object key)
// of a JSON value.
func CheckJSONTemplates(field string, raw json.RawMessage, params map[string]ParamSpec) error {
	var v any
	if err := DecodeNumber(raw, &v); err != nil {
		return errs.New(errs.InvalidJSON, "%s is not valid JSON: %v", field, err).WithHint("send valid JSON")
	}
	var walk func(v any) error
	walk = func(v any) error {
		switch x := v.(type) {
		case string:
			return CheckTemplates(field, x, params)
		case []any:
			for _, e := range x {
				if err := walk(e); err != nil {
					return err
				}
			}
		case map[string]any:
			for k, e := range x {
				if err := CheckTemplates(field, k, params); err != nil {
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

// Renderer substitutes templates for one invocation.
type Renderer struct {
	Params map[string]any // JSON-shaped (json.Number for numbers)
	Self   string         // the invoking agent
	Now    string         // the invocation's time, RFC 3339
}

func (r *Renderer) lookup(name string) (any, bool) {
	switch name {
	case "self":
		return r.Self, true
	case "now":
		return r.Now, true
	}
	path := strings.Split(strings.TrimPrefix(name, "params."), ".")
	var cur any = r.Params
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

// Str renders templates inside a string as text.
func (r *Renderer) Str(s string) string {
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

// Value renders a JSON value; a string that is exactly one template keeps
// the parameter's type.
func (r *Renderer) Value(v any) any {
	switch x := v.(type) {
	case string:
		if m := templateRE.FindStringSubmatchIndex(x); m != nil && m[0] == 0 && m[1] == len(x) {
			got, ok := r.lookup(x[m[2]:m[3]])
			if !ok {
				return nil
			}
			return got
		}
		return r.Str(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = r.Value(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[r.Str(k)] = r.Value(e)
		}
		return out
	}
	return v
}

// JSON renders a JSON value held as text.
func (r *Renderer) JSON(raw json.RawMessage) (json.RawMessage, error) {
	var v any
	if err := DecodeNumber(raw, &v); err != nil {
		return nil, err
	}
	return json.Marshal(r.Value(v))
}

// Number renders a number-or-template field.
func (r *Renderer) Number(field string, raw json.RawMessage) (json.Number, error) {
	out, err := r.JSON(raw)
	if err != nil {
		return "", err
	}
	var n json.Number
	if err := DecodeNumber(out, &n); err == nil {
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

// DecodeNumber decodes JSON keeping numbers as json.Number, so that
// integers stay exact through params, templates and increments.
func DecodeNumber(raw []byte, v any) error {
	// The targets invocations use, without a json.Decoder each
	// (expr.DecodeJSON); a result of another shape goes to encoding/json
	// below, for its error.
	switch t := v.(type) {
	case *any:
		x, err := expr.DecodeJSON(raw)
		if err == nil {
			*t = x
		}
		return err
	case *map[string]any:
		if x, err := expr.DecodeJSON(raw); err != nil {
			return err
		} else if m, ok := x.(map[string]any); ok || x == nil {
			*t = m
			return nil
		}
	case *json.Number:
		if x, err := expr.DecodeJSON(raw); err == nil {
			if n, ok := x.(json.Number); ok {
				*t = n
				return nil
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}
