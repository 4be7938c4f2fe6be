// Package roomdir holds what the authorization server needs to know of a
// user's rooms: the rooms as listed (Room, Agent) and the role → access
// level table the consent screen offers. It is a leaf (standard library
// only), so oauth reaches rooms through its RoomDirectory interface
// without importing the lobby, and with it the substrate and cel-go.
// The lobby uses these same types and rules; they are decided here once.
package roomdir

import (
	"slices"
	"time"
)

// Room is a room as listed for a user: on the consent screen, the account
// page and the lobby.
type Room struct {
	ID     string
	Label  string
	Access string // owner, collaborator, participant or observer
	Agents []Agent
	Roles  []string // ids of the roles defined in _shared.roles
	// Default marks the user's default room (smcp_user_rooms.is_default),
	// which sync_lobby focuses when the session has no room in focus.
	Default bool
	// OpenRoles are the roles nobody fills; LastActive is when the room
	// last changed, relative ("3m ago").
	OpenRoles  []string
	LastActive string
}

// Agent is an agent's presence, as shown next to a room: Status is
// "idle" once it has lapsed (see roomview.Presence), LastSeen relative
// ("3m ago"), Client the MCP client it was last embodied through.
type Agent struct {
	ID, Name, Status string
	LastHeartbeat    time.Time
	LastSeen, Client string
	IdleForS         *int64
	// WaitingOn is the condition a waiting agent waits on.
	WaitingOn string
}

// Levels are the access levels a session may hold on a room, weakest
// first.
var Levels = []string{"observe", "read", "write", "admin"}

// LevelRank is l's place in Levels (-1 for none).
func LevelRank(l string) int { return slices.Index(Levels, l) }

// RoleCap is the highest level a user's role in a room allows.
func RoleCap(access string) string {
	switch access {
	case "owner":
		return "admin"
	case "collaborator", "participant":
		return "write"
	}
	return "read"
}

// RoleLevels are the levels a user's role in a room allows, weakest first:
// what the consent screen offers for that room.
func RoleLevels(access string) []string {
	return slices.Clone(Levels[:LevelRank(RoleCap(access))+1])
}

// SharedRoomLevels are the levels the consent screen offers for "new
// rooms shared with me", "none" (the default) first: never admin, which
// only a room's owner may grant, room by room.
var SharedRoomLevels = []string{"none", "observe", "read", "write"}
