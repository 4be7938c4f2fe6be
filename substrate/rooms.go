package substrate

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/write"
)

// A room and an agent as clients see them and ask for them
// (defs/room.go), under the names the surfaces use.
type (
	Room              = defs.Room
	CreateRoomRequest = defs.CreateRoomRequest
	CreatedRoom       = defs.CreatedRoom
	RotatedToken      = defs.RotatedToken
	Agent             = defs.Agent
	JoinedAgent       = defs.JoinedAgent
	JoinRequest       = defs.JoinRequest
	AgentUpdate       = defs.AgentUpdate
)

// agentChange is the audit record of what an update changed.
var agentChange = defs.AgentChange

// CreateRoom makes a room and its room and view tokens. Creation is the
// room's first mutation (seq 1, audited).
func (s *Service) CreateRoom(ctx context.Context, req CreateRoomRequest) (*CreatedRoom, error) {
	if req.ID == "" {
		req.ID = authority.NewID("room-")
	}
	if err := authority.ValidName("room id", req.ID, s.lim.MaxScopeBytes, false); err != nil {
		return nil, err
	}
	meta, err := s.validMeta("meta", req.Meta)
	if err != nil {
		return nil, err
	}
	token, hash := authority.NewToken(RoomTokenPrefix)
	viewToken, viewHash := authority.NewToken(ViewTokenPrefix)
	out := &CreatedRoom{Token: token, ViewToken: viewToken}
	err = s.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		err := tx.QueryRow(ctx,
			`INSERT INTO rooms (id, meta, open_join, token_hash, view_token_hash, seq)
			 VALUES ($1, $2, $3, $4, $5, 1) RETURNING id, created_at, meta, open_join, seq`,
			req.ID, meta, req.OpenJoin, hash, viewHash).
			Scan(&out.ID, &out.CreatedAt, &out.Meta, &out.OpenJoin, &out.Seq)
		if store.IsUniqueViolation(err) {
			return errs.New(errs.RoomExists, "room %q already exists", req.ID).WithHint("choose another id, or omit id to get a random one")
		}
		if err != nil {
			return err
		}
		// Checked after the insert, in a statement of its own: a deletion
		// of the same id that committed while the insert waited for it is
		// seen here, so a retired id never comes back.
		var retired bool
		// Archived entries without a room are a room deleted before ids
		// were retired (DeleteRoom left its archive): that id is retired too.
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM rooms_retired WHERE id = $1)
				OR EXISTS (SELECT 1 FROM state_archive WHERE room_id = $1)`, out.ID).Scan(&retired); err != nil {
			return err
		}
		if retired {
			return errs.New(errs.RoomExists, "room id %q belonged to a deleted room, and ids are never reused", req.ID).With("retired", true).
				WithHint("choose another id, or omit id to get a random one")
		}
		audit, _ := json.Marshal(map[string]any{"ts": out.CreatedAt.UTC().Format(time.RFC3339Nano), "kind": "room_create", "by": "_room", "seq": 1,
			"open_join": req.OpenJoin})
		_, err = tx.Exec(ctx, `INSERT INTO state (room_id, scope, key, sort_key, value, revision, writer, via, created_at, updated_at)
			VALUES ($1, '_audit', '1', 1, $2, 1, '_room', 'system', $3, $3)`, out.ID, audit, out.CreatedAt)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetRoom returns a room to any principal of it.
func (s *Service) GetRoom(ctx context.Context, p *Principal, roomID string) (*Room, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	r := &Room{}
	err := s.db.QueryRow(ctx, `SELECT id, created_at, meta, open_join, seq FROM rooms WHERE id = $1`, roomID).
		Scan(&r.ID, &r.CreatedAt, &r.Meta, &r.OpenJoin, &r.Seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errs.New(errs.RoomNotFound, "room %q does not exist", roomID)
	}
	return r, err
}

// ListRooms returns the rooms p can see: a room or agent token sees its one
// room. (OAuth users list theirs through the lobby.)
func (s *Service) ListRooms(ctx context.Context, p *Principal) ([]Room, error) {
	r, err := s.GetRoom(ctx, p, p.RoomID)
	if err != nil {
		return nil, err
	}
	return []Room{*r}, nil
}

// validMeta checks an optional JSON object (write.Meta).
func (s *Service) validMeta(field string, raw json.RawMessage) ([]byte, error) {
	return write.Meta(field, raw, s.lim.MaxMetaBytes, s.writeLimits())
}

// DeleteRoom removes a room and everything in it. Room authority only.
func (s *Service) DeleteRoom(ctx context.Context, p *Principal, roomID string) error {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return err
	}
	if err := authority.MayDeleteRoom(p, roomID); err != nil {
		return err
	}
	err := s.db.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM rooms WHERE id = $1`, roomID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errs.New(errs.RoomNotFound, "room %q does not exist", roomID)
		}
		// The archive has no foreign key (it is append-only and large):
		// its rows go with the room.
		if _, err := tx.Exec(ctx, `DELETE FROM state_archive WHERE room_id = $1`, roomID); err != nil {
			return err
		}
		// The id is retired: whatever still names the room outside it
		// (lobby memberships, a session's focus, consents, links) can
		// never reach another room created under the same id.
		_, err = tx.Exec(ctx, `INSERT INTO rooms_retired (id) VALUES ($1) ON CONFLICT DO NOTHING`, roomID)
		return err
	})
	if err != nil {
		return err
	}
	// Waiters learn that the room is gone.
	_ = s.db.Notify(ctx, roomID, "deleted")
	return nil
}

