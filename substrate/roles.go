package substrate

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// maxBootstrap caps the definitions a role's first fill registers (each
// is its own mutation).
const maxBootstrap = 32

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

// bootstrapRole registers a role's bootstrap_actions (standard-library
// ids or action definitions) and bootstrap_views (view definitions) as the
// role's agent, when the role is first filled (seed 003 §V: "it reads the
// definition, registers the expected actions and views").
//
// They are registered with the agent's own authority only (its scope and
// _shared), never its grants nor room authority: whoever defined the role
// (any agent who could invoke define_role) must not borrow the authority
// of whoever fills it, an owner included. So a definition naming another
// agent's scope, or replacing someone else's action, is refused like any
// registration by that agent would be.
func (s *Service) bootstrapRole(ctx context.Context, roomID, agentID string, actions, views []any) []BootstrapResult {
	p := authority.Bootstrapper(roomID, agentID)
	var out []BootstrapResult
	fail := func(kind, id string, err error) {
		e := errs.From(err)
		out = append(out, BootstrapResult{Kind: kind, ID: id, Error: string(e.Code), Message: e.Message})
	}
	n := 0
	for _, a := range actions {
		if n++; n > maxBootstrap {
			fail("action", "", errs.New(errs.InvalidField, "over %d bootstrap definitions: the rest were not registered", maxBootstrap))
			break
		}
		var def ActionDef
		switch v := a.(type) {
		case string:
			found := false
			for _, t := range defs.StandardLibrary {
				if t.ID == v {
					def, found = t, true
				}
			}
			if !found {
				out = append(out, BootstrapResult{Kind: "action", ID: v, Error: "action_not_found",
					Message: fmt.Sprintf("%q is not a standard-library action (help key standard_library lists them); give a definition instead", v)})
				continue
			}
		default:
			raw, _ := json.Marshal(v)
			if err := json.Unmarshal(raw, &def); err != nil || def.ID == "" {
				out = append(out, BootstrapResult{Kind: "action", Error: "invalid_field", Message: "a bootstrap action is a standard-library id or an action definition {id, writes, …}"})
				continue
			}
		}
		if _, err := s.RegisterAction(ctx, p, roomID, def); err != nil {
			fail("action", def.ID, err)
			continue
		}
		out = append(out, BootstrapResult{Kind: "action", ID: def.ID})
	}
	for _, v := range views {
		if n++; n > maxBootstrap {
			fail("view", "", errs.New(errs.InvalidField, "over %d bootstrap definitions: the rest were not registered", maxBootstrap))
			break
		}
		var def ViewDef
		raw, _ := json.Marshal(v)
		if _, isObj := v.(map[string]any); !isObj || json.Unmarshal(raw, &def) != nil || def.ID == "" {
			out = append(out, BootstrapResult{Kind: "view", Error: "invalid_field", Message: "a bootstrap view is a view definition {id, expr, …}"})
			continue
		}
		if _, err := s.RegisterView(ctx, p, roomID, def); err != nil {
			fail("view", def.ID, err)
			continue
		}
		out = append(out, BootstrapResult{Kind: "view", ID: def.ID})
	}
	return out
}
