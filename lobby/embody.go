// Acting in a room: embodying the user's own agent or a role, stepping
// out, and the rooms a session creates.

package lobby

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/roomview"
)

var slugRE = regexp.MustCompile(`[^a-z0-9-]+`)

func clientSlug(name string) string {
	s := strings.Trim(slugRE.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if s == "" {
		s = "client"
	}
	if len(s) > 32 {
		s = s[:32]
	}
	return s
}

// Embody makes the session act as an agent in room: a new agent
// <username>:<client>, an existing agent of this user, or the agent filling
// a role defined in _shared.roles.
//
// A role's agent is named for the role (seed 003 §XI: "the role IS the
// identity"): whoever fills role "researcher" embodies agent
// "researcher", made on first use, and the next user to fill the role
// after it is vacated (sync_disembody) takes over that same agent with its
// scope and history; the substrate's EmbodyRole records the previous
// occupant in the room's _audit log. Naming a role's agent with agent
// (without role) fills the role too, so an agent that is a role is never
// driven without holding it.
func (l *Lobby) Embody(ctx context.Context, s *Session, room, agent, role string) (*Embodiment, error) {
	level, userRole, err := l.Access(ctx, s, room)
	if err != nil {
		return nil, err
	}
	if levelRank(level) < levelRank("write") {
		return nil, s.cannotAct(room, level, userRole)
	}
	if role == "" && agent != "" {
		if role, err = l.roleNamed(ctx, room, agent); err != nil {
			return nil, err
		}
	}
	if role != "" {
		return l.embodyRole(ctx, s, room, agent, role, grantsFor(userRole, level))
	}
	// Embodying creates an agent for this user or switches to one this
	// user already owns; it never adopts an agent created with a token or
	// by another user, whatever its id.
	id, err := l.agentToEmbody(ctx, s, room, agent)
	if err != nil {
		return nil, err
	}
	// The substrate checks ownership again under the room lock: an agent
	// made meanwhile by a token or another user is refused, not adopted.
	// Seed 003 §XI: a user's own agent has the role mcp-client and the
	// grants of the user's access level.
	if _, err := l.svc.Embody(ctx, substrate.EmbodyRequest{Room: room, Agent: id, Name: s.Username, Role: "mcp-client", User: s.UserID, Client: s.ClientName,
		Grants: grantsFor(userRole, level)}); err != nil {
		return nil, err
	}
	// Only once the new embodiment holds does the session let go of the
	// old one: a refused embodiment leaves the session as it was.
	if err := l.leaveFor(ctx, s, room, id); err != nil {
		return nil, err
	}
	s.RoomID, s.AgentID = room, id
	if err := l.save(ctx, s); err != nil {
		return nil, err
	}
	return &Embodiment{Embodied: true, Room: room, Agent: id, Role: "mcp-client",
		Next: "read the room with sync_read_context, then act with sync_invoke_action"}, nil
}

// cannotAct says which of the two ceilings is too low to act in room: the
// user's role, or what this connection was granted.
func (s *Session) cannotAct(room, level, userRole string) error {
	if levelRank(roleCap(userRole)) < levelRank("write") {
		return errs.New(errs.Forbidden, "your role in %q is %s, which can read but not act: observers cannot embody", room, userRole).
			With("room", room).With("reason", "role_below").With("role", userRole).With("access", level).
			WithHint("keep observing with sync_read_context, or ask an owner of %q to make you a participant (they share it with you again with role participant)", room)
	}
	hint := "keep observing with sync_read_context, or the user reconnects the integration and gives " + room + " the write level on the consent screen"
	if s.fresh[room] && s.Scope.Level(room) == "" {
		hint = "keep observing with sync_read_context, or the user reconnects the integration and allows \"new rooms shared with me\" at write (or ticks " + room + " at write)"
	}
	return errs.New(errs.Forbidden, "this connection's access to %q is %s: acting needs write", room, level).
		With("room", room).With("reason", "level_below").With("role", userRole).With("access", level).WithHint("%s", hint)
}

// roleNamed is agent when it names one of room's roles, else "".
func (l *Lobby) roleNamed(ctx context.Context, room, agent string) (string, error) {
	sums, err := roomview.SummariesViewing(ctx, l.svc, []string{room}, func(string) bool { return false }) // its roles only
	if err != nil {
		return "", err
	}
	// An id with ":" is a person's agent, never a role's, whatever
	// _shared.roles says: it is embodied as an agent (yours or not).
	if sum := sums[room]; sum != nil && sum.Roles[agent] != nil && !strings.Contains(agent, ":") {
		return agent, nil
	}
	return "", nil
}

// agentToEmbody is the agent the session embodies in room: agent when it
// is the user's, else (agent "") the user's own agent for this client.
func (l *Lobby) agentToEmbody(ctx context.Context, s *Session, room, agent string) (string, error) {
	if agent != "" {
		owner, exists, err := l.svc.AgentOwner(ctx, room, agent)
		if err != nil {
			return "", err
		}
		if !exists || owner != s.UserID {
			return "", errs.New(errs.Forbidden, "agent %q is not yours to embody", agent).
				WithHint("embody without agent to get your own, or pick one marked yours in sync_lobby")
		}
		return agent, nil
	}
	return l.ownAgentID(ctx, room, s.Username+":"+clientSlug(s.ClientName), s.UserID)
}

// ownAgentID is the id of the user's own agent in room: base
// (<username>:<client>), or when someone else's agent already has it, the
// next free <base>-2, -3…
func (l *Lobby) ownAgentID(ctx context.Context, room, base, userID string) (string, error) {
	for n := 1; n <= 9; n++ {
		id := base
		if n > 1 {
			id = fmt.Sprintf("%s-%d", base, n)
		}
		owner, exists, err := l.svc.AgentOwner(ctx, room, id)
		if err != nil {
			return "", err
		}
		if !exists || owner == userID {
			return id, nil
		}
	}
	return "", errs.New(errs.Forbidden, "agent ids %s…%s-9 are all taken by agents that are not yours", base, base).
		WithHint("embody one of your own agents (sync_lobby marks them yours)")
}

// PersonActor is the authority a signed-in person acts with in a room from
// its web pages: their own agent there, <username>:web, made on first use
// with the role mcp-client and the grants of their access (seed 003 §XI,
// as an MCP embodiment gets them; owners hold the room's authority).
// Observers cannot act. Like PersonPrincipal, a room the person has no
// access to is room_not_found.
func (l *Lobby) PersonActor(ctx context.Context, userID, username, room string) (*substrate.Principal, error) {
	access, err := l.access(ctx, userID, room)
	if err != nil {
		return nil, err
	}
	level := roleCap(access)
	if levelRank(level) < levelRank("write") {
		return nil, errs.New(errs.Forbidden, "your role in %q is %s, which can read but not act", room, access).
			With("room", room).With("role", access).WithHint("ask an owner of %q to make you a participant", room)
	}
	id, err := l.ownAgentID(ctx, room, username+":web", userID)
	if err != nil {
		return nil, err
	}
	grants := grantsFor(access, level)
	p, err := l.svc.EmbodiedPrincipal(ctx, room, id, userID)
	if err != nil || !slices.Equal(p.Grants, grants) {
		// First use, or the person's access changed since: (re)embody,
		// which the room's audit records. The substrate checks ownership
		// again under the room lock.
		if _, err := l.svc.Embody(ctx, substrate.EmbodyRequest{Room: room, Agent: id, Name: username, Role: "mcp-client", User: userID, Client: "web",
			Grants: grants}); err != nil {
			return nil, err
		}
		if p, err = l.svc.EmbodiedPrincipal(ctx, room, id, userID); err != nil {
			return nil, err
		}
	}
	p.Ceiling = grantCeiling(access, level)
	p.Grants = slices.DeleteFunc(slices.Clone(p.Grants), func(g string) bool { return !p.Ceiling(g) })
	p.Person = true
	return p, nil
}

// leaveFor steps out of the session's current agent before it embodies
// agent in room (unless that is the same one).
func (l *Lobby) leaveFor(ctx context.Context, s *Session, room, agent string) error {
	if s.AgentID != "" && (s.RoomID != room || s.AgentID != agent) {
		if _, err := l.Disembody(ctx, s); err != nil && !errs.Is(err, NotEmbodied) {
			return err
		}
	}
	return nil
}

// embodyRole fills role in room: the session embodies the agent named for
// the role (made, resumed, or taken over when vacated; see
// substrate.EmbodyRole).
func (l *Lobby) embodyRole(ctx context.Context, s *Session, room, agent, role string, grants []string) (*Embodiment, error) {
	if agent != "" && agent != role {
		return nil, errs.New(errs.InvalidField, "a role's agent is named for the role: role %q is agent %q, not %q", role, role, agent).
			With("role", role).With("agent", agent).
			WithHint(`call sync_embody {"room": %q, "role": %q} without agent`, room, role)
	}
	res, err := l.svc.EmbodyRole(ctx, substrate.EmbodyRoleRequest{Room: room, Role: role, Name: s.Username, User: s.UserID, Client: s.ClientName, Grants: grants})
	if err != nil {
		return nil, err // the session keeps its embodiment
	}
	if err := l.leaveFor(ctx, s, room, res.ID); err != nil {
		return nil, err
	}
	s.RoomID, s.AgentID = room, res.ID
	if err := l.save(ctx, s); err != nil {
		return nil, err
	}
	next := "read the room with sync_read_context, then act with sync_invoke_action"
	if !res.Created {
		next = "read the room with sync_read_context: the role's agent keeps its state, actions and views from before; then act with sync_invoke_action"
	}
	return &Embodiment{Embodied: true, Room: room, Agent: res.ID, Role: role, TakenOver: res.TakenOver, Bootstrap: res.Bootstrap, Next: next}, nil
}

// Disembody returns the session to observing: the agent goes idle, keeps
// its state, actions and views, and leaves any role it filled.
func (l *Lobby) Disembody(ctx context.Context, s *Session) (*Embodiment, error) {
	if s.AgentID == "" {
		return nil, errs.New(NotEmbodied, "you are not embodied").WithHint("nothing to do; sync_embody to act")
	}
	room, agent := s.RoomID, s.AgentID
	// An agent another user has taken over since (a vacated role filled
	// again) is theirs now: the session only lets go of it.
	if owner, _, err := l.svc.AgentOwner(ctx, room, agent); err != nil {
		return nil, err
	} else if owner != s.UserID {
		s.AgentID = ""
		if err := l.save(ctx, s); err != nil {
			return nil, err
		}
		return &Embodiment{Embodied: false, Room: room, Agent: agent, Status: "taken_over"}, nil
	}
	if err := l.svc.SetIdle(ctx, room, agent); err != nil {
		return nil, err
	}
	admin := substrate.RoomPrincipal(room)
	if read, err := l.svc.ReadState(ctx, admin, room, substrate.ReadQuery{Scope: substrate.ScopeShared, Key: "roles"}); err == nil {
		var roles map[string]map[string]any
		if json.Unmarshal(read.Entries[0].Value, &roles) == nil {
			changed := false
			for _, r := range roles {
				if r["filled_by"] == agent {
					r["filled_by"] = nil
					changed = true
				}
			}
			if changed {
				v := read.Entries[0].Version
				raw, _ := json.Marshal(roles)
				_, _ = l.svc.WriteState(ctx, admin, room, []substrate.Write{{Scope: substrate.ScopeShared, Key: "roles", Value: raw, IfVersion: &v}}, false)
			}
		}
	}
	s.AgentID = ""
	if err := l.save(ctx, s); err != nil {
		return nil, err
	}
	return &Embodiment{Embodied: false, Room: room, Agent: agent, Status: "idle",
		Next: "you observe " + room + " now (it stays focused: calls without room read it); sync_embody {\"room\": \"" + room + "\"} acts again"}, nil
}

// CreateRoomFor creates a room owned by the session's user and widens the
// session's scope to it.
//
// The session then focuses the new room as an observer. A session embodied
// elsewhere first steps out of its agent exactly as Disembody does (the
// agent goes idle, keeps its state and frees its role): an embodiment is
// an agent in one room, and keeping the old agent while focusing a room it
// is not in would make the next call fail with "agent … is not in room".
// Acting in the new room is one explicit sync_embody away, which keeps
// presence a deliberate act (seed 003 §VII).
func (l *Lobby) CreateRoomFor(ctx context.Context, s *Session, id, label string) (*CreatedRoom, error) {
	if !s.Scope.CreateRooms {
		return nil, errs.New(errs.ScopeDenied, "this connection may not create rooms").
			WithHint("the user reconnects the integration and ticks \"may create new rooms\" on the consent screen")
	}
	room, err := l.CreateRoom(ctx, s.UserID, id, label)
	if err != nil {
		return nil, err
	}
	out := &CreatedRoom{Created: true, Room: room, Access: "admin", Next: `sync_embody {"room": "` + room + `"} to act in it`}
	if s.AgentID != "" {
		left, err := l.Disembody(ctx, s)
		if err != nil {
			return nil, err
		}
		out.Left = &Embodied{Room: left.Room, Agent: left.Agent}
	}
	s.Scope.Rooms[room] = "admin"
	s.RoomID = room
	if err := l.save(ctx, s); err != nil {
		return nil, err
	}
	return out, nil
}
