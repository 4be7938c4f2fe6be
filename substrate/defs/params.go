package defs

// An action's parameters, checked at each invocation against what the
// action declares.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/internal/jsontext"
)

// CheckParams validates invocation params against the spec and fills
// defaults. Params are JSON-shaped with json.Number numbers.
func CheckParams(def *ActionDef, params map[string]any) error {
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

// AuditParams is what an audit entry or invocation message records of
// params: the params themselves when they are storable and within the
// value limits (size and depth), else a summary (their size and
// top-level names), so a refused 800 KB call costs the log a few bytes,
// and an unstorable one is still audited.
func AuditParams(params map[string]any, maxValueBytes, maxValueDepth int) any {
	raw, err := expr.MarshalJSON(params)
	// The invocation message holds params one level down: within the
	// depth limit only when params are under it.
	if err == nil && len(raw) <= maxValueBytes/4 && jsontext.Check(raw) == nil && jsontext.Depth(raw, maxValueDepth) < maxValueDepth {
		return params
	}
	names := make([]string, 0, len(params))
	for k := range params {
		if len(names) == 32 {
			break
		}
		if len(k) > 64 || jsontext.Check([]byte(k)) != nil {
			continue
		}
		names = append(names, k)
	}
	sort.Strings(names)
	return map[string]any{"_elided": true, "bytes": len(raw), "names": names}
}

// CallText renders an invocation as id(k=v, …) for the message log.
func CallText(id string, params map[string]any) string {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		b, _ := json.Marshal(params[k])
		parts[i] = k + "=" + string(b)
	}
	text := id + "(" + strings.Join(parts, ", ") + ")"
	if len(text) > MaxCallText {
		cut := MaxCallText
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "…)"
	}
	return text
}

// MaxCallText caps the text of an invocation message (CallText): the params are in
// the audit log (or summarised there), the message only says what happened.
const MaxCallText = 500
