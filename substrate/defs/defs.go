// Package defs is what an action or a view is (seed 001 §Actions,
// §Views): the definitions as stored, what makes one valid, the templates
// an action's writes are rendered from, its parameters, the standard
// library, and what an expression's source names; over a room's
// definitions, which views a view reads and when its value is the same
// for everyone (PublicReads), which keys are contested (Contested), the
// warnings a registration carries (ActionWarnings) and a role's bootstrap
// (Bootstrap); and what an invocation's message and a refusal's
// explanation show (CallText, ShownOf). It is rules without a room: nothing here reads a transaction or SQL, so the core gives it
// plain inputs (a compiler, limits) and keeps what needs the room
// (registration, authority over existing definitions, the per-read
// budgets) to itself.
package defs

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// The scopes a definition names: the communal scope and the
// registering agent's own (the core's ScopeShared and ScopeSelf).
const (
	ScopeShared = "_shared"
	ScopeSelf   = "self"
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

// ExprSource is the CEL source of an Expr write (its Value, or else its
// Merge, as a JSON string); "" when it is none.
func (w WriteTemplate) ExprSource() string {
	if !w.Expr {
		return ""
	}
	src := w.Value
	if len(src) == 0 {
		src = w.Merge
	}
	var code string
	_ = json.Unmarshal(src, &code)
	return code
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

// Timer is a lifecycle on a state entry, an action or a view (seed 001
// §State; reference §4.4). Exactly one clock: ms after it is set, an
// absolute time, or a number of ticks (writes to tick_on). With effect
// "delete" (the default) the item is live until the clock runs out; with
// "enable" it is dormant until then.
type Timer struct {
	MS     int64  `json:"ms,omitempty"`
	At     string `json:"at,omitempty"`
	Ticks  int64  `json:"ticks,omitempty"`
	TickOn string `json:"tick_on,omitempty"`
	Effect string `json:"effect,omitempty"`
}

// maxTimer bounds timers so that a typo cannot make something immortal in
// all but name.
const maxTimer = 366 * 24 * time.Hour

// Validate checks a timer definition (field names it in errors) and
// fills its default effect.
func (t *Timer) Validate(field string) error {
	bad := func(f string, a ...any) error {
		return errs.New(errs.InvalidField, "%s: "+f, append([]any{field}, a...)...).
			WithHint(`give exactly one clock: {"ms": 60000}, {"at": "2026-01-02T15:04:05Z"} or {"ticks": 3, "tick_on": "_shared.turn"}, and optionally "effect": "delete" or "enable"`)
	}
	clocks := 0
	if t.MS != 0 {
		clocks++
		if t.MS < 0 || time.Duration(t.MS)*time.Millisecond > maxTimer {
			return bad("ms must be between 1 and %d", maxTimer.Milliseconds())
		}
	}
	if t.At != "" {
		clocks++
		if _, err := time.Parse(time.RFC3339, t.At); err != nil {
			return bad("at %q is not an RFC 3339 time", t.At)
		}
	}
	if t.Ticks != 0 || t.TickOn != "" {
		clocks++
		if t.Ticks <= 0 || t.TickOn == "" {
			return bad("ticks needs a positive count and tick_on naming <scope>.<key>")
		}
		if !strings.Contains(NormalizeTickOn(t.TickOn), ".") {
			return bad("tick_on %q must name <scope>.<key>", t.TickOn)
		}
	}
	if clocks != 1 {
		return bad("has %d clocks", clocks)
	}
	switch t.Effect {
	case "":
		t.Effect = "delete"
	case "delete", "enable":
	default:
		return bad("effect %q is not delete or enable", t.Effect)
	}
	return nil
}

// NormalizeTickOn accepts "state.<scope>.<key>" and "<scope>.<key>".
func NormalizeTickOn(s string) string { return strings.TrimPrefix(s, "state.") }

// ActionInfo is an action as listed.
type ActionInfo struct {
	ActionDef
	Available bool           `json:"available"`
	Enabled   bool           `json:"enabled_now"`
	Cooldown  map[string]any `json:"cooldown,omitempty"`
	Timer     map[string]any `json:"timer_state,omitempty"`
}

// ViewInfo is a view as listed: its definition and current value.
type ViewInfo struct {
	ViewDef
	Value any `json:"value"`
}
