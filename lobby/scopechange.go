// Changing a session's scope: revoking a room, restricting the scope
// (never widening it).

package lobby

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/syncsubstrate/sync/lobby/roomdir"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// RevokeAccess removes a room from the session's scope.
func (l *Lobby) RevokeAccess(ctx context.Context, s *Session, room string) (*ScopeChange, error) {
	if s.level(room) == "" {
		return nil, errs.New(RoomNotInScope, "room %q is not in scope", room).WithHint("nothing to revoke")
	}
	if s.Scope.SharedRooms != "" {
		// Remembered, so sharing it again does not bring it back.
		if s.Scope.Revoked == nil {
			s.Scope.Revoked = map[string]bool{}
		}
		s.Scope.Revoked[room] = true
	}
	if s.Scope.AllRooms != "" {
		// Turn rooms:* into the explicit list, minus this room.
		rooms, err := l.UserRooms(ctx, s.UserID)
		if err != nil {
			return nil, err
		}
		for _, r := range rooms {
			if _, ok := s.Scope.Rooms[r.ID]; !ok {
				s.Scope.Rooms[r.ID] = s.Scope.AllRooms
			}
		}
		s.Scope.AllRooms = ""
	}
	delete(s.Scope.Rooms, room)
	if err := l.settle(ctx, s); err != nil {
		return nil, err
	}
	return &ScopeChange{Revoked: room, Scope: s.Scope.String()}, nil
}

// settle saves the session after its scope narrowed, first leaving a
// focused room the scope no longer covers (and the agent embodied there).
func (l *Lobby) settle(ctx context.Context, s *Session) error {
	if s.RoomID != "" && s.level(s.RoomID) == "" {
		if s.AgentID != "" {
			if _, err := l.Disembody(ctx, s); err != nil {
				return err
			}
		}
		s.RoomID = ""
	}
	return l.save(ctx, s)
}

// RestrictScope narrows the session's scope to scope. It never widens
// it: a scope reaching past the session's (Scope.Beyond) is refused and
// nothing changes.
func (l *Lobby) RestrictScope(ctx context.Context, s *Session, scope string) (*ScopeChange, error) {
	// A scope string with nothing recognisable in it would narrow the
	// connection to nothing: a typo must not cost the person their rooms.
	if len(strings.Fields(scope)) == 0 {
		return nil, errs.New(errs.InvalidField, "scope is empty").With("field", "scope").
			WithHint("name what to keep, e.g. rooms:<id>:read, rooms:*:observe or create_rooms")
	}
	for _, part := range strings.Fields(scope) {
		rest, isRoom := strings.CutPrefix(part, "rooms:")
		shared, isShared := strings.CutPrefix(part, "shared_rooms:")
		if part == "create_rooms" || isRoom && rest != "" && !strings.HasSuffix(rest, ":") || isShared && shared != "" {
			if err := restrictItemHeld(s, part, rest, shared, isShared); err != nil {
				return nil, err
			}
			continue
		}
		return nil, errs.New(errs.InvalidField, "scope %q is not a scope item", part).With("field", "scope").
			WithHint("items are rooms:<id>:<observe|read|write|admin>, rooms:*:<level>, shared_rooms:<level> and create_rooms, separated by spaces; your current scope is %s", s.Scope.String())
	}
	want := ParseScope(scope)
	if wider := s.Scope.Beyond(want, s.level); len(wider) > 0 {
		return nil, widening(s, want, wider)
	}
	out := s.narrowed(want)
	s.Scope = out
	if err := l.settle(ctx, s); err != nil {
		return nil, err
	}
	return &ScopeChange{Scope: out.String()}, nil
}

// widening refuses a restrict that would widen the session (Scope.Beyond):
// once, one such call answered scope "" and cost the connection its
// rooms, room creation and agent, which only a person's consent gave back.
func widening(s *Session, want Scope, wider []string) error {
	cur := s.Scope.String()
	hint := "restricting only narrows: name part of your current scope (" + cur + ")"
	if kept := s.narrowed(want).String(); kept != "" && kept != cur {
		hint += `, e.g. sync_restrict_scope {"scope": "` + kept + `"} keeps what this connection holds of what you asked`
	}
	hint += "; widening takes the person's consent: the user reconnects the integration (disconnect it in the client's settings, connect again) and ticks what it should reach on the consent screen"
	return errs.New(errs.ScopeDenied, "%s would widen this connection's scope; nothing changed", strings.Join(wider, " ")).
		With("field", "scope").With("scope", cur).With("beyond", wider).WithHint("%s", hint)
}

