// Package lobby is users' side of rooms: which rooms a user belongs to and
// with what access (smcp_user_rooms), and (next) MCP sessions, observe and
// embody. It sits between the OAuth/MCP layers and the substrate.
package lobby

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	"github.com/syncsubstrate/sync/store"
)

// Lobby is the users' view of rooms.
type Lobby struct {
	db *store.DB
}

// New returns a Lobby over db.
func New(db *store.DB) *Lobby { return &Lobby{db: db} }

// Room is one of a user's rooms.
type Room struct {
	ID     string
	Label  string
	Access string // owner, collaborator, participant or observer
	Agents []Agent
	Roles  []string // ids of the roles defined in _shared.roles
}

// Agent is an agent's presence, as shown next to a room.
type Agent struct {
	ID, Name, Status string
	LastHeartbeat    time.Time
}

// UserRooms lists the rooms a user belongs to, with their agents and
// defined roles.
func (l *Lobby) UserRooms(ctx context.Context, userID string) ([]Room, error) {
	rows, err := l.db.Pool.Query(ctx, `SELECT ur.room_id, coalesce(ur.label, r.meta->>'label', ''), ur.access,
			(SELECT value FROM state s WHERE s.room_id = ur.room_id AND s.scope = '_shared' AND s.key = 'roles')
		FROM smcp_user_rooms ur JOIN rooms r ON r.id = ur.room_id
		WHERE ur.user_id = $1 ORDER BY ur.created_at, ur.room_id`, userID)
	if err != nil {
		return nil, err
	}
	var out []Room
	for rows.Next() {
		var rm Room
		var roles []byte
		if err := rows.Scan(&rm.ID, &rm.Label, &rm.Access, &roles); err != nil {
			rows.Close()
			return nil, err
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(roles, &m) == nil {
			for id := range m {
				rm.Roles = append(rm.Roles, id)
			}
			sort.Strings(rm.Roles)
		}
		out = append(out, rm)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range out {
		ag, err := l.db.Pool.Query(ctx, `SELECT id, name, status, last_heartbeat FROM agents WHERE room_id = $1 ORDER BY joined_at, id`, out[i].ID)
		if err != nil {
			return nil, err
		}
		for ag.Next() {
			var a Agent
			if err := ag.Scan(&a.ID, &a.Name, &a.Status, &a.LastHeartbeat); err != nil {
				ag.Close()
				return nil, err
			}
			out[i].Agents = append(out[i].Agents, a)
		}
		ag.Close()
	}
	return out, nil
}

// AddMember gives a user access to a room (owner when they created it).
func (l *Lobby) AddMember(ctx context.Context, userID, roomID, access, label, invitedBy string) error {
	var lbl, by *string
	if label != "" {
		lbl = &label
	}
	if invitedBy != "" {
		by = &invitedBy
	}
	_, err := l.db.Pool.Exec(ctx, `INSERT INTO smcp_user_rooms (user_id, room_id, access, label, invited_by) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (user_id, room_id) DO UPDATE SET access = EXCLUDED.access, label = coalesce(EXCLUDED.label, smcp_user_rooms.label)`,
		userID, roomID, access, lbl, by)
	return err
}
