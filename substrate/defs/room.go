package defs

import (
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"
)

// What a room and an agent are as clients see them and ask for them: the
// rooms' and agents' requests and records of the surfaces and the lobby,
// with no token but those shown once, and what an agent's update records
// in the audit log. The core reads and writes them (rooms.go,
// lobbyops.go); who may is substrate/authority's.

// Room is a room as clients see it. Tokens are never part of it.
type Room struct {
	ID        string          `json:"id"`
	CreatedAt time.Time       `json:"created_at"`
	Meta      json.RawMessage `json:"meta"`
	OpenJoin  bool            `json:"open_join"`
	Seq       int64           `json:"seq"`
}

// CreateRoomRequest is the body of POST /rooms.
type CreateRoomRequest struct {
	// ID is the room id; a random one when empty.
	ID string `json:"id,omitempty"`
	// Meta is a free JSON object (label, description, …).
	Meta json.RawMessage `json:"meta,omitempty"`
	// OpenJoin lets anyone join with a new agent id, no token needed.
	// Default false: joining needs the room token.
	OpenJoin bool `json:"open_join,omitempty"`
}

// CreatedRoom is a new room with its tokens, shown this once.
type CreatedRoom struct {
	Room
	Token     string `json:"token"`
	ViewToken string `json:"view_token"`
}

// RotatedToken is a room's new room or view token, shown this once.
type RotatedToken struct {
	Room  string `json:"room"`
	Which string `json:"which"` // room or view
	Token string `json:"token"`
	// TokenAgentsWithRoomAuthority (rotating the room token) are the
	// agents joined with a token that hold "*": the rotation leaves their
	// tokens working, and whoever held a leaked room token could have made
	// them. Review them (GET /agents, the _audit log's agent_join), then
	// narrow their grants or re-join them to rotate their tokens.
	TokenAgentsWithRoomAuthority []string `json:"token_agents_with_room_authority,omitempty"`
}

// Agent is an agent's public presence (seed 001: presence is public
// metadata, not private state).
type Agent struct {
	ID            string          `json:"id"`
	Name          string          `json:"name"`
	Role          string          `json:"role"`
	Status        string          `json:"status"`
	WaitingOn     *string         `json:"waiting_on"`
	LastHeartbeat time.Time       `json:"last_heartbeat"`
	JoinedAt      time.Time       `json:"joined_at"`
	Grants        []string        `json:"grants"`
	Meta          json.RawMessage `json:"meta"`
	// Enabled is the agent's enabled expression, when it has one: while
	// it is false for a reader, that reader does not see the agent in its
	// context, CEL `agents` or GET /agents (seed 001: enabled is universal).
	Enabled string `json:"enabled,omitempty"`
	// Account is the username of the person whose account drives the
	// agent (an MCP embodiment, a role they fill, their web agent); absent
	// for agents joined with a token, whatever their id or name says. An
	// account agent's name is its driver's username and cannot be changed.
	Account string `json:"account,omitempty"`
}

// JoinedAgent is an agent with its token, shown this once.
type JoinedAgent struct {
	Agent
	Token string `json:"token"`
	// Created is false when an existing agent re-joined (token rotated).
	Created bool `json:"created"`
}

// JoinRequest is the body of POST /rooms/:id/agents.
type JoinRequest struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Role string          `json:"role,omitempty"`
	Meta json.RawMessage `json:"meta,omitempty"`
	// Enabled gates the agent's presence (see Agent.Enabled). Setting it
	// needs room authority: an agent may not hide itself from the room.
	Enabled string `json:"enabled,omitempty"`
}

// AgentUpdate is the body of PATCH /rooms/:id/agents/:agent. Absent fields
// are left as they are.
type AgentUpdate struct {
	Name   *string         `json:"name,omitempty"`
	Role   *string         `json:"role,omitempty"`
	Grants *[]string       `json:"grants,omitempty"`
	Meta   json.RawMessage `json:"meta,omitempty"`
	// Enabled sets the agent's enabled expression ("" removes it).
	Enabled *string `json:"enabled,omitempty"`
}

