package envelope

// How the envelope shows an action: the core's ActionView, from a
// definition, whether the reader may invoke it now and its cooldown; and
// how a budget shrinks it (Actions, the shape Fit is given).

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/syncsubstrate/sync/substrate/defs"
)

// ActionView is an action (or builtin) as the reader sees it; the
// definition's fields are shown beyond the lean depth.
type ActionView struct {
	// Signature is the call in brief: move(cell*: integer 0…8).
	Signature       string                    `json:"signature,omitempty"`
	Available       bool                      `json:"available"`
	Builtin         bool                      `json:"builtin,omitempty"`
	Description     string                    `json:"description"`
	Cooldown        map[string]any            `json:"cooldown,omitempty"`
	Params          map[string]defs.ParamSpec `json:"params,omitempty"`
	Writes          []defs.WriteTemplate      `json:"writes,omitempty"`
	If              string                    `json:"if,omitempty"`
	Enabled         *bool                     `json:"enabled,omitempty"`
	Scope           string                    `json:"scope,omitempty"`
	RegisteredBy    string                    `json:"registered_by,omitempty"`
	Intent          string                    `json:"intent,omitempty"`
	Result          string                    `json:"result,omitempty"`
	InvocationCount *int                      `json:"invocation_count,omitempty"`
	// Stale (at depth usage) marks an action registered a while ago and
	// never invoked since; LowSalience one nobody has used for long. Both
	// still work.
	Stale       bool `json:"_stale,omitempty"`
	LowSalience bool `json:"_low_salience,omitempty"`
}

// ActionOf is a room's action id as a read at depth shows it: available
// when the reader may invoke it now, with its cooldown (nil: none).
func ActionOf(id string, def *defs.ActionDef, available bool, cooldown map[string]any, depth string) ActionView {
	a := ActionView{Signature: Signature(id, def.Params), Available: available, Description: def.Description, Cooldown: cooldown}
	if depth != "lean" {
		enabled := true
		a.Params, a.Writes, a.If, a.Enabled = def.Params, def.Writes, def.If, &enabled
		a.Scope, a.RegisteredBy, a.Intent, a.Result = def.Scope, def.RegisteredBy, def.Intent, def.Result
	}
	return a
}

// BuiltinsLine is the builtins at the lean depth, in one line.
const BuiltinsLine = "_send_message {body, to?, kind?}; _register_action {id, writes, params?, if?…}; _register_view {id, expr, scope?}; _delete_action {id}; _delete_view {id}; help {key?}"

// ReadOnlyBuiltinsLine is BuiltinsLine for a reader that may invoke
// nothing.
const ReadOnlyBuiltinsLine = "help {key?} (read-only: no other action)"

// Actions is how a budget shrinks actions: to their lean view (a lean
// read's fields), then without descriptions, the available first.
var Actions = ActionShape[ActionView]{
	Lean: func(a ActionView) (ActionView, bool, bool) {
		full := a.Params != nil || a.Writes != nil || a.If != "" || a.Intent != ""
		return ActionView{Signature: a.Signature, Available: a.Available, Description: a.Description, Cooldown: a.Cooldown}, full, a.Builtin
	},
	Undescribed: func(a ActionView) (ActionView, bool) {
		had := a.Description != ""
		a.Description = ""
		return a, had
	},
	Available:    func(a ActionView) bool { return a.Available },
	BuiltinsLine: BuiltinsLine,
}

// Signature renders an action's call in brief, params sorted, required
// ones marked *: move(cell*: integer 0…8, note: string).
func Signature(id string, params map[string]defs.ParamSpec) string {
	names := make([]string, 0, len(params))
	for n := range params {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		p := params[n]
		t := p.Type
		if t == "" {
			t = "any"
		}
		mark := ""
		if p.Required {
			mark = "*"
		}
		part := n + mark + ": " + t
		if len(p.Enum) > 0 {
			vals := make([]string, 0, len(p.Enum))
			for _, v := range p.Enum {
				raw, _ := json.Marshal(v)
				vals = append(vals, string(raw))
			}
			if len(vals) > 6 {
				vals = append(vals[:2], "…", vals[len(vals)-1])
			}
			part += " " + strings.Join(vals, "|")
		}
		parts[i] = part
	}
	return id + "(" + strings.Join(parts, ", ") + ")"
}

// AddBuiltins adds to acts, a read's action list beyond the lean depth,
// the builtins (id → description, params) no action of the room
// overrides: available to a reader that may act, help to every reader.
func AddBuiltins(acts map[string]ActionView, descriptions map[string]string, params map[string]map[string]defs.ParamSpec, canAct bool) {
	for id, desc := range descriptions {
		if _, overridden := acts[id]; overridden {
			continue
		}
		acts[id] = ActionView{Available: canAct || id == "help", Builtin: true, Description: desc, Params: params[id]}
	}
}
