// The lobby view (sync_lobby): the rooms in scope, their agents and roles,
// and the next step.

package lobby

import (
	"context"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/roomview"
)

// View is the lobby: the rooms in scope with access, agents and roles,
// whether rooms can be created, and what the session is embodied as.
func (l *Lobby) View(ctx context.Context, s *Session) (*View, error) {
	return l.view(ctx, s, true)
}

// view is View, the rooms' summary views evaluated when summaries is
// set (only for the rooms in the session's scope, which it shows).
func (l *Lobby) view(ctx context.Context, s *Session, summaries bool) (*View, error) {
	shown := func(room string) bool { return summaries && s.level(room) != "" }
	rooms, sums, err := l.userRooms(ctx, s.UserID, shown)
	if err != nil {
		return nil, err
	}
	out := &View{User: s.Username, CanCreateRooms: s.Scope.CreateRooms}
	defaultRoom := "" // the user's default room, when in scope
	for _, r := range rooms {
		level := s.level(r.ID)
		if level == "" {
			continue
		}
		if r.Default && defaultRoom == "" {
			defaultRoom = r.ID
		}
		out.Rooms = append(out.Rooms, l.viewRoom(ctx, s, r, level, sums[r.ID]))
	}
	if s.AgentID != "" {
		out.Embodied = &Embodied{Room: s.RoomID, Agent: s.AgentID}
	} else if defaultRoom != "" && (s.RoomID == "" || s.level(s.RoomID) == "") {
		// Nothing (usable) in focus: the default room is, so a call
		// without a room reads it.
		s.RoomID = defaultRoom
		if err := l.save(ctx, s); err != nil {
			return nil, err
		}
	}
	out.Focus = s.RoomID
	out.Next = viewNext(s, len(out.Rooms))
	return out, nil
}

// viewRoom is room r as the session sees it at level: its summary, agents
// and roles.
func (l *Lobby) viewRoom(ctx context.Context, s *Session, r Room, level string, sum *roomview.Summary) ViewRoom {
	access := minLevel(level, roleCap(r.Access))
	entry := ViewRoom{Room: r.ID, Label: r.Label, Role: r.Access, Access: access, Default: r.Default,
		SharedSince: s.Scope.Level(r.ID) == "", Summary: summarise(sum, access, l.summaryReader(ctx, s, r.ID, sum))}
	for _, ag := range sum.Agents {
		if ag.Gated && access != "admin" {
			// Its enabled expression decides who sees it, per reader,
			// in the room; the lobby does not evaluate it.
			continue
		}
		a := ViewAgent{ID: ag.ID, Name: ag.Name, Role: ag.Role, Status: ag.Status, LastHeartbeat: ag.LastHeartbeat,
			LastSeen: ag.LastSeen, IdleForS: ag.IdleForS, Client: ag.Client,
			WaitingOn: ag.WaitingOn, Yours: ag.Owner != "" && ag.Owner == s.UserID}
		for _, id := range sum.RoleIDs() {
			if sum.Roles[id]["filled_by"] == ag.ID {
				a.Fills = id
			}
		}
		if a.Yours {
			current := s.RoomID == r.ID && s.AgentID == ag.ID
			switchable := !current && levelRank(access) >= levelRank("write")
			a.Current, a.Switchable = &current, &switchable
		}
		entry.Agents = append(entry.Agents, a)
	}
	for _, id := range sum.RoleIDs() {
		entry.Roles = append(entry.Roles, ViewRole{ID: id, Description: sum.Roles[id]["description"], FilledBy: sum.Roles[id]["filled_by"]})
	}
	return entry
}

// viewNext is the lobby view's next step for a session that sees rooms
// rooms.
func viewNext(s *Session, rooms int) string {
	switch {
	case rooms == 0 && s.Scope.CreateRooms:
		return "no rooms yet: create one with sync_create_room"
	case rooms == 0:
		return "no rooms in scope: the user reconnects and ticks rooms on the consent screen"
	case s.AgentID == "":
		return "observe with sync_read_context {room}, or act: sync_embody {room}"
	default:
		// Reading the lobby leaves nothing: say so, since a model may
		// expect it to (seed 003's lobby is where one goes between rooms).
		return "you are still acting as " + s.AgentID + " in " + s.RoomID + " (the lobby changes nothing): read with sync_read_context, act with sync_invoke_action; sync_disembody stops acting, sync_embody {room} moves you to another room"
	}
}

// summarise is a room's state summary as a session at access sees it:
// scope key counts for the scopes it reads observing (communal ones below
// admin, and of those only what the read rule lets it read: reads), open
// roles, last activity.
func summarise(sum *roomview.Summary, access string, reads func(scope string) bool) StateSummary {
	out := StateSummary{Keys: map[string]int{}, Messages: sum.Messages, Seq: sum.Seq,
		LastActivity: sum.LastActivity, LastActive: roomview.Ago(time.Since(sum.LastActivity)), OpenRoles: []string{}, Values: sum.Values, Summary: sum.View, SummaryBusy: sum.Busy}
	for scope, n := range sum.Keys {
		if (access == "admin" || (strings.HasPrefix(scope, "_") && scope != substrate.ScopeAudit)) && reads(scope) {
			out.Keys[scope] = n
		}
	}
	for _, id := range sum.RoleIDs() {
		if sum.Roles[id]["filled_by"] == nil {
			out.OpenRoles = append(out.OpenRoles, id)
		}
	}
	return out
}