// AgentChange is the audit record of what an update changed.
func AgentChange(u *AgentUpdate, grants []string, meta []byte) map[string]any {
	change := map[string]any{}
	if u.Name != nil {
		change["name"] = *u.Name
	}
	if u.Role != nil {
		change["role"] = *u.Role
	}
	if u.Grants != nil {
		change["grants"] = grants
	}
	if meta != nil {
		change["meta"] = json.RawMessage(meta)
	}
	if u.Enabled != nil {
		change["enabled"] = *u.Enabled
	}
	return change
}

// Presence is an agent's presence as stored (substrate/roomview lapses
// it to idle, as the lobby shows it).
type Presence struct {
	ID            string    `json:"id"`
	Name          string    `json:"name"`
	Role          string    `json:"role"`
	Status        string    `json:"status"`
	WaitingOn     *string   `json:"waiting_on"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	// Client is the MCP client the agent was last embodied through; ""
	// for agents created with a token.
	Client string `json:"client,omitempty"`
	// Owner is the user an agent was made for by embodiment; "" for
	// agents created with a token.
	Owner string `json:"-"`
	// Gated is true for an agent with an enabled expression, which the
	// lobby shows only to those who read the whole room (it does not
	// evaluate it per user).
	Gated bool `json:"-"`
	// Unseen is how long the agent has not been seen, as Presences read
	// it.
	Unseen time.Duration `json:"-"`
}

// EmbodyRequest is an embodiment of an agent for a user.
type EmbodyRequest struct {
	Room, Agent, Name, Role string
	// Client is the name of the MCP client embodying (shown in the lobby).
	Client string
	// User is the user the agent is made for, or must already belong to.
	User string
	// Grants replace the agent's grants: what the user's access level
	// gives (the lobby decides; seed 003 §XI).
	Grants []string
}

// EmbodyRoleRequest is a user filling a role defined in _shared.roles.
type EmbodyRoleRequest struct {
	Room, Role string
	// Name is the user's name (the agent's name while they drive it),
	// User their id, Client the MCP client's name.
	Name, User, Client string
	// Grants replace the agent's grants, as in EmbodyRequest.
	Grants []string
}

// RoleEmbodiment is the result of EmbodyRole.
type RoleEmbodiment struct {
	Presence
	// Created is true when the role's agent was made now.
	Created bool `json:"created"`
	// TakenOver is true when the agent was last driven by another user,
	// who had vacated the role; the takeover is in the room's _audit log
	// (kind agent_embody, previous_user).
	TakenOver bool `json:"taken_over,omitempty"`
	// Bootstrap is what the role's first fill registered from its
	// bootstrap_actions and bootstrap_views (see bootstrapRole).
	Bootstrap []BootstrapResult `json:"bootstrap,omitempty"`
}

// StoredGrants is grants as stored (never NULL).
func StoredGrants(g []string) []string {
	if g == nil {
		return []string{}
	}
	return g
}

// AboutLen caps the description a read shows: a room's meta may hold
// 16 KiB, a read's budget is shared with the room itself.
const AboutLen = 600

// About is a room meta's label and description, as a context read shows
// them (the description cut to AboutLen); ok is false without a
// description (a label alone is in the lobby already).
func About(meta []byte) (label, desc string, ok bool) {
	var m struct {
		Label       any `json:"label"`
		Description any `json:"description"`
	}
	if json.Unmarshal(meta, &m) != nil {
		return "", "", false
	}
	desc, _ = m.Description.(string)
	if desc = strings.TrimSpace(desc); desc == "" {
		return "", "", false
	}
	if len(desc) > AboutLen {
		cut := AboutLen
		for cut > 0 && !utf8.RuneStart(desc[cut]) {
			cut--
		}
		desc = desc[:cut] + "…"
	}
	label, _ = m.Label.(string)
	return label, desc, true
}
