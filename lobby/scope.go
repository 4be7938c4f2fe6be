package lobby

import (
	"slices"
	"strconv"
	"strings"

	"github.com/syncsubstrate/sync/lobby/roomdir"
)

// The levels and the role → level table are roomdir's (shared with the
// authorization server's consent screen).
func levelRank(l string) int { return roomdir.LevelRank(l) }

// RoleLevels are the levels a user's role in a room allows, weakest first:
// what the consent screen offers for that room.
func RoleLevels(access string) []string { return roomdir.RoleLevels(access) }

// roleCap is the highest level a user's role in a room allows.
func roleCap(access string) string { return roomdir.RoleCap(access) }

// SharedRoomLevels are the levels the consent screen offers for "new
// rooms shared with me" (roomdir.SharedRoomLevels).
var SharedRoomLevels = roomdir.SharedRoomLevels

// Scope is a parsed scope string: rooms:<id>[:level], rooms:*[:level],
// create_rooms, shared_rooms:<level> (ARCHITECTURE §5). A room with no
// level means admin.
type Scope struct {
	Rooms       map[string]string // room id → level
	AllRooms    string            // level for rooms:*, "" if absent
	CreateRooms bool
	// SharedRooms is the level the consent screen allowed for rooms shared
	// with the user (or whose role in them changed) after the session
	// began: shared_rooms:<observe|read|write>; "" = none. Such a room
	// joins the session at the lesser of this level and the user's role.
	SharedRooms string
	// SharedSince is when the consent was given (Unix milliseconds,
	// shared_rooms:<level>:<ms>): rooms shared after it are new. 0 = not
	// stamped: the session's start stands in.
	SharedSince int64
	// Revoked are rooms the session dropped with sync_revoke_access while
	// shared rooms could widen it (revoked:<id>): sharing them again does
	// not bring them back; only reconnecting does.
	Revoked map[string]bool
}

// ParseScope reads a space-separated scope string; unknown parts are
// ignored (clients may ask for anything; the consent screen decides).
func ParseScope(s string) Scope {
	sc := Scope{Rooms: map[string]string{}}
	for _, part := range strings.Fields(s) {
		if part == "create_rooms" {
			sc.CreateRooms = true
			continue
		}
		if lvl, ok := strings.CutPrefix(part, "shared_rooms:"); ok {
			lvl, stamp, _ := strings.Cut(lvl, ":")
			if levelRank(lvl) >= 0 {
				// Consent offers up to write; a larger ask is capped.
				sc.SharedRooms = minLevel(maxLevel(sc.SharedRooms, lvl), "write")
				if ms, err := strconv.ParseInt(stamp, 10, 64); err == nil && ms > 0 {
					sc.SharedSince = ms
				}
			}
			continue
		}
		if id, ok := strings.CutPrefix(part, "revoked:"); ok {
			if id != "" {
				if sc.Revoked == nil {
					sc.Revoked = map[string]bool{}
				}
				sc.Revoked[id] = true
			}
			continue
		}
		rest, ok := strings.CutPrefix(part, "rooms:")
		if !ok || rest == "" {
			continue
		}
		id, level := rest, "admin"
		if i := strings.LastIndexByte(rest, ':'); i > 0 && levelRank(rest[i+1:]) >= 0 {
			id, level = rest[:i], rest[i+1:]
		}
		if id == "*" {
			sc.AllRooms = maxLevel(sc.AllRooms, level)
		} else {
			sc.Rooms[id] = maxLevel(sc.Rooms[id], level)
		}
	}
	return sc
}

func maxLevel(a, b string) string {
	if levelRank(a) >= levelRank(b) {
		return a
	}
	return b
}

func minLevel(a, b string) string {
	if levelRank(a) <= levelRank(b) {
		return a
	}
	return b
}

// Level is the scope's level for a room, "" when the room is outside it
// (shared rooms aside: see Session.level).
func (sc Scope) Level(room string) string {
	if sc.Revoked[room] {
		return ""
	}
	return maxLevel(sc.Rooms[room], sc.AllRooms)
}

// String renders the scope canonically.
func (sc Scope) String() string {
	var parts []string
	if sc.AllRooms != "" {
		parts = append(parts, "rooms:*:"+sc.AllRooms)
	}
	ids := make([]string, 0, len(sc.Rooms))
	for id := range sc.Rooms {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		parts = append(parts, "rooms:"+id+":"+sc.Rooms[id])
	}
	if sc.CreateRooms {
		parts = append(parts, "create_rooms")
	}
	if sc.SharedRooms != "" {
		p := "shared_rooms:" + sc.SharedRooms
		if sc.SharedSince > 0 {
			p += ":" + strconv.FormatInt(sc.SharedSince, 10)
		}
		parts = append(parts, p)
	}
	revoked := make([]string, 0, len(sc.Revoked))
	for id := range sc.Revoked {
		revoked = append(revoked, id)
	}
	slices.Sort(revoked)
	for _, id := range revoked {
		parts = append(parts, "revoked:"+id)
	}
	return strings.Join(parts, " ")
}

// Beyond lists, canonically and sorted, the items of want that reach past
// sc, the scope a session holds: restricting to want would widen the
// session by them, so RestrictScope refuses it. held is the session's
// level for a room (its explicit item, rooms:*, or shared rooms reaching
// it; "" when not held). Levels order observe < read < write < admin, and
// want is within sc item by item:
//
//   - rooms:<id>:L when the room is held at L or above;
//   - rooms:*:L only when sc holds rooms:*:L' with L ≤ L': the wildcard
//     covers rooms made or shared later, which no list of rooms does;
//   - shared_rooms:L only when sc holds shared_rooms:L' with L ≤ L';
//   - create_rooms only when sc holds it.
//
// Widening is a person's act, on the consent screen, never a tool call's.
func (sc Scope) Beyond(want Scope, held func(room string) string) []string {
	var out []string
	if want.AllRooms != "" && levelRank(want.AllRooms) > levelRank(sc.AllRooms) {
		out = append(out, "rooms:*:"+want.AllRooms)
	}
	for id, lvl := range want.Rooms {
		if levelRank(lvl) > levelRank(held(id)) {
			out = append(out, "rooms:"+id+":"+lvl)
		}
	}
	if want.SharedRooms != "" && levelRank(want.SharedRooms) > levelRank(sc.SharedRooms) {
		out = append(out, "shared_rooms:"+want.SharedRooms)
	}
	if want.CreateRooms && !sc.CreateRooms {
		out = append(out, "create_rooms")
	}
	slices.Sort(out)
	return out
}
