package defs

import (
	"encoding/json"
	"fmt"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// A role's bootstrap definitions (seed 003 §V), as the role lists them:
// which definition each entry is, or why it is none. Registering them,
// as the agent that fills the role, is the core's.

// MaxBootstrap caps the definitions a role's first fill registers (each
// is its own mutation).
const MaxBootstrap = 32

// BootstrapResult is one definition a role's first fill registered, or
// why it could not (the embodiment stands either way: the role is filled
// and its agent may register the definition itself once it is fixed).
type BootstrapResult struct {
	Kind string `json:"kind"` // action or view
	ID   string `json:"id,omitempty"`
	// Error is the registration's error code, Message what was wrong.
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
}

// BootstrapFailed is the result of a bootstrap definition of kind (id,
// when known) refused with err.
func BootstrapFailed(kind, id string, err error) BootstrapResult {
	e := errs.From(err)
	return BootstrapResult{Kind: kind, ID: id, Error: string(e.Code), Message: e.Message}
}

// TooManyBootstrap is the result that ends a role's bootstrap past
// MaxBootstrap definitions.
func TooManyBootstrap(kind string) BootstrapResult {
	return BootstrapFailed(kind, "", errs.New(errs.InvalidField, "over %d bootstrap definitions: the rest were not registered", MaxBootstrap))
}

// BootstrapAction is the action a bootstrap_actions entry v names: a
// standard-library id or an action definition. ok is false when it is
// neither, and bad says why.
func BootstrapAction(v any) (def ActionDef, bad BootstrapResult, ok bool) {
	if id, isID := v.(string); isID {
		found := false
		for _, t := range StandardLibrary {
			if t.ID == id {
				def, found = t, true
			}
		}
		if !found {
			return def, BootstrapResult{Kind: "action", ID: id, Error: "action_not_found",
				Message: fmt.Sprintf("%q is not a standard-library action (help key standard_library lists them); give a definition instead", id)}, false
		}
		return def, BootstrapResult{}, true
	}
	raw, _ := json.Marshal(v)
	if err := json.Unmarshal(raw, &def); err != nil || def.ID == "" {
		return def, BootstrapResult{Kind: "action", Error: "invalid_field", Message: "a bootstrap action is a standard-library id or an action definition {id, writes, …}"}, false
	}
	return def, BootstrapResult{}, true
}

// BootstrapView is the view a bootstrap_views entry v defines; ok is
// false when it is no view definition, and bad says why.
func BootstrapView(v any) (def ViewDef, bad BootstrapResult, ok bool) {
	raw, _ := json.Marshal(v)
	if _, isObj := v.(map[string]any); !isObj || json.Unmarshal(raw, &def) != nil || def.ID == "" {
		return def, BootstrapResult{Kind: "view", Error: "invalid_field", Message: "a bootstrap view is a view definition {id, expr, …}"}, false
	}
	return def, BootstrapResult{}, true
}

// RegisterResult is what a registration returns.
//
// Fields are in reading order (a model reads the JSON): the outcome and
// likely mistakes first, the definition (what the caller sent, with its
// defaults) last.
type RegisterResult struct {
	Created bool  `json:"created"`
	Seq     int64 `json:"seq"`
	// Warnings flag likely mistakes that did not stop the registration.
	Warnings []map[string]any `json:"warnings,omitempty"`
	// Changed lists the fields a re-registration changed.
	Changed []string `json:"changed,omitempty"`
	// Value is a view's value right after registration.
	Value      any `json:"value,omitempty"`
	Definition any `json:"definition"`
}

// Bootstrap registers a role's bootstrap entries, actions then views,
// through register (the core's registration, with the filling agent's own
// authority), at most MaxBootstrap in all, and says for each what became
// of it: registered, not a definition (BootstrapAction, BootstrapView),
// refused by its registration, or past the cap (one entry, and the rest
// are not tried).
func Bootstrap(actions, views []any, registerAction func(ActionDef) error, registerView func(ViewDef) error) []BootstrapResult {
	var out []BootstrapResult
	n := 0
	for _, a := range actions {
		if n++; n > MaxBootstrap {
			out = append(out, TooManyBootstrap("action"))
			break
		}
		def, bad, ok := BootstrapAction(a)
		if !ok {
			out = append(out, bad)
			continue
		}
		if err := registerAction(def); err != nil {
			out = append(out, BootstrapFailed("action", def.ID, err))
			continue
		}
		out = append(out, BootstrapResult{Kind: "action", ID: def.ID})
	}
	for _, v := range views {
		if n++; n > MaxBootstrap {
			out = append(out, TooManyBootstrap("view"))
			break
		}
		def, bad, ok := BootstrapView(v)
		if !ok {
			out = append(out, bad)
			continue
		}
		if err := registerView(def); err != nil {
			out = append(out, BootstrapFailed("view", def.ID, err))
			continue
		}
		out = append(out, BootstrapResult{Kind: "view", ID: def.ID})
	}
	return out
}
