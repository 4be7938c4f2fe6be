package authority

import (
	"slices"
	"strings"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// The authority over a room and what is in it, decided from facts the
// core has looked up (the room exists, the agent is a person's, its scope
// holds state): who addresses the room, joins it, changes an agent or
// speaks for one, deletes the room or rotates its tokens, invokes, and
// what an action writes. Nothing here reads a row, so each rule can be
// read, and tested, apart from the SQL that feeds it.

// Address returns nil when p may address roomID at all. exists is asked
// only when p belongs to another room: whether roomID exists decides
// which of the two refusals is true, and a stranger's token is told
// which (there is no room to find, or the token is for another one).
func Address(p *Principal, roomID string, exists func() (bool, error)) error {
	if p == nil {
		return errs.New(errs.Unauthorized, "this request needs a bearer token").
			WithHint("send Authorization: Bearer <room_, view_ or as_ token of room %q>", roomID)
	}
	if p.RoomID == roomID {
		return nil
	}
	ok, err := exists()
	if err != nil {
		return err
	}
	if !ok {
		return errs.New(errs.RoomNotFound, "room %q does not exist", roomID).WithHint("check the room id, or create the room").
			WithNext(errs.Step{Op: errs.OpCreateRoom, Args: map[string]any{"room": roomID}})
	}
	return errs.New(errs.Forbidden, "the token belongs to room %q, not %q", p.RoomID, roomID).
		WithHint("use a token issued for room %q", roomID)
}

// Joining is what the room holds for the agent id a join names, read
// under the room lock, and what the join asks for.
type Joining struct {
	// OpenJoin: the room lets anyone join with a new agent id.
	OpenJoin bool
	// Exists: the agent exists, so the join is a re-join (a new token).
	Exists bool
	// ScopeUsed: the agent's scope already holds state.
	ScopeUsed bool
	// Account: a person's account drives the agent.
	Account bool
	// SetsEnabled: the join sets the agent's enabled gate.
	SetsEnabled bool
}

// MayJoin returns nil when p (nil: no token) may join agentID to roomID,
// or re-join it with a fresh token, given what the room holds (j).
func MayJoin(p *Principal, roomID, agentID string, j Joining) error {
	admin := p != nil && p.Admin()
	if j.SetsEnabled && !admin {
		// A gate the agent sets itself would let it watch the room
		// unseen by the others.
		return errs.New(errs.Forbidden, "setting an agent's enabled needs the room token").With("field", "enabled").
			WithHint("join without enabled; the room token holder may set it on join or with PATCH")
	}
	if j.Exists {
		self := p != nil && p.Kind == KindAgent && p.AgentID == agentID
		if !admin && !self {
			return errs.New(errs.AgentExists, "agent %q already exists in room %q", agentID, roomID).
				WithHint("re-join with that agent's token or the room token (this rotates its token), or join with another id")
		}
		if j.Account {
			// A token for a person's agent would let its holder speak as
			// that person.
			return errs.New(errs.Forbidden, "agent %q is driven by a person's account: it gets no token", agentID).
				With("agent", agentID).With("reason", "account_agent").
				WithHint("join with another id")
		}
		return nil
	}
	if !admin && !j.OpenJoin {
		if p == nil {
			return errs.New(errs.Unauthorized, "joining room %q needs the room token", roomID).
				WithHint("send Authorization: Bearer room_…; this room does not allow open join")
		}
		return errs.New(errs.Forbidden, "joining room %q needs the room token", roomID).
			WithHint("ask the room token holder to add the agent; this room does not allow open join")
	}
	if !admin && strings.Contains(agentID, ":") {
		// <username>:<client> and <username>:web are people's agents:
		// joining an open room under one would pass for that person.
		return errs.New(errs.Forbidden, "agent ids with \":\" belong to people's accounts (<username>:<client>); joining as %q needs the room token", agentID).
			With("agent", agentID).With("reason", "person_id").
			WithHint("join with an id without \":\"")
	}
	if j.ScopeUsed {
		// Taking this id would hand the newcomer an existing scope's data.
		return errs.New(errs.ScopeInUse, "scope %q already holds state, so %q cannot be a new agent id", agentID, agentID).
			WithHint("join with another id")
	}
	return nil
}

// MayChangeAgent returns nil when p may change an agent's name, role,
// grants, meta or gate: room authority only.
func MayChangeAgent(p *Principal) error {
	if !p.Admin() {
		return errs.New(errs.Forbidden, "changing an agent needs the room token").WithHint("ask the room token holder")
	}
	return nil
}

// MayRename returns nil when agentID's name may change. An agent a
// person's account drives (account) keeps its name, the account's
// username: contexts and pages show it as the account driving the agent.
func MayRename(agentID string, account bool) error {
	if account {
		return errs.New(errs.Forbidden, "agent %q is driven by a person's account, whose username is its name", agentID).
			With("agent", agentID).With("reason", "account_agent").With("field", "name").WithHint("change its role, grants or meta, not its name")
	}
	return nil
}

// Grants is gs as an agent's grants are stored: without repeats, each
// "*" or a valid scope name that may be granted. A system scope (system
// says which are) is written only by the system, so granting it would
// mean nothing, or worse; _audit, which is read only, may be granted.
func Grants(gs []string, maxGrants, maxScopeBytes int, system func(string) bool) ([]string, error) {
	if len(gs) > maxGrants {
		return nil, errs.New(errs.InvalidField, "%d grants, over the limit of %d", len(gs), maxGrants).WithHint("grant fewer scopes, or grant \"*\"")
	}
	grants := []string{}
	for _, g := range gs {
		if g != "*" {
			if err := ValidName("grant", g, maxScopeBytes, true); err != nil {
				return nil, err
			}
			if system(g) && g != ScopeAudit {
				return nil, errs.New(errs.InvalidField, "scope %q is written only by the system and cannot be granted", g).WithHint("grant _shared, _messages, _audit, agent scopes or user-defined scopes")
			}
		}
		if !slices.Contains(grants, g) {
			grants = append(grants, g)
		}
	}
	return grants, nil
}

// MayHeartbeat returns nil when p may mark agentID present: the agent
// itself or room authority.
func MayHeartbeat(p *Principal, agentID string) error {
	if !p.Admin() && !(p.Kind == KindAgent && p.AgentID == agentID) {
		return errs.New(errs.Forbidden, "only agent %q or the room token may send its heartbeat", agentID).WithHint("send the heartbeat with that agent's token")
	}
	return nil
}

// Embodies returns nil when userID still drives agentID of roomID, whose
// driver is owner (nil: no person's). When another user has since taken
// the agent over (a vacated role filled again) the old session no longer
// drives it: errs.Forbidden with reason "taken_over".
func Embodies(roomID, agentID, userID string, owner *string) error {
	if owner == nil || *owner != userID {
		return errs.New(errs.Forbidden, "agent %q in %q is now driven by someone else: its role was filled again after you left it", agentID, roomID).
			With("room", roomID).With("agent", agentID).With("reason", "taken_over").
			WithHint("step out with sync_disembody (it leaves the agent alone), then embody again; sync_lobby shows who holds which role")
	}
	return nil
}

// MayDeleteRoom returns nil when p may delete roomID: room authority only.
func MayDeleteRoom(p *Principal, roomID string) error {
	if !p.Admin() {
		return errs.New(errs.Forbidden, "deleting room %q needs the room token", roomID).WithHint("ask the room's owner")
	}
	return nil
}

// MayRotate returns nil when p may rotate roomID's room or view token:
// room authority only. The core asks twice, before the lock and again
// under it with the grants read again, so that a "*" taken away
// meanwhile no longer rotates.
func MayRotate(p *Principal, roomID string) error {
	if !p.Admin() {
		return errs.New(errs.Forbidden, "rotating room %q's tokens needs room authority", roomID).
			WithHint("ask the room token holder or an owner of the room")
	}
	return nil
}

// MayInvoke returns nil when p may invoke a room's actions and the
// underscore builtins. A read-only credential never writes, whatever the
// action: the builtin help, which the core answers before asking, is all
// it may invoke, not a room's own action that took its name.
func MayInvoke(p *Principal) error {
	if p.ReadOnly() {
		return errs.New(errs.ReadOnlyToken, "a read-only credential (%s) cannot invoke actions", p.Kind).
			WithHint("invoke with an agent token or the room token; read-only callers may read the context and invoke the builtin help")
	}
	return nil
}

// ActionMayWrite returns nil when action id, registered in scope, may
// write target for invoker ("" when not known, as at registration): the
// registrar's authority is communal scopes, the action's own scope and
// the invoker's own scope. system says target is written only by the
// system, which no action writes.
func ActionMayWrite(id, scope, invoker, target string, system bool) error {
	if system {
		return errs.New(errs.ScopeDenied, "scope %q is written only by the system", target).WithHint("write to _shared or an agent scope")
	}
	if strings.HasPrefix(target, "_") || target == scope || (invoker != "" && target == invoker) {
		return nil
	}
	return errs.New(errs.ScopeDenied, "action %q (scope %s) cannot write agent %q's scope", id, scope, target).
		With("scope", target).
		WithHint("an action writes communal scopes, its registrar's scope (%s) and the invoker's own scope (${self})", scope)
}

// ViewRegistrar is Registrar for a view: with no scope given, an agent's
// view is registered in its own scope, on every surface, because a view
// exists to project private state.
func ViewRegistrar(p *Principal, scope string) (string, error) {
	if scope == "" && p.Kind == KindAgent {
		scope = p.AgentID
	}
	return Registrar(p, scope)
}

// ViewDeleter returns nil when p may delete definitions (actions and
// views) at all: a read-only credential deletes nothing. Whose a
// definition is decides the rest (MayUndefine).
func ViewDeleter(p *Principal) error {
	if p.ReadOnly() {
		return errs.New(errs.ReadOnlyToken, "the view token is read-only").WithHint("delete with the room token or an agent token")
	}
	return nil
}

// MayRedefine returns nil when p may replace the live kind ("action" or
// "view") id, registered in scope by registeredBy (MayReplace).
func MayRedefine(p *Principal, kind, id, scope, registeredBy string) error {
	if !MayReplace(p, scope, registeredBy) {
		return errs.New(errs.ActionOwned, "%s %q belongs to %s", kind, id, registeredBy).
			WithHint("choose another id; only its registrar, its scope's agent or the room token may replace it")
	}
	return nil
}

// MayUndefine is MayRedefine for a deletion.
func MayUndefine(p *Principal, kind, id, scope, registeredBy string) error {
	if !MayReplace(p, scope, registeredBy) {
		return errs.New(errs.ActionOwned, "%s %q belongs to %s", kind, id, registeredBy).
			WithHint("only its registrar, its scope's agent or the room token may delete it")
	}
	return nil
}

// Embodiments: a person takes an agent through the lobby (Embody) or fills
// a role the room defines (EmbodyRole). The core reads the agent's and the
// role's rows under the room lock and asks these.

// EmbodiedBy refuses an embodiment that names no user: an embodied agent
// is always some person's.
func EmbodiedBy(userID string) error {
	if userID == "" {
		return errs.New(errs.InvalidField, "an embodiment needs a user").WithHint("embody through the lobby")
	}
	return nil
}

// MayEmbody returns nil when userID may embody agentID, given whether the
// agent exists, which user owns it (nil: made with a token), and whether
// its scope already holds state. A user resumes their own agent or makes
// a new one; they never adopt one made with a token or for another user,
// nor take an id whose scope holds someone's data.
func MayEmbody(agentID, userID string, exists bool, owner *string, scopeUsed bool) error {
	switch {
	case exists && (owner == nil || *owner != userID):
		return errs.New(errs.Forbidden, "agent %q is not yours to embody", agentID).
			WithHint("embody without an agent id to get your own, or pick one marked yours in the lobby")
	case exists:
		return nil
	case scopeUsed:
		// Taking this id would hand the newcomer an existing scope's data.
		return errs.New(errs.ScopeInUse, "scope %q already holds state, so %q cannot be a new agent", agentID, agentID).
			WithHint("embody with another agent id")
	}
	return nil
}

// RoleIDValid reports whether a role may take id: a valid agent id without
// ":" (ids with ":" are people's agents).
func RoleIDValid(id string, maxScopeBytes int) bool {
	return !strings.Contains(id, ":") && ValidName("role id", id, maxScopeBytes, false) == nil
}

// MayFillRoleID refuses an embodiment of role without a user, or of a
// role whose id could not be an agent's, or would be a person's agent's.
func MayFillRoleID(userID, role string, maxScopeBytes int) error {
	if err := EmbodiedBy(userID); err != nil {
		return err
	}
	if err := ValidName("role id", role, maxScopeBytes, false); err != nil {
		return err.(*errs.Error).With("role", role).
			WithHint("a role's id is also its agent's id: the room's roles need ids of 1–%d characters from A–Z a–z 0–9 _ . : @ -, not starting with _", maxScopeBytes)
	}
	if strings.Contains(role, ":") {
		// <username>:<client> and <username>:web are people's agents: a
		// role named after one would hand whoever fills it that person's
		// agent, with its private scope, actions and views.
		return errs.New(errs.InvalidField, "role id %q contains \":\": ids with \":\" are people's agents (<username>:<client>), never roles", role).
			With("role", role).With("reason", "person_id").
			WithHint("define the role again under an id without \":\" (help key roles), or embody without role to get your own agent")
	}
	return nil
}

// RoleToFill is role's definition in roles (the room's live
// _shared.roles, nil when it has none) and who it says fills it. A role
// missing, or filled by an agent other than the role's own, is refused.
func RoleToFill(roomID, role string, roles map[string]any) (def map[string]any, filledBy string, err error) {
	def, ok := roles[role].(map[string]any)
	if !ok {
		if roles == nil {
			return nil, "", errs.New(errs.NotFound, "room %q defines no roles", roomID).With("role", role).
				WithHint("embody without role (next), or define the role first with the define_role action (help key standard_library)").
				WithNext(errs.Step{Op: errs.OpJoin, Room: roomID})
		}
		names := make([]string, 0, len(roles))
		for n := range roles {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, "", errs.New(errs.NotFound, "room %q has no role %q", roomID, role).With("role", role).With("roles", names).
			WithHint("the room's roles are %s; embody one of them, or without role (next)", strings.Join(names, ", ")).
			WithNext(errs.Step{Op: errs.OpJoin, Room: roomID})
	}
	filledBy, _ = def["filled_by"].(string)
	if filledBy != "" && filledBy != role {
		return nil, "", errs.New(errs.Forbidden, "role %q is filled by %s", role, filledBy).With("role", role).With("reason", "role_filled").
			WithHint("pick an unfilled role from the lobby, or ask %s to vacate it", filledBy)
	}
	return def, filledBy, nil
}

// RoleOccupant is the role's agent (and scope) as the room holds them.
type RoleOccupant struct {
	// Owner is the user who drives the agent (nil: made with a token);
	// PrevName and PrevRole its name and role.
	Owner, PrevName, PrevRole *string
	// Exists: the role's agent exists. ScopeUsed: its scope holds state.
	// InUse: its driver has not stepped out (sync_disembody leaves it
	// idle) and was seen within the idle lapse, as presence shows it.
	Exists, ScopeUsed, InUse bool
}

// MayFillRole returns nil when userID may fill role, which the room's
// roles say filledBy fills ("" none, or the role's own agent), held by
// occ. It refuses a role whose agent was made with a token, is a person's
// own, or another user still drives, and a role without an agent whose
// scope already holds state.
func MayFillRole(role, userID, filledBy string, occ RoleOccupant) error {
	switch {
	case occ.Exists && occ.Owner == nil:
		return errs.New(errs.Forbidden, "role %q is held by agent %q, made with a token (an autonomous agent)", role, role).
			With("role", role).With("reason", "token_agent").
			WithHint("embody without role to get your own agent, or ask the room's owner to free the role")
	case occ.Exists && (occ.PrevRole == nil || *occ.PrevRole != role):
		// A role embodiment makes the role's agent or re-enters one
		// made for that role (its role is the role's id), never an
		// agent a person made for themself, whatever the roles say.
		return errs.New(errs.Forbidden, "agent %q is a person's own agent, not one made for role %q", role, role).
			With("role", role).With("reason", "personal_agent").
			WithHint("embody without role to get your own agent; the room's owner may rename the role")
	case occ.Exists && *occ.Owner != userID && (filledBy != "" || occ.InUse):
		// filled_by is state whoever may write _shared.roles can
		// clear (a collaborator, any action that writes it): a role
		// whose agent another user still drives is not vacant,
		// whatever it says. A driver gone without stepping out
		// lapses to idle after IdleAfter; the role can then be freed.
		return errs.New(errs.Forbidden, "role %q is filled: another user drives its agent", role).
			With("role", role).With("reason", "role_filled").
			WithHint("wait until they leave it (sync_disembody frees it), or pick an unfilled role from the lobby")
	case occ.Exists:
	case occ.ScopeUsed:
		return errs.New(errs.ScopeInUse, "scope %q already holds state but no agent, so role %q cannot make its agent", role, role).
			With("role", role).WithHint("ask the room's owner to clear scope %q or rename the role", role)
	}
	return nil
}

// TakesOver reports whether userID filling a role held by occ takes the
// agent over from another user (its token rotated, the previous occupant
// audited); MayFillRole has admitted it.
func TakesOver(userID string, occ RoleOccupant) bool {
	return occ.Exists && occ.Owner != nil && *occ.Owner != userID
}
