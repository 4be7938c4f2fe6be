package substrate

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// Operations the lobby needs on rooms and agents. The substrate owns the
// rooms, agents and state tables; the lobby reaches them only through
// these, so timers, presence notifications and ownership rules hold
// whichever layer asks.

// Presence is an agent as the lobby shows it.
type Presence struct {
	ID            string    `json:"id"`
	Name          string    `json:"name"`
	Role          string    `json:"role"`
	Status        string    `json:"status"`
	WaitingOn     *string   `json:"waiting_on"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	// Owner is the user an agent was made for by embodiment; "" for
	// agents created with a token.
	Owner string `json:"-"`
}

// RoomSummary is what the lobby shows of a room.
type RoomSummary struct {
	ID    string
	Label string // meta.label
	Seq   int64
	// SharedKeys counts the live mutable keys of _shared.
	SharedKeys int
	// Roles are the live _shared.roles entries (role id → its object).
	Roles  map[string]map[string]any
	Agents []Presence
}

// RoomSummaries summarises the given rooms (those that exist) in two
// statements plus a snapshot read for each room not in the cache.
// Timers apply: an expired roles entry is not a role.
func (s *Service) RoomSummaries(ctx context.Context, ids []string) (map[string]*RoomSummary, error) {
	out := map[string]*RoomSummary{}
	if len(ids) == 0 {
		return out, nil
	}
	type roomRow struct {
		id         string
		seq, count int64
		born       time.Time
		label      *string
		summary    *RoomSummary
	}
	var list []*roomRow
	rows, err := s.db.Query(ctx, `SELECT id, seq, message_count, created_at, meta->>'label' FROM rooms WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		r := &roomRow{}
		if err := rows.Scan(&r.id, &r.seq, &r.count, &r.born, &r.label); err != nil {
			rows.Close()
			return nil, err
		}
		r.summary = &RoomSummary{ID: r.id, Seq: r.seq, Roles: map[string]map[string]any{}, Agents: []Presence{}}
		if r.label != nil {
			r.summary.Label = *r.label
		}
		out[r.id] = r.summary
		list = append(list, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = s.db.Query(ctx, `SELECT room_id, id, name, role, status, waiting_on, last_heartbeat, coalesce(user_id, '')
		FROM agents WHERE room_id = ANY($1) ORDER BY room_id, joined_at, id`, ids)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var room string
		var a Presence
		if err := rows.Scan(&room, &a.ID, &a.Name, &a.Role, &a.Status, &a.WaitingOn, &a.LastHeartbeat, &a.Owner); err != nil {
			rows.Close()
			return nil, err
		}
		if sum := out[room]; sum != nil {
			sum.Agents = append(sum.Agents, a)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	now := time.Now()
	for _, r := range list {
		snap, err := s.loadSnapshot(ctx, s.db, r.id, cacheKey(r.id, r.born), r.seq, r.count)
		if err != nil {
			return nil, err
		}
		shared := snap.live(now).vals[ScopeShared]
		r.summary.SharedKeys = len(shared)
		if roles, ok := shared["roles"].(map[string]any); ok {
			for id, v := range roles {
				if m, ok := v.(map[string]any); ok {
					r.summary.Roles[id] = m
				}
			}
		}
	}
	return out, nil
}

// RoleIDs lists a summary's role ids in order.
func (r *RoomSummary) RoleIDs() []string {
	ids := make([]string, 0, len(r.Roles))
	for id := range r.Roles {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// AgentOwner reports whether agent exists in room and which user owns it
// ("" for an agent created with a token).
func (s *Service) AgentOwner(ctx context.Context, roomID, agentID string) (owner string, exists bool, err error) {
	err = s.db.QueryRow(ctx, `SELECT coalesce(user_id, '') FROM agents WHERE room_id = $1 AND id = $2`, roomID, agentID).Scan(&owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	return owner, err == nil, err
}

// EmbodyRequest is an embodiment of an agent for a user.
type EmbodyRequest struct {
	Room, Agent, Name, Role string
	// User is the user the agent is made for, or must already belong to.
	User string
}

// Embody makes agent req.Agent in req.Room for req.User, or resumes it when
// that user already owns it, and marks it active. It never adopts an agent
// created with a token or made for another user: that is errs.Forbidden.
// The check and the change are one mutation under the room lock, so two
// embodiments cannot race for one id.
func (s *Service) Embody(ctx context.Context, req EmbodyRequest) (*Presence, error) {
	if err := s.validAgent(req.Agent, req.Name, &req.Role); err != nil {
		return nil, err
	}
	if req.User == "" {
		return nil, errs.New(errs.InvalidField, "an embodiment needs a user").WithHint("embody through the lobby")
	}
	var out Presence
	_, err := s.mutate(ctx, RoomPrincipal(req.Room), req.Room, func(m *mutation) error {
		var owner *string
		var exists, scopeUsed bool
		err := m.tx.QueryRow(m.ctx, `SELECT EXISTS (SELECT 1 FROM agents WHERE room_id = $1 AND id = $2),
				(SELECT user_id FROM agents WHERE room_id = $1 AND id = $2),
				EXISTS (SELECT 1 FROM state WHERE room_id = $1 AND scope = $2)`, req.Room, req.Agent).Scan(&exists, &owner, &scopeUsed)
		if err != nil {
			return err
		}
		switch {
		case exists && (owner == nil || *owner != req.User):
			return errs.New(errs.Forbidden, "agent %q is not yours to embody", req.Agent).
				WithHint("embody without an agent id to get your own, or pick one marked yours in the lobby")
		case exists:
			err = m.tx.QueryRow(m.ctx, `UPDATE agents SET role = $3, status = 'active', waiting_on = NULL, last_heartbeat = now()
				WHERE room_id = $1 AND id = $2 RETURNING id, name, role, status, waiting_on, last_heartbeat`, req.Room, req.Agent, req.Role).
				Scan(&out.ID, &out.Name, &out.Role, &out.Status, &out.WaitingOn, &out.LastHeartbeat)
		case scopeUsed:
			// Taking this id would hand the newcomer an existing scope's data.
			return errs.New(errs.ScopeInUse, "scope %q already holds state, so %q cannot be a new agent", req.Agent, req.Agent).
				WithHint("embody with another agent id")
		default:
			// The agent's token is never shown: the user acts through the
			// lobby session, not with a token.
			_, hash := newToken(AgentTokenPrefix)
			err = m.tx.QueryRow(m.ctx, `INSERT INTO agents (room_id, id, name, role, token_hash, user_id) VALUES ($1, $2, $3, $4, $5, $6)
				RETURNING id, name, role, status, waiting_on, last_heartbeat`, req.Room, req.Agent, req.Name, req.Role, hash, req.User).
				Scan(&out.ID, &out.Name, &out.Role, &out.Status, &out.WaitingOn, &out.LastHeartbeat)
		}
		if err != nil {
			return err
		}
		out.Owner = req.User
		m.audit = map[string]any{"kind": "agent_embody", "agent": req.Agent, "role": req.Role, "created": !exists}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// SetIdle marks an agent idle and not waiting (a user stepped out of it)
// and tells the room's waiters, who may be waiting on presence.
func (s *Service) SetIdle(ctx context.Context, roomID, agentID string) error {
	return s.setPresence(ctx, roomID, agentID, "idle", nil, false)
}

// setPresence sets an agent's status (and what it waits on) and, when the
// agent exists, notifies the room: waiters on presence wake at once.
func (s *Service) setPresence(ctx context.Context, roomID, agentID, status string, waitingOn *string, heartbeat bool) error {
	tag, err := s.db.Exec(ctx, `UPDATE agents SET status = $3, waiting_on = $4,
			last_heartbeat = CASE WHEN $5 THEN now() ELSE last_heartbeat END
		WHERE room_id = $1 AND id = $2`, roomID, agentID, status, waitingOn, heartbeat)
	if err != nil || tag.RowsAffected() == 0 {
		return err
	}
	return s.db.Notify(ctx, roomID, "presence")
}
