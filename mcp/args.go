package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Arguments are decoded strictly, and a mistake is answered in the words a
// model can act on: which argument was wrong, what it expected, and the
// nearest argument the tool does take. A number sent as a string
// ("timeout_ms": "5000") is taken as the number it spells: models do it,
// and refusing it teaches nothing.

// argField is one argument a tool takes.
type argField struct {
	name     string
	kind     string // string, integer, number, boolean, object, array, any
	required bool
}

// argFields lists the arguments of a tool input type (embedded structs
// flattened), in declaration order.
func argFields(t reflect.Type) []argField {
	var out []argField
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			out = append(out, argFields(f.Type)...)
			continue
		}
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, argField{name: name, kind: kindOf(f.Type), required: !strings.Contains(opts, "omitempty")})
	}
	return out
}

func kindOf(t reflect.Type) string {
	if t == reflect.TypeFor[json.RawMessage]() {
		return "object"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Bool:
		return "boolean"
	case reflect.Map, reflect.Struct:
		return "object"
	case reflect.Slice, reflect.Array:
		return "array"
	}
	return "any"
}

// decodeArgs decodes a tool's arguments into v (a pointer to its input
// type), refusing unknown and mistyped arguments with the nearest valid
// one named, and taking numbers spelt as strings.
func decodeArgs(tool string, args json.RawMessage, v any) error {
	if len(bytes.TrimSpace(args)) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	fields := argFields(reflect.TypeOf(v).Elem())
	byName := map[string]argField{}
	for _, f := range fields {
		byName[f.name] = f
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(args, &raw); err != nil {
		return errs.New(errs.InvalidField, "%s takes an object of arguments", tool).WithHint("pass arguments as an object: %s", signatureOf(fields))
	}
	names := make([]string, 0, len(raw))
	for k := range raw {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		f, ok := byName[k]
		if !ok {
			e := errs.New(errs.InvalidField, "%s has no argument %q", tool, k).With("field", k)
			if near := nearest(k, fields); near != "" {
				return e.With("did_you_mean", near).WithHint("did you mean %q (%s)? %s takes %s", near, byName[near].kind, tool, signatureOf(fields))
			}
			return e.WithHint("%s takes %s", tool, signatureOf(fields))
		}
		val := bytes.TrimSpace(raw[k])
		if string(val) == "null" {
			delete(raw, k)
			continue
		}
		if got := jsonKind(val); !fits(f.kind, got) {
			if (f.kind == "integer" || f.kind == "number") && got == "string" {
				var s string
				_ = json.Unmarshal(val, &s)
				if _, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
					raw[k] = json.RawMessage(strings.TrimSpace(s))
					continue
				}
			}
			if (f.kind == "object" || f.kind == "array") && got == "string" {
				// An object spelt as a JSON string.
				var s string
				_ = json.Unmarshal(val, &s)
				if inner := bytes.TrimSpace([]byte(s)); json.Valid(inner) && jsonKind(inner) == f.kind {
					raw[k] = json.RawMessage(inner)
					continue
				}
			}
			return errs.New(errs.InvalidField, "argument %q is %s %s; %s expects %s", k, article(got), got, tool, article(f.kind)+" "+f.kind).
				With("field", k).With("expected", f.kind).WithHint("%s takes %s", tool, signatureOf(fields))
		}
	}
	for _, f := range fields {
		if _, ok := raw[f.name]; f.required && !ok {
			return errs.New(errs.InvalidField, "%s needs the argument %q (%s)", tool, f.name, f.kind).With("field", f.name).
				WithHint("%s takes %s", tool, signatureOf(fields))
		}
	}
	fixed, _ := json.Marshal(raw)
	if err := strictJSON(fixed, v); err != nil {
		return errs.New(errs.InvalidField, "arguments do not fit %s: %v", tool, err).WithHint("%s takes %s", tool, signatureOf(fields))
	}
	return nil
}

func article(kind string) string {
	if strings.ContainsAny(kind[:1], "aeiou") {
		return "an"
	}
	return "a"
}

// jsonKind is the JSON type of a value.
func jsonKind(v []byte) string {
	switch {
	case len(v) == 0:
		return "nothing"
	case v[0] == '"':
		return "string"
	case v[0] == '{':
		return "object"
	case v[0] == '[':
		return "array"
	case v[0] == 't' || v[0] == 'f':
		return "boolean"
	}
	if bytes.ContainsAny(v, ".eE") {
		return "number"
	}
	return "integer"
}

func fits(want, got string) bool {
	switch want {
	case "any":
		return true
	case "number":
		return got == "number" || got == "integer"
	case "integer":
		return got == "integer"
	}
	return want == got
}

// signatureOf lists a tool's arguments: name (type, required).
func signatureOf(fields []argField) string {
	if len(fields) == 0 {
		return "no arguments"
	}
	parts := make([]string, len(fields))
	for i, f := range fields {
		req := ""
		if f.required {
			req = ", required"
		}
		parts[i] = fmt.Sprintf("%s (%s%s)", f.name, f.kind, req)
	}
	return strings.Join(parts, ", ")
}

// argAliases are names models reach for that mean a tool's argument.
var argAliases = map[string][]string{
	"action":     {"action_id", "name", "id", "action_name"},
	"params":     {"parameters", "args", "arguments", "input"},
	"room":       {"room_id", "roomid", "room_name"},
	"agent":      {"agent_id", "as"},
	"condition":  {"expr", "expression", "cel", "until", "when"},
	"expr":       {"expression", "cel", "condition", "query"},
	"body":       {"text", "message", "content"},
	"to":         {"recipient", "recipients"},
	"key":        {"topic", "help_key"},
	"username":   {"user", "user_name"},
	"timeout_ms": {"timeout", "timeout_s", "timeout_seconds", "wait_ms"},
	"commands":   {"command", "cmd", "input"},
}

// nearest is the argument a mistaken name most likely meant: a known
// alias, else the closest by edit distance (within a third of its length).
func nearest(name string, fields []argField) string {
	low := strings.ToLower(name)
	for _, f := range fields {
		for _, a := range argAliases[f.name] {
			if a == low {
				return f.name
			}
		}
	}
	best, bestD := "", len(name)/3+2
	for _, f := range fields {
		if d := substrate.EditDistance(low, f.name); d < bestD {
			best, bestD = f.name, d
		}
		if strings.Contains(low, f.name) || strings.Contains(f.name, low) && len(low) >= 3 {
			if best == "" {
				best = f.name
			}
		}
	}
	return best
}
