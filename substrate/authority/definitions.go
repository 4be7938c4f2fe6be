package authority

import (
	"strings"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// The authority of definitions (actions and views): who registers one in
// which scope, who replaces it, and with whose authority it reads.

// Registrar resolves the authority scope of a definition p registers in
// scope: _shared, p's own scope, or (room authority only) another agent's.
// A read-only credential registers nothing.
func Registrar(p *Principal, scope string) (string, error) {
	if p.ReadOnly() {
		return "", errs.New(errs.ReadOnlyToken, "the view token is read-only").WithHint("register with the room token or an agent token")
	}
	switch scope {
	case "", ScopeShared:
		return ScopeShared, nil
	case ScopeSelf:
		if p.Kind != KindAgent {
			return "", errs.New(errs.InvalidField, `scope "self" needs an agent token`).WithHint(`use "_shared" or name the agent`)
		}
		return p.AgentID, nil
	}
	if strings.HasPrefix(scope, "_") {
		return "", errs.New(errs.InvalidField, "scope %q: a definition's scope is _shared or an agent id", scope).
			WithHint(`use "_shared", or your agent id to act with your own scope's authority`)
	}
	if !p.Admin() && scope != p.AgentID {
		return "", errs.New(errs.ScopeDenied, "agent %q cannot register in agent %q's scope", p.AgentID, scope).
			WithHint("register with scope %q (your own) or \"_shared\"", p.AgentID)
	}
	return scope, nil
}

// MayReplace reports whether p may replace or delete an existing
// definition of scope, registered by registeredBy.
func MayReplace(p *Principal, scope, registeredBy string) bool {
	return p.Admin() || (p.Kind == KindAgent && (p.AgentID == scope || p.AgentID == registeredBy))
}

// DefinitionReader is the authority a definition (an action or a view)
// registered in scope reads state with: the scope's own, as an agent with
// no grants, never the reader's nor room authority. A communal definition
// (scope _shared) is no agent's, but its registrant (registeredBy) is one:
// it reads with the registrant's read permissions of features (ReadsAs),
// so an agent denied the loom cannot read it through a _shared view or
// action of its own (a confused deputy).
func DefinitionReader(scope, registeredBy string) *Principal {
	p := &Principal{Kind: KindAgent, AgentID: scope}
	if scope == ScopeShared {
		p.readsAs = registeredBy
	}
	return p
}

// Bootstrapper is the authority a role's bootstrap definitions are
// registered with when the role is first filled: the filling agent's own
// (its scope and _shared), never its grants nor room authority, so that
// whoever defined the role (any agent who could invoke define_role) does
// not borrow the authority of whoever fills it, an owner included.
func Bootstrapper(roomID, agentID string) *Principal {
	return &Principal{Kind: KindAgent, RoomID: roomID, AgentID: agentID, Ceiling: func(string) bool { return false }}
}
