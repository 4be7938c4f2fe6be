package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A tool's input and output are Go types; its schemas are derived from
// them with jsonschema-go, the library the go-sdk derives schemas with.
// The adapter decodes arguments itself (strictly, into errs codes a model
// can act on) rather than through sdk.AddTool, whose validation errors are
// bare text without a code or a next step.

// typed builds a tool from its typed adapter. enums restrict string
// arguments to a set (jsonschema-go has no struct tag for them).
func typed[In, Out any](def *sdk.Tool, enums map[string][]string, run func(context.Context, *call, *In) (Out, error)) tool {
	def.InputSchema = inputSchema[In](enums)
	def.OutputSchema = outputSchema[Out]()
	return tool{def, func(ctx context.Context, c *call, args json.RawMessage) (any, error) {
		var in In
		if err := decodeArgs(def.Name, args, &in); err != nil {
			return nil, err
		}
		out, err := run(ctx, c, &in)
		if err != nil {
			return nil, err
		}
		return out, nil
	}}
}

// rawObject shows json.RawMessage arguments (params, render) as the
// objects they are, not as byte arrays.
var forOptions = &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
	reflect.TypeFor[json.RawMessage](): {Type: "object"},
}}

// inputSchema derives In's schema. Optional arguments are pointers in Go
// (to tell 0 from absent), which jsonschema-go types as ["null", T]; a
// model should simply leave them out, so null is not offered. Nested
// objects keep their type and description only: their fields are in the
// tool's description and help, and tools/list is paid for in every
// conversation.
func inputSchema[In any](enums map[string][]string) *jsonschema.Schema {
	s, err := jsonschema.For[In](forOptions)
	if err != nil {
		panic(fmt.Sprintf("input schema of %T: %v", *new(In), err))
	}
	// Unknown arguments are refused by decodeArgs, with the nearest
	// argument named, which a client's own schema check would not say.
	s.AdditionalProperties = nil
	for name, p := range s.Properties {
		s.Properties[name] = shallow(p)
		if e, ok := enums[name]; ok {
			for _, v := range e {
				s.Properties[name].Enum = append(s.Properties[name].Enum, v)
			}
		}
	}
	for name := range enums {
		if _, ok := s.Properties[name]; !ok {
			panic(fmt.Sprintf("enum for %q, which %T does not have", name, *new(In)))
		}
	}
	return s
}

// outputSchema derives Out's schema, kept to its top level: each field's
// name and JSON type, and which fields are always present. Inner shapes
// are left to the tools' and help's descriptions, and the _session block
// every result carries to the server's instructions: tools/list is paid
// for in every conversation, and the names are what a model finds its way
// by. Other fields are allowed, so _session validates.
//
// Every property has a type: a property schema of true or {} constrains
// nothing (the MCP Inspector's --strict run reports each one, and Claude
// Code refuses a bare true). A field that may be null (a pointer, slice or
// map that is always present) says so with a second type; an optional
// field is left out rather than sent as null, so it has one type; a field
// of any JSON value lists the JSON types, null included. Only successful results carry
// structured content (see result), so errors need no place here. A tool
// leaves out fields a program has no use for (unlisted) and narrows those
// the Go type cannot (retyped).
func outputSchema[Out any]() map[string]any {
	s, err := jsonschema.For[Out](outputOptions)
	if err != nil {
		panic(fmt.Sprintf("output schema of %T: %v", *new(Out), err))
	}
	// Built as a map: jsonschema-go writes an empty schema as true, which
	// the TypeScript SDK refuses as a property schema.
	props := make(map[string]any, len(s.Properties))
	for name, p := range s.Properties {
		props[name] = map[string]any{"type": jsonType(p, slices.Contains(s.Required, name))}
	}
	out := map[string]any{"type": "object", "properties": props}
	if len(s.Required) > 0 {
		out["required"] = s.Required
	}
	return out
}

// outputOptions derive output schemas: a json.RawMessage in a result is
// whatever JSON the domain stored, not necessarily an object.
var outputOptions = &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
	reflect.TypeFor[json.RawMessage](): {},
}}

// anyJSON is the type of a field that holds any JSON value.
var anyJSON = []string{"string", "number", "boolean", "object", "array", "null"}

// jsonType is p's "type" keyword: one type, or a list when it may also be
// null (present fields only) or is any JSON value.
func jsonType(p *jsonschema.Schema, present bool) any {
	types := p.Types
	if p.Type != "" {
		types = []string{p.Type}
	}
	if len(types) == 0 { // any value: true or {}; an interface holding
		// a JSON null (json.RawMessage("null")) is not omitted, so null
		// stays in the list even for an optional field.
		return anyJSON
	}
	nullable := present && slices.Contains(types, "null") // omitempty: absent, never null
	// The value's own type first, then null: easier to read.
	types = slices.DeleteFunc(slices.Clone(types), func(t string) bool { return t == "null" })
	if nullable {
		types = append(types, "null")
	}
	if len(types) == 1 {
		return types[0]
	}
	return types
}

// shallow is p without its inner structure or null type: its type,
// description and enum.
func shallow(p *jsonschema.Schema) *jsonschema.Schema {
	out := &jsonschema.Schema{Type: p.Type, Types: p.Types, Description: p.Description, Enum: p.Enum}
	if len(out.Types) > 0 {
		out.Types = slices.DeleteFunc(slices.Clone(out.Types), func(t string) bool { return t == "null" })
		if len(out.Types) == 1 {
			out.Type, out.Types = out.Types[0], nil
		}
	}
	return out
}

// unlisted leaves result fields out of t's output schema that a client
// program has no use for: a value every success has (invoked: true), a
// field the tool never fills (the Go type is shared with another tool),
// one that is always empty, or prose addressed to the model (next: the
// call to make). The fields stay in the result, which a model reads in
// full; the output schema allows fields it does not list. tools/list
// crosses the wire at every connection, and every listed field is paid
// for there.
func (t tool) unlisted(names ...string) tool {
	out := t.def.OutputSchema.(map[string]any)
	props := out["properties"].(map[string]any)
	for _, n := range names {
		if _, ok := props[n]; !ok {
			panic(fmt.Sprintf("%s: no result field %q to leave out", t.def.Name, n))
		}
		delete(props, n)
		if req, ok := out["required"].([]string); ok {
			req = slices.DeleteFunc(slices.Clone(req), func(r string) bool { return r == n })
			if len(req) == 0 {
				delete(out, "required")
			} else {
				out["required"] = req
			}
		}
	}
	return t
}

// retyped narrows a result field the Go type holds as any to the JSON
// type it always has (a registration's definition is always an object).
// Every result of the package's tests is checked against its schema
// (export_test.go), so a narrowing that is not true fails them.
func (t tool) retyped(name, typ string) tool {
	props := t.def.OutputSchema.(map[string]any)["properties"].(map[string]any)
	if _, ok := props[name]; !ok {
		panic(fmt.Sprintf("%s: no result field %q to retype", t.def.Name, name))
	}
	props[name] = map[string]any{"type": typ}
	return t
}