// RotateToken replaces a room's room token or view token (which) with a
// new one and returns it; the old one is refused from then on, including
// by waits and live pages already open with it (they check their
// credential again at each change, and the rotation is one: audited as
// token_rotate, without the token). Room authority only.
func (s *Service) RotateToken(ctx context.Context, p *Principal, roomID, which string) (*RotatedToken, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	prefix, view, err := authority.RotatedPrefix(which)
	if err != nil {
		return nil, err
	}
	column := "token_hash"
	if view {
		column = "view_token_hash"
	}
	if err := authority.MayRotate(p, roomID); err != nil {
		return nil, err
	}
	token, hash := authority.NewToken(prefix)
	out := &RotatedToken{Room: roomID, Which: which, Token: token}
	_, err = s.mutate(ctx, p, roomID, func(m *mutation) error {
		// The grants read again under the lock: a "*" taken away
		// meanwhile no longer rotates.
		if err := authority.MayRotate(m.p, roomID); err != nil {
			return err
		}
		if _, err := m.tx.Exec(ctx, `UPDATE rooms SET `+column+` = $2 WHERE id = $1`, roomID, hash); err != nil {
			return err
		}
		if which == "room" {
			rows, err := m.tx.Query(ctx, `SELECT id FROM agents WHERE room_id = $1 AND user_id IS NULL AND '*' = ANY(grants) ORDER BY id`, roomID)
			if err != nil {
				return err
			}
			if out.TokenAgentsWithRoomAuthority, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return err
			}
		}
		m.audit = map[string]any{"kind": "token_rotate", "which": which}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Agents: joining, changing, heartbeats. Who may do each is
// authority/room.go's; the rows are here.

const agentColumns = `id, name, role, status, waiting_on, last_heartbeat, joined_at, grants, meta, coalesce(enabled_expr, ''),
	coalesce(CASE WHEN user_id IS NOT NULL THEN name END, '')`

func scanAgent(row pgx.Row) (*Agent, error) {
	a := &Agent{}
	err := row.Scan(&a.ID, &a.Name, &a.Role, &a.Status, &a.WaitingOn, &a.LastHeartbeat, &a.JoinedAt, &a.Grants, &a.Meta, &a.Enabled, &a.Account)
	return a, err
}

// agentEnabled checks an agent's enabled expression; "" clears it.
func (s *Service) agentEnabled(src string) (*string, error) {
	if src == "" {
		return nil, nil
	}
	if err := defs.CompileField(s.cel, "enabled", src); err != nil {
		return nil, err
	}
	return &src, nil
}

// Join adds an agent to a room, or re-joins an existing one with a fresh
// token. p is nil when the request carried no token. A new agent needs room
// authority unless the room is open-join; re-joining needs room authority or
// the agent's own token.
func (s *Service) Join(ctx context.Context, p *Principal, roomID string, req JoinRequest) (*JoinedAgent, error) {
	if p != nil {
		if err := s.requireRoom(ctx, p, roomID); err != nil {
			return nil, err
		}
	}
	if req.ID == "" {
		req.ID = authority.NewID("agent-")
	}
	if err := s.validAgent(req.ID, req.Name, &req.Role); err != nil {
		return nil, err
	}
	meta, err := s.validMeta("meta", req.Meta)
	if err != nil {
		return nil, err
	}
	enabled, err := s.agentEnabled(req.Enabled)
	if err != nil {
		return nil, err
	}
	token, hash := authority.NewToken(AgentTokenPrefix)
	out := &JoinedAgent{Token: token}
	_, err = s.mutate(ctx, p, roomID, func(m *mutation) error {
		j := &joining{roomID: roomID, req: &req, meta: meta, hash: hash, enabled: enabled}
		room := authority.Joining{SetsEnabled: enabled != nil}
		err := m.tx.QueryRow(ctx, `SELECT r.open_join,
				EXISTS (SELECT 1 FROM agents WHERE room_id = $1 AND id = $2),
				EXISTS (SELECT 1 FROM state WHERE room_id = $1 AND scope = $2),
				EXISTS (SELECT 1 FROM agents WHERE room_id = $1 AND id = $2 AND user_id IS NOT NULL)
			FROM rooms r WHERE r.id = $1`, roomID, req.ID).Scan(&room.OpenJoin, &room.Exists, &room.ScopeUsed, &room.Account)
		if err != nil {
			return err
		}
		if err := authority.MayJoin(m.p, roomID, req.ID, room); err != nil {
			return err
		}
		if room.Exists {
			err = j.rejoin(ctx, m, out)
		} else {
			err = j.add(ctx, m, out)
		}
		if err != nil {
			return err
		}
		if m.p == nil {
			m.actor = req.ID
		}
		m.audit = map[string]any{"kind": "agent_join", "agent": req.ID, "name": req.Name, "role": req.Role, "rejoin": room.Exists}
		if enabled != nil {
			m.audit["enabled"] = *enabled
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// joining is one Join's request, checked and as stored.
type joining struct {
	roomID  string
	req     *JoinRequest
	meta    []byte
	hash    []byte
	enabled *string
}

// rejoin gives an existing agent a fresh token (authority.MayJoin said
// who may).
func (j *joining) rejoin(ctx context.Context, m *mutation, out *JoinedAgent) error {
	req := j.req
	a, err := scanAgent(m.tx.QueryRow(ctx, `UPDATE agents SET name = $3, role = $4,
					meta = CASE WHEN $6 THEN $5 ELSE meta END,
					token_hash = $7, status = 'active', waiting_on = NULL, last_heartbeat = now(),
					enabled_expr = coalesce($8, enabled_expr)
				WHERE room_id = $1 AND id = $2 RETURNING `+agentColumns,
		j.roomID, req.ID, req.Name, req.Role, j.meta, len(req.Meta) > 0, j.hash, j.enabled))
	if err != nil {
		return err
	}
	out.Agent = *a
	return nil
}

// add makes a new agent (authority.MayJoin said who may, and under
// which id).
func (j *joining) add(ctx context.Context, m *mutation, out *JoinedAgent) error {
	req, roomID := j.req, j.roomID
	a, err := scanAgent(m.tx.QueryRow(ctx, `INSERT INTO agents (room_id, id, name, role, meta, token_hash, enabled_expr)
				VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING `+agentColumns,
		roomID, req.ID, req.Name, req.Role, j.meta, j.hash, j.enabled))
	if err != nil {
		return err
	}
	out.Agent = *a
	out.Created = true
	return nil
}

// ListAgents returns the room's presence to any principal of the room.
func (s *Service) ListAgents(ctx context.Context, p *Principal, roomID string) ([]Agent, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	// Admitted at the start, as every entry that may evaluate: whether
	// it will (an agent's enabled gate) is known only from the rows.
	ctx, done, err := s.work(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	defer done()
	rows, err := s.db.Query(ctx, `SELECT `+agentColumns+` FROM agents WHERE room_id = $1 ORDER BY joined_at, id`, roomID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Agent{}
	gated := false
	for rows.Next() {
		a, err := scanAgent(rows)
		if err != nil {
			return nil, err
		}
		gated = gated || a.Enabled != ""
		out = append(out, *a)
	}
	if err := rows.Err(); err != nil || !gated {
		return out, err
	}
	rows.Close()
	// Gated agents are shown as the reader's context shows them.
	rc, err := s.readCtx(ctx, p, roomID, false)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(out, func(a Agent) bool { _, ok := rc.vars.Agents[a.ID]; return !ok }), nil
}

// UpdateAgent changes an agent's name, role, grants or meta; room authority
// only.
func (s *Service) UpdateAgent(ctx context.Context, p *Principal, roomID, agentID string, u AgentUpdate) (*Agent, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	grants, meta, enabled, err := s.checkAgentUpdate(&u)
	if err != nil {
		return nil, err
	}
	var out *Agent
	_, err = s.mutate(ctx, p, roomID, func(m *mutation) error {
		if err := authority.MayChangeAgent(m.p); err != nil {
			return err
		}
		if u.Name != nil {
			if err := refuseAccountRename(ctx, m, roomID, agentID); err != nil {
				return err
			}
		}
		a, err := scanAgent(m.tx.QueryRow(ctx, `UPDATE agents SET
				name = coalesce($3, name), role = coalesce($4, role),
				grants = coalesce($5, grants), meta = coalesce($6, meta),
				enabled_expr = CASE WHEN $7 THEN $8 ELSE enabled_expr END
			WHERE room_id = $1 AND id = $2 RETURNING `+agentColumns,
			roomID, agentID, u.Name, u.Role, grants, meta, u.Enabled != nil, enabled))
		if errors.Is(err, pgx.ErrNoRows) {
			return errs.New(errs.AgentNotFound, "agent %q is not in room %q", agentID, roomID).WithHint("the context lists the room's agents").
				WithNext(errs.Step{Op: errs.OpReadContext, Room: roomID, Args: map[string]any{"only": "agents"}})
		}
		if err != nil {
			return err
		}
		out = a
		m.audit = map[string]any{"kind": "agent_update", "agent": agentID, "change": agentChange(&u, grants, meta)}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// checkAgentUpdate checks u's fields before any database work and returns
// them as stored: the grants (nil: unchanged), meta and enabled.
func (s *Service) checkAgentUpdate(u *AgentUpdate) (grants []string, meta []byte, enabled *string, err error) {
	if err := authority.ValidAgentText(u.Name, u.Role); err != nil {
		return nil, nil, nil, err
	}
	if u.Grants != nil {
		if grants, err = s.validGrants(*u.Grants); err != nil {
			return nil, nil, nil, err
		}
	}
	if len(u.Meta) > 0 {
		if meta, err = s.validMeta("meta", u.Meta); err != nil {
			return nil, nil, nil, err
		}
	}
	if u.Enabled != nil {
		if enabled, err = s.agentEnabled(*u.Enabled); err != nil {
			return nil, nil, nil, err
		}
	}
	return grants, meta, enabled, nil
}

// validGrants is gs as stored (authority.Grants, told which scopes are
// the system's).
func (s *Service) validGrants(gs []string) ([]string, error) {
	return authority.Grants(gs, s.lim.MaxGrants, s.lim.MaxScopeBytes, isSystemScope)
}

// refuseAccountRename refuses renaming an agent a person's account
// drives (authority.MayRename).
func refuseAccountRename(ctx context.Context, m *mutation, roomID, agentID string) error {
	var account bool
	if err := m.tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM agents WHERE room_id = $1 AND id = $2 AND user_id IS NOT NULL)`, roomID, agentID).Scan(&account); err != nil {
		return err
	}
	return authority.MayRename(agentID, account)
}

// Heartbeat marks an agent present, optionally with a status. The agent
// itself or room authority may call it. It is presence, not a room
// mutation: no sequence number, no audit entry.
func (s *Service) Heartbeat(ctx context.Context, p *Principal, roomID, agentID, status string) (*Agent, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	if err := authority.MayHeartbeat(p, agentID); err != nil {
		return nil, err
	}
	if err := authority.ValidStatus(status); err != nil {
		return nil, err
	}
	a, err := scanAgent(s.db.QueryRow(ctx, `UPDATE agents SET last_heartbeat = now(),
			status = coalesce(nullif($3, ''), status)
		WHERE room_id = $1 AND id = $2 RETURNING `+agentColumns, roomID, agentID, status))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errs.New(errs.AgentNotFound, "agent %q is not in room %q", agentID, roomID).WithHint("join the room first").
			WithNext(errs.Step{Op: errs.OpJoin, Room: roomID})
	}
	if err == nil && status != "" {
		// A status is presence others may wait on: tell them now rather
		// than at their next safety-net re-check.
		err = s.db.Notify(ctx, roomID, store.PresenceNote)
	}
	return a, err
}

// validAgent checks an agent's id, name and role, defaulting the role
// (authority.ValidAgent under the server's limits).
func (s *Service) validAgent(id, name string, role *string) error {
	return authority.ValidAgent(id, name, role, s.lim.MaxScopeBytes)
}
