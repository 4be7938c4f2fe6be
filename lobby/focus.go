package lobby

import "context"

// Focus makes room the session's default room for the calls that take one
// (the room it observed last), unless it is embodied: an agent's room
// stays the default while it acts. The caller has checked the session may
// use the room.
func (l *Lobby) Focus(ctx context.Context, s *Session, room string) error {
	if s.AgentID != "" || room == "" || room == s.RoomID {
		return nil
	}
	s.RoomID = room
	return l.save(ctx, s)
}
