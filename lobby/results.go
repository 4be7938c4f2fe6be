package lobby

import (
	"time"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/roomview"
)

// Typed results of the lobby's operations (the MCP layer encodes them as
// they are, and can derive output schemas from them).

// View is the lobby as a session sees it.
type View struct {
	User           string     `json:"user"`
	Rooms          []ViewRoom `json:"rooms"`
	CanCreateRooms bool       `json:"can_create_rooms"`
	// Embodied is the agent the session acts as, nil while observing.
	Embodied *Embodied `json:"embodied"`
	// Focus is the room calls without a room use: the one observed or
	// acted in last, else the user's default room.
	Focus string `json:"focus,omitempty"`
	Next  string `json:"next"`
}

// Embodied names the agent a session acts as.
type Embodied struct {
	Room  string `json:"room"`
	Agent string `json:"agent"`
}

// ViewRoom is one room in the lobby.
type ViewRoom struct {
	Room  string `json:"room"`
	Label string `json:"label"`
	// Role is the user's role in the room; Access the session's
	// effective level there (the lesser of its scope and the role).
	Role   string `json:"role"`
	Access string `json:"access"`
	// SharedSince marks a room shared with the user after this connection
	// was made, reached through the consent's "new rooms shared with me".
	SharedSince bool `json:"shared_since_connect,omitempty"`
	// Default marks the user's default room (set on the account page; a
	// user's first room to begin with).
	Default bool         `json:"default,omitempty"`
	Agents  []ViewAgent  `json:"agents"`
	Roles   []ViewRole   `json:"roles,omitempty"`
	Summary StateSummary `json:"state_summary"`
}

// ViewAgent is an agent's presence in the lobby.
type ViewAgent struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Role string `json:"role"`
	// Status is "idle" for an agent unseen for the substrate's IdleAfter
	// (default 5 minutes), with IdleForS its unseen seconds.
	Status        string    `json:"status"`
	IdleForS      *int64    `json:"idle_for_s,omitempty"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	// LastSeen is the last heartbeat relative to now ("3m ago").
	LastSeen string `json:"last_seen"`
	// Client is the MCP client the agent was last embodied through
	// (absent for agents made with a token).
	Client string `json:"client,omitempty"`
	// Fills is the role (of _shared.roles) the agent fills.
	Fills     string  `json:"fills,omitempty"`
	WaitingOn *string `json:"waiting_on"`
	// Yours marks the user's own agents; for those, Current says whether
	// the session acts as it and Switchable whether it may.
	Yours      bool  `json:"yours"`
	Current    *bool `json:"current,omitempty"`
	Switchable *bool `json:"switchable,omitempty"`
}

// ViewRole is a role defined in _shared.roles.
type ViewRole struct {
	ID          string `json:"id"`
	Description any    `json:"description"`
	FilledBy    any    `json:"filled_by"`
}

// StateSummary summarises a room's state (seed 003's state_summary) without
// its values: how many keys each scope the session reads holds, how many
// messages, when it last changed, and which roles wait for someone.
type StateSummary struct {
	// Keys counts the mutable keys of each scope the session reads when
	// observing (every scope at the admin level, else the communal ones);
	// entries gated by an enabled expression are not counted.
	Keys     map[string]int `json:"keys"`
	Messages int64          `json:"messages"`
	Seq      int64          `json:"seq"`
	// LastActivity is the room's last change (its creation, if none);
	// LastActive says it relative to now ("3m ago").
	LastActivity time.Time `json:"last_activity"`
	LastActive   string    `json:"last_active"`
	// OpenRoles are the defined roles nobody fills.
	OpenRoles []string `json:"open_roles"`
	// Values are a few of _shared's scalar entries, newest first (what a
	// person would choose the room by).
	Values map[string]any `json:"values,omitempty"`
	// Summary is the value of the room's view named summary, which then
	// stands for Values.
	Summary any `json:"summary,omitempty"`
	// SummaryBusy is set instead of Summary when the room's summary view
	// was not evaluated: the room has spent its expression budget.
	SummaryBusy *roomview.Busy `json:"summary_busy,omitempty"`
}

// Embodiment is the result of embodying or disembodying.
type Embodiment struct {
	Embodied bool   `json:"embodied"`
	Room     string `json:"room"`
	Agent    string `json:"agent"`
	Role     string `json:"role,omitempty"`
	// TakenOver is true when embodying a vacated role took over the agent
	// another user drove before (its state and history come with it).
	TakenOver bool `json:"taken_over,omitempty"`
	// Bootstrap is what filling the role first registered, as the role's
	// agent, from its bootstrap_actions and bootstrap_views (the MCP layer
	// shows it with the embodiment only).
	Bootstrap []substrate.BootstrapResult `json:"-"`
	Status    string                      `json:"status,omitempty"`
	Next      string                      `json:"next,omitempty"`
}

// CreatedRoom is the result of creating a room in a session.
type CreatedRoom struct {
	Created bool   `json:"created"`
	Room    string `json:"room"`
	Access  string `json:"access"`
	// Left is the agent the session stepped out of (now idle) to focus
	// the new room as an observer; nil when it was not embodied.
	Left *Embodied `json:"left,omitempty"`
	Next string    `json:"next"`
}

// ScopeChange is a session's scope after narrowing it.
type ScopeChange struct {
	Revoked string `json:"revoked,omitempty"`
	Scope   string `json:"scope"`
}