// narrowed is the session's scope intersected with want: what
// RestrictScope keeps when want is within it.
func (s *Session) narrowed(want Scope) Scope {
	out := Scope{Rooms: map[string]string{}, CreateRooms: s.Scope.CreateRooms && want.CreateRooms, Revoked: s.Scope.Revoked}
	if s.Scope.AllRooms != "" && want.AllRooms != "" {
		out.AllRooms = minLevel(s.Scope.AllRooms, want.AllRooms)
	}
	if s.Scope.SharedRooms != "" && want.SharedRooms != "" {
		out.SharedRooms, out.SharedSince = minLevel(s.Scope.SharedRooms, want.SharedRooms), s.Scope.SharedSince
	}
	for id, lvl := range want.Rooms {
		if have := s.level(id); have != "" {
			out.Rooms[id] = minLevel(have, lvl)
		}
	}
	if want.AllRooms != "" {
		// Each room held, explicitly or as shared since, at most at the
		// wildcard's level.
		for _, id := range slices.Concat(slices.Collect(maps.Keys(s.Scope.Rooms)), slices.Collect(maps.Keys(s.fresh))) {
			if lvl := s.level(id); lvl != "" {
				out.Rooms[id] = minLevel(lvl, maxLevel(want.Rooms[id], want.AllRooms))
			}
		}
	}
	return out
}

// restrictItemHeld refuses a well-formed restrict item that ParseScope
// would drop or that names a room this session does not hold: each would
// narrow the session, silently, to nothing for what the caller meant
// (rooms:lab:raed reads as a room named "lab:raed").
func restrictItemHeld(s *Session, part, rest, shared string, isShared bool) error {
	refuse := func(what, mean string) error {
		return errs.New(errs.InvalidField, "scope item %q %s; nothing was narrowed", part, what).With("field", "scope").
			WithHint("did you mean %s? Your current scope is %s", mean, s.Scope.String())
	}
	if isShared {
		lvl, _, _ := strings.Cut(shared, ":")
		if levelRank(lvl) < 0 {
			return refuse(fmt.Sprintf("names no level (%s)", strings.Join(SharedRoomLevels, ", ")), "shared_rooms:"+nearestOf(lvl, SharedRoomLevels, "read"))
		}
		return nil
	}
	if part == "create_rooms" {
		return nil
	}
	id := rest
	if i := strings.LastIndexByte(rest, ':'); i > 0 {
		if lvl := rest[i+1:]; levelRank(lvl) >= 0 {
			id = rest[:i]
		} else if near := nearestOf(lvl, roomdir.Levels, ""); near != "" {
			// A room id may hold ":", but not one that is a level
			// misspelt: that is what the caller meant.
			return refuse("ends in "+strconv.Quote(lvl)+", which is no level (observe, read, write, admin)", "rooms:"+rest[:i]+":"+near)
		}
	}
	if id == "*" || s.level(id) != "" {
		return nil
	}
	held := make([]string, 0, len(s.Scope.Rooms))
	for r := range s.Scope.Rooms {
		if s.level(r) != "" {
			held = append(held, r)
		}
	}
	slices.Sort(held)
	mean := "one of the rooms you hold (sync_lobby lists them)"
	if near := nearestOf(id, held, ""); near != "" {
		mean = strings.Replace(part, id, near, 1)
	}
	return refuse("names a room this connection does not hold", mean)
}

// nearestOf is the item of set closest to asked if close enough to be a
// slip (substrate.EditDistance, at most 2; the first of equals), else
// fallback.
func nearestOf(asked string, set []string, fallback string) string {
	best, bestD := fallback, 3
	for _, c := range set {
		if d := substrate.EditDistance(strings.ToLower(asked), c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}
