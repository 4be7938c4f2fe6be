package defs

import (
	"bytes"
	"encoding/json"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// The builtins an agent invokes like actions (the underscore ones and
// help): what each is called, says and takes. What they do to a room is
// the core's (builtins.go); these are their definitions, as the context
// lists them and a registration must not shadow them.

// BuiltinDescriptions describes each builtin, as the context lists it.
var BuiltinDescriptions = map[string]string{
	"_register_action": "Register or replace an action: {id, scope?, description?, intent?, params?, if?, enabled?, writes, result?, timer?, on_invoke?}.",
	"_delete_action":   "Delete an action you registered: {id}.",
	"_register_view":   "Register or replace a view, a public CEL projection: {id, expr, scope? (default: your own), description?, enabled?, render?, timer?}.",
	"_delete_view":     "Delete a view you registered: {id}.",
	"_send_message":    "Post to _messages: {body, kind? (default chat), to? (agent id or list: directed), reply_to? (seq: joins its thread), subject? (starts a thread), ack? (true: recipients acknowledge with _ack)}.",
	"_ack":             "Acknowledge a message that asked you (ack: true): {seq}.",
	"help":             "Read the help: {key?}. Without a key, the list of keys.",
}

// BuiltinParams are the builtins' parameters, as the context lists them.
var BuiltinParams = map[string]map[string]ParamSpec{
	"_register_action": {"id": {Type: "string", Required: true}, "writes": {Type: "array"}, "scope": {Type: "string"}, "if": {Type: "string"}},
	"_delete_action":   {"id": {Type: "string", Required: true}},
	"_register_view":   {"id": {Type: "string", Required: true}, "expr": {Type: "string", Required: true}, "scope": {Type: "string"}},
	"_delete_view":     {"id": {Type: "string", Required: true}},
	"_send_message": {"body": {Required: true}, "kind": {Type: "string"}, "to": {Description: "agent id or list of agent ids"},
		"reply_to": {Type: "integer", Description: "seq of the message answered"}, "subject": {Type: "string"}, "ack": {Type: "boolean"}},
	"_ack": {"seq": {Type: "integer", Required: true}},
	"help": {"key": {Type: "string"}},
}

// IsBuiltin reports whether id names a builtin.
func IsBuiltin(id string) bool { _, ok := BuiltinDescriptions[id]; return ok }

// StrictDecode decodes a builtin's params (raw; none is {}) into v,
// refusing fields v does not have: a misspelt field would otherwise be
// dropped without a word.
func StrictDecode(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errs.New(errs.InvalidParam, "params do not fit the definition: %v", err).WithHint("see help key guide for the fields")
	}
	return nil
}

// StringParam is the non-empty string parameter name of builtin id.
func StringParam(id string, params map[string]any, name string) (string, error) {
	v, _ := params[name].(string)
	if v == "" {
		return "", errs.New(errs.InvalidParam, "%s needs the string parameter %q", id, name).With("param", name).WithHint("invoke %s with params {%q: …}", id, name)
	}
	return v, nil
}

// Message is what _send_message's params say of the message.
type Message struct {
	Body any
	Kind string
	// Directed: the params name recipients (To, possibly none).
	Directed bool
	To       []string
}

// MessageParams checks _send_message's params but the thread and ack
// (which need the room): the body, the kind (chat by default), the
// recipients named, which checkTo finds in the room, and no parameter it
// does not have.
func MessageParams(params map[string]any, checkTo func([]string) error) (*Message, error) {
	body, ok := params["body"]
	if !ok || body == nil {
		return nil, errs.New(errs.InvalidParam, "_send_message needs a body").With("param", "body").WithHint(`invoke _send_message with {"body": "…"}`)
	}
	kind, err := messageKind(params)
	if err != nil {
		return nil, err
	}
	out := &Message{Body: body, Kind: kind}
	if t, ok := params["to"]; ok && t != nil {
		to, err := recipients(t)
		if err == nil {
			err = checkTo(to)
		}
		if err != nil {
			return nil, err
		}
		out.Directed, out.To = true, to
	}
	for k := range params {
		switch k {
		case "body", "kind", "to", "reply_to", "subject", "ack":
		default:
			return nil, errs.New(errs.InvalidParam, "_send_message has no parameter %q", k).With("param", k).WithHint("its parameters are body, kind, to, reply_to, subject and ack")
		}
	}
	return out, nil
}

// messageKind is the kind a message's params give it, chat by default.
func messageKind(params map[string]any) (string, error) {
	k, ok := params["kind"]
	if !ok {
		return "chat", nil
	}
	if kind, ok := k.(string); ok && kind != "" && kind != "action_invocation" {
		return kind, nil
	}
	return "", errs.New(errs.InvalidParam, "kind must be a non-empty string other than action_invocation").With("param", "kind").WithHint(`e.g. "chat", "proposal", "status"`)
}

// recipients are the agents a message's to names: one id or a list.
func recipients(to any) ([]string, error) {
	switch x := to.(type) {
	case string:
		return []string{x}, nil
	case []any:
		var list []string
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, errs.New(errs.InvalidParam, "to must be an agent id or a list of them").With("param", "to").WithHint(`e.g. "to": ["alice", "bob"]`)
			}
			list = append(list, s)
		}
		return list, nil
	}
	return nil, errs.New(errs.InvalidParam, "to must be an agent id or a list of them").With("param", "to").WithHint(`e.g. "to": "alice"`)
}
