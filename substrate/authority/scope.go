package authority

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// Scope conventions (seed 001 §State, ARCHITECTURE §3):
//
//   - Scopes starting with "_" are communal: every credential of the room
//     reads them. _shared is the communal mutable scope, _messages the
//     message log.
//   - _audit records every write, values included, so reading it would
//     reveal private scopes: only the room and view tokens and agents
//     granted "_audit" (or "*") read it. Nobody writes it directly.
//   - _agents, _actions and _views are reserved for the system.
//   - Any other scope is private: the agent with that id reads and writes
//     it, others only with a grant. Room and view tokens read everything.
const (
	ScopeShared   = "_shared"
	ScopeMessages = "_messages"
	ScopeAudit    = "_audit"
	// ScopeSelf is the alias an agent may use for its own scope.
	ScopeSelf = "self"
)

// CanRead reports whether p may read scope: the core's read rule, which
// a feature's ReadRule may only narrow (Visibility).
func CanRead(p *Principal, scope string) bool {
	if p.Kind == KindRoom || p.Kind == KindView || p.ReadsAll || p.Admin() {
		return true
	}
	if scope == ScopeAudit {
		return slices.Contains(p.Grants, ScopeAudit)
	}
	if strings.HasPrefix(scope, "_") {
		return true
	}
	return scope == p.AgentID || slices.Contains(p.Grants, scope)
}

// CheckWrite returns nil when p may write scope directly. system says
// whether scope is one only the system writes (the core's reserved scopes
// and its features'), which the core knows and this rule refuses.
func CheckWrite(p *Principal, scope string, system bool) error {
	if p.ReadOnly() {
		return errs.New(errs.ReadOnlyToken, "this credential is read-only").
			WithHint("write with the room token or an agent token (over MCP: embody an agent first)")
	}
	if system {
		return errs.New(errs.ScopeDenied, "scope %q is written only by the system", scope).
			WithHint("write to _shared, your own scope or a user-defined scope")
	}
	if p.Admin() || scope == p.AgentID || slices.Contains(p.Grants, scope) {
		return nil
	}
	e := errs.New(errs.ScopeDenied, "agent %q has no write authority over scope %q", p.AgentID, scope).
		With("scope", scope).With("grants", p.Grants)
	if scope == ScopeShared || strings.HasPrefix(scope, "_") {
		return e.WithHint("write to your own scope (%q), invoke an action that writes %s, or ask the room token holder for a %q grant", p.AgentID, scope, scope)
	}
	return e.WithHint("agents write their own scope (%q) or granted scopes; ask the room token holder for a grant", p.AgentID)
}

// ResolveScope maps the "self" alias to the caller's scope.
func ResolveScope(p *Principal, scope string) (string, error) {
	if scope != ScopeSelf {
		return scope, nil
	}
	if p.Kind != KindAgent {
		return "", errs.New(errs.InvalidField, `scope "self" means the calling agent's own scope, and this token is not an agent's`).
			WithHint("name the scope explicitly")
	}
	return p.AgentID, nil
}

// ValidName checks room ids, agent ids and scope names: 1..max bytes of
// letters, digits and _ . : @ -, not "self" and not "*", and not starting
// with ".": "." and ".." are path segments that URLs resolve away (a room
// called ".." is reachable only percent-encoded, and proxies may rewrite
// even that), and a leading dot reads as hidden in files and exports.
func ValidName(what, s string, max int, allowUnderscore bool) error {
	hint := "use 1–%d characters from A–Z a–z 0–9 _ . : @ -"
	switch {
	case s == "":
		return errs.New(errs.InvalidField, "%s is empty", what).WithHint(hint, max)
	case len(s) > max:
		return errs.New(errs.InvalidField, "%s is %d bytes, over the limit of %d", what, len(s), max).WithHint(hint, max)
	case s == ScopeSelf || s == "*":
		return errs.New(errs.InvalidField, "%s %q is reserved", what, s).WithHint("choose another name")
	case s[0] == '.':
		return errs.New(errs.InvalidField, "%s %q starts with \".\": \".\" and \"..\" are path segments URLs resolve away, so no id or scope starts with a dot", what, s).
			With("reason", "leading_dot").WithHint("choose a name that starts with a letter or digit")
	case !allowUnderscore && s[0] == '_':
		return errs.New(errs.InvalidField, "%s %q starts with _, which is reserved for communal and system scopes", what, s).WithHint("choose a name that starts with a letter or digit")
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.:@-", r)) {
			return errs.New(errs.InvalidField, "%s %q contains %q", what, s, r).WithHint(hint, max)
		}
	}
	return nil
}

// ValidKey checks a key: not empty, at most max bytes, UTF-8, no control
// characters and none of the bidirectional controls (IsBidiControl).
func ValidKey(key string, max int) error {
	switch {
	case key == "":
		return errs.New(errs.InvalidField, "key is empty").WithHint("give every write a key (append writes may omit it)")
	case len(key) > max:
		return errs.New(errs.InvalidField, "key is %d bytes, over the limit of %d", len(key), max).WithHint("use a shorter key")
	case !utf8.ValidString(key):
		return errs.New(errs.InvalidField, "key is not valid UTF-8").WithHint("use a UTF-8 key")
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
			return errs.New(errs.InvalidField, "key contains control character %U", r).WithHint("use printable characters in keys")
		}
		if IsBidiControl(r) {
			return errs.New(errs.InvalidField, "key contains the bidirectional control character %U", r).
				WithHint("remove it: it makes a key display as another one")
		}
	}
	return nil
}

// IsBidiControl reports the invisible characters that reorder text
// (embeddings, overrides, isolates and marks): in a key or a name they make
// one read as another to people and models.
func IsBidiControl(r rune) bool {
	return r == 0x061C || r == 0x200E || r == 0x200F || (r >= 0x202A && r <= 0x202E) || (r >= 0x2066 && r <= 0x2069)
}
