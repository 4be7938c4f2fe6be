package substrate

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/expr"
)

// A presence and the embodiments' requests and result (defs/room.go),
// under the names the lobby uses.
type (
	Presence          = defs.Presence
	EmbodyRequest     = defs.EmbodyRequest
	EmbodyRoleRequest = defs.EmbodyRoleRequest
	RoleEmbodiment    = defs.RoleEmbodiment
)

// Operations the lobby needs on rooms and agents. The substrate owns the
// rooms, agents and state tables; the lobby reaches them only through
// these, so timers, presence notifications and ownership rules hold
// whichever layer asks. The mutations (Embody, EmbodyRole, SetIdle) are
// core agent operations; the reads (RoomHeads, Presences, RoomView) give
// substrate/roomview what it shapes the lobby's room summaries from.

// RoomHead is a room's row as the lobby lists it: RoomHeads reads many at
// once, and RoomView reads the room's state at Seq.
type RoomHead struct {
	ID    string
	Label string // meta.label
	Seq   int64
	// Messages is the room's message count: those everyone sees (not
	// gated by enabled, timer not run out).
	Messages int64
	Created  time.Time
	// LastActivity is when the room last changed (its newest _audit
	// entry), or its creation.
	LastActivity time.Time
	read         bool // read by RoomHeads: RoomView trusts only such heads
}

// RoomHeads reads the given rooms' heads (those that exist) in one
// statement. It checks no authority: its callers (the lobby) have
// authenticated the user and decide which rooms they may list.
func (s *Service) RoomHeads(ctx context.Context, ids []string) (map[string]*RoomHead, error) {
	out := map[string]*RoomHead{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.db.Query(ctx, `SELECT id, seq, `+sqlPublicMessages+`, created_at, meta->>'label',
			(SELECT updated_at FROM state s WHERE s.room_id = ANY($1) AND s.room_id = r.id AND s.scope = '_audit' AND s.sort_key IS NOT NULL ORDER BY s.sort_key DESC LIMIT 1)
		FROM rooms r WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		h := &RoomHead{read: true}
		var label *string
		var last *time.Time
		if err := rows.Scan(&h.ID, &h.Seq, &h.Messages, &h.Created, &label, &last); err != nil {
			return nil, err
		}
		h.LastActivity = h.Created
		if last != nil {
			h.LastActivity = *last
		}
		if label != nil {
			h.Label = *label
		}
		out[h.ID] = h
	}
	return out, rows.Err()
}

// Presences reads the agents of the given rooms in one statement, by room
// in joining order, as stored: Unseen (by the database's clock, which
// stamped last_heartbeat) says how long each has not been seen; lapsing
// an unseen agent to idle is the caller's (see IdleAfter). No authority
// is checked, as for RoomHeads.
func (s *Service) Presences(ctx context.Context, ids []string) (map[string][]Presence, error) {
	out := map[string][]Presence{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.db.Query(ctx, `SELECT room_id, id, name, role, status, waiting_on, last_heartbeat, coalesce(user_id, ''),
			coalesce(client_name, ''), (extract(epoch FROM now() - last_heartbeat) * 1000)::bigint, enabled_expr IS NOT NULL
		FROM agents WHERE room_id = ANY($1) ORDER BY room_id, joined_at, id`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var room string
		var a Presence
		var unseenMS int64
		if err := rows.Scan(&room, &a.ID, &a.Name, &a.Role, &a.Status, &a.WaitingOn, &a.LastHeartbeat, &a.Owner, &a.Client, &unseenMS, &a.Gated); err != nil {
			return nil, err
		}
		a.Unseen = time.Duration(unseenMS) * time.Millisecond
		out[room] = append(out[room], a)
	}
	return out, rows.Err()
}

// IdleAfter is Options.IdleAfter: how long an agent goes unseen before
// its presence lapses to idle.
func (s *Service) IdleAfter() time.Duration { return s.idleAfter }

// RoleIDValid reports whether a role may take id (authority.RoleIDValid
// under the server's limits). EmbodyRole refuses the others.
func (s *Service) RoleIDValid(id string) bool { return authority.RoleIDValid(id, s.lim.MaxScopeBytes) }

// RoomView is a read-only view of one room's state at its head's seq,
// for the lobby's summary of it. Its maps are the room's cached
// snapshot's: callers must not modify them.
type RoomView struct {
	s    *Service
	id   string
	msgs int64
	snap *snapshot
	now  time.Time
	live *liveState
}

// RoomView reads the room of h (from RoomHeads) at h.Seq, from the
// snapshot cache or one read. Timers apply as of now. No authority is
// checked: what a reader may see of it is Reader's.
func (s *Service) RoomView(ctx context.Context, h *RoomHead) (*RoomView, error) {
	if h == nil || !h.read {
		return nil, errors.New("substrate: RoomView needs a head read by RoomHeads")
	}
	snap, err := s.loadSnapshot(ctx, s.db, h.ID, cacheKey(h.ID, h.Created), h.Seq, h.Messages)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return &RoomView{s: s, id: h.ID, msgs: h.Messages, snap: snap, now: now, live: snap.live(now)}, nil
}

// Live is the room's live values by scope and key (entries an enabled
// expression gates are left out: who sees them depends on the reader).
func (v *RoomView) Live() map[string]map[string]any { return v.live.vals }

// Revision is the revision of a live or stored entry, 0 for none.
func (v *RoomView) Revision(scope, key string) int64 {
	if r := v.snap.scopes[scope][key]; r != nil {
		return r.Revision
	}
	return 0
}

// PublicView is the value of the room's view id when it is live, has
// no enabled gate and reads no view that has one, directly or through
// other views (whether such a view is there depends on the reader; the
// lobby shows the value to every lister), evaluated as the room
// principal (its registrar's authority). ok is false when the room has
// no such view.
//
// Every member's lobby shows it, on every render, and any member who may
// register views decides what it costs: so only the view and the views
// it reads are evaluated (not the room's other views, actions or gated
// entries), and that evaluation is charged to the room's expression
// budget (its members', as the room principal's reads are). Refused, err
// is room_busy (work) and nothing is evaluated. A value that depends on
// nothing but the room's state at this seq and timer epoch is evaluated
// once and shared by every render, and one a context read with the room's
// authority built at the same state is taken as it is (buildShared): a
// value taken costs nothing, so it is shown even while the room is busy.
func (v *RoomView) PublicView(ctx context.Context, id string) (val any, ok bool, err error) {
	reads, public := v.publicReads(id)
	if !public {
		return nil, false, nil
	}
	key := v.publicKey(id, reads)
	if val, ok := v.sharedPublic(id, key); ok {
		return val, true, nil
	}
	p := RoomPrincipal(v.id)
	ctx, done, err := v.s.work(ctx, p, v.id)
	if err != nil {
		return nil, false, err
	}
	defer done()
	rc := &roomCtx{now: v.now, snap: v.snap, p: p, msgs: msgCounts{Count: v.msgs}}
	// What build gives the room principal's views to read, with no
	// agents (the lobby reads no presence for it): the actions' enabled
	// only when one of these views reads actions.
	rc.vars = expr.Vars{Agents: map[string]any{}, Actions: map[string]any{}, Now: v.now,
		Messages: envelope.MessagesVar(v.msgs, 0, 0)}
	timeless, actions := true, false
	for _, d := range reads {
		actions = actions || d.prog.Uses("actions")
		timeless = timeless && d.r.timer == nil && !d.prog.Uses("now") && !d.prog.Uses("agents")
	}
	if actions {
		rc.vars.Actions = rc.enableActions(ctx, v.s, nil)
	}
	rc.evalViewsOf(ctx, v.s, []string{id})
	val, ok = rc.views[id]
	cut := rc.budget().cut > 0 || rc.viewsCut > 0 || len(rc.actionsCut) > 0
	if ok && !cut && v.snap.live(v.now) == v.live && v.timeless(timeless, actions) {
		keepView(v.live, key, viewResult{val: val})
	}
	return val, ok, nil
}

// publicReads collects view id and those it reads, and reports whether
// it is live and none of them has an enabled gate (defs.PublicReads):
// only then is it the same for everyone.
func (v *RoomView) publicReads(id string) (map[string]*viewRec, bool) {
	byID := map[string]*viewRec{}
	for _, d := range v.snap.views {
		byID[d.def.ID] = d
	}
	if d := byID[id]; d == nil || !d.r.timer.live(v.now) {
		return nil, false
	}
	ids, public := defs.PublicReads(id, func(id string) (defs.ViewNode, bool) {
		d := byID[id]
		if d == nil {
			return defs.ViewNode{}, false
		}
		if d.def.Enabled != "" || d.prog == nil || d.prog.DynamicViews {
			return defs.ViewNode{Gated: true}, true
		}
		return defs.ViewNode{Reads: d.prog.ViewDeps}, true
	})
	if !public {
		return nil, false
	}
	reads := make(map[string]*viewRec, len(ids))
	for _, id := range ids {
		reads[id] = byID[id]
	}
	return reads, true
}

// publicKey is the public memo's key for view id. A view that reads
// messages sees the count of the read (here: the messages everyone
// sees), which a message's timer changes without a new seq or timer
// epoch: its value is shared only at the same count.
func (v *RoomView) publicKey(id string, reads map[string]*viewRec) viewKey {
	for _, d := range reads {
		if d.prog.UsesMessages {
			return viewKey{view: id, public: true, count: v.msgs}
		}
	}
	return viewKey{view: id, public: true, count: noCount}
}

// timeless reports whether a public view's value, evaluated at this
// state, holds for the whole of it: the views read neither now nor
// agents and have no timer (views), the gated entries their registrars'
// state is made with read neither (as the actions' gates, when they read
// actions: then the whole snapshot must be, buildPure).
func (v *RoomView) timeless(views, actions bool) bool {
	if actions {
		return views && v.snap.buildPure(v.s)
	}
	if !views {
		return false
	}
	for _, r := range v.live.deferred {
		p, err := v.s.cel.Compile(*r.enabled)
		if err == nil && (p.Uses("now") || p.Uses("agents")) {
			return false
		}
	}
	return true
}

// sharedPublic is the value of view id as PublicView would evaluate it,
// when a render (kept under key) or a context read with the room's
// authority (its build's key holds the message count its views read)
// already did at this state.
func (v *RoomView) sharedPublic(id string, key viewKey) (any, bool) {
	if r, ok := v.live.views.Get(key); ok || !v.snap.buildPure(v.s) {
		return r.val, ok
	}
	probe := &roomCtx{now: v.now, snap: v.snap, p: RoomPrincipal(v.id), msgs: msgCounts{Count: v.msgs}}
	built, shareable := probe.buildKey(v.live)
	if !shareable {
		return nil, false
	}
	b, ok := v.live.built.Get(built)
	if !ok {
		return nil, false
	}
	val, ok := b.views[id]
	return val, ok
}

// Reader reports, by the one read rule, which scopes of the room p
// reads, so that what the lobby counts of a room is what p may read in
// it.
func (v *RoomView) Reader(p *Principal) func(scope string) bool {
	if v == nil || v.snap == nil {
		return func(string) bool { return false }
	}
	return snapVisibility(p, v.snap).Scope
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

// Embody makes agent req.Agent in req.Room for req.User, or resumes it when
// that user already owns it, and marks it active. It never adopts an agent
// created with a token or made for another user: that is errs.Forbidden.
// The check and the change are one mutation under the room lock, so two
// embodiments cannot race for one id.
func (s *Service) Embody(ctx context.Context, req EmbodyRequest) (*Presence, error) {
	if err := s.validAgent(req.Agent, req.Name, &req.Role); err != nil {
		return nil, err
	}
	if err := authority.EmbodiedBy(req.User); err != nil {
		return nil, err
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
		if err := authority.MayEmbody(req.Agent, req.User, exists, owner, scopeUsed); err != nil {
			return err
		}
		if exists {
			// A role's agent keeps its role (its id): it stays one made for
			// that role, which EmbodyRole checks.
			err = m.tx.QueryRow(m.ctx, `UPDATE agents SET role = CASE WHEN role = id THEN role ELSE $3 END, status = 'active', waiting_on = NULL, last_heartbeat = now(), client_name = $4, grants = $5
				WHERE room_id = $1 AND id = $2 RETURNING id, name, role, status, waiting_on, last_heartbeat`, req.Room, req.Agent, req.Role, nonEmpty(req.Client), defs.StoredGrants(req.Grants)).
				Scan(&out.ID, &out.Name, &out.Role, &out.Status, &out.WaitingOn, &out.LastHeartbeat)
		} else {
			// The agent's token is never shown: the user acts through the
			// lobby session, not with a token.
			_, hash := authority.NewToken(AgentTokenPrefix)
			err = m.tx.QueryRow(m.ctx, `INSERT INTO agents (room_id, id, name, role, token_hash, user_id, client_name, grants) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
				RETURNING id, name, role, status, waiting_on, last_heartbeat`, req.Room, req.Agent, req.Name, req.Role, hash, req.User, nonEmpty(req.Client), defs.StoredGrants(req.Grants)).
				Scan(&out.ID, &out.Name, &out.Role, &out.Status, &out.WaitingOn, &out.LastHeartbeat)
		}
		if err != nil {
			return err
		}
		out.Owner, out.Client = req.User, req.Client
		m.audit = map[string]any{"kind": "agent_embody", "agent": req.Agent, "role": req.Role, "created": !exists, "grants": defs.StoredGrants(req.Grants)}
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
	// Two statements, not CASE WHEN heartbeat THEN now(): Citus refuses
	// a function that is not immutable inside a CASE of an UPDATE.
	q := `UPDATE agents SET status = $3, waiting_on = $4 WHERE room_id = $1 AND id = $2`
	if heartbeat {
		q = `UPDATE agents SET status = $3, waiting_on = $4, last_heartbeat = now() WHERE room_id = $1 AND id = $2`
	}
	tag, err := s.db.Exec(ctx, q, roomID, agentID, status, waitingOn)
	if err != nil || tag.RowsAffected() == 0 {
		return err
	}
	return s.db.Notify(ctx, roomID, store.PresenceNote)
}

// nonEmpty is s, or NULL when empty.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// EmbodyRole makes req.User the driver of the agent that fills role
// req.Role in req.Room (seed 003 §V, §XI): the agent's id is the role's
// id, so whoever fills a role is the same agent, with its scope, actions,
// views and history.
//
//   - No agent yet: it is made for the user.
//   - The user's own: resumed.
//   - Another user's, and the role is vacant (filled_by null, as
//     sync_disembody leaves it) and its agent no longer driven (idle, as
//     sync_disembody leaves it, or unseen for IdleAfter): taken over; its token is rotated and the
//     _audit entry of this mutation records the previous occupant
//     (previous_user, previous_name) and the new one (user, name, client).
//   - Filled by someone else (another user's session, or an agent with
//     another id), or an agent made with a token (an autonomous process):
//     errs.Forbidden.
//
// The role check, the agent change and the filled_by claim are one
// mutation under the room lock, so two users cannot fill one role.
func (s *Service) EmbodyRole(ctx context.Context, req EmbodyRoleRequest) (*RoleEmbodiment, error) {
	if err := authority.MayFillRoleID(req.User, req.Role, s.lim.MaxScopeBytes); err != nil {
		return nil, err
	}
	role := req.Role
	if err := s.validAgent(req.Role, req.Name, &role); err != nil {
		return nil, err
	}
	out := &RoleEmbodiment{}
	var bootActions, bootViews []any
	_, err := s.mutate(ctx, RoomPrincipal(req.Room), req.Room, func(m *mutation) error {
		def, filledBy, err := roleToFill(m, req)
		if err != nil {
			return err
		}
		var occ authority.RoleOccupant
		// InUse is decided by the database's clock, which stamped
		// last_heartbeat.
		err = m.tx.QueryRow(m.ctx, `SELECT EXISTS (SELECT 1 FROM agents WHERE room_id = $1 AND id = $2),
				(SELECT user_id FROM agents WHERE room_id = $1 AND id = $2),
				(SELECT name FROM agents WHERE room_id = $1 AND id = $2),
				(SELECT role FROM agents WHERE room_id = $1 AND id = $2),
				EXISTS (SELECT 1 FROM state WHERE room_id = $1 AND scope = $2),
				EXISTS (SELECT 1 FROM agents WHERE room_id = $1 AND id = $2 AND status <> 'idle' AND last_heartbeat > now() - make_interval(secs => $3))`,
			req.Room, req.Role, s.idleAfter.Seconds()).Scan(&occ.Exists, &occ.Owner, &occ.PrevName, &occ.PrevRole, &occ.ScopeUsed, &occ.InUse)
		if err != nil {
			return err
		}
		audit := map[string]any{"kind": "agent_embody", "agent": req.Role, "role": req.Role, "user": req.User, "name": req.Name, "created": !occ.Exists, "grants": defs.StoredGrants(req.Grants)}
		if req.Client != "" {
			audit["client"] = req.Client
		}
		if err := authority.MayFillRole(req.Role, req.User, filledBy, occ); err != nil {
			return err
		}
		if occ.Exists {
			err = s.reenterRoleAgent(m, req, role, &occ, audit, out)
		} else {
			_, hash := authority.NewToken(AgentTokenPrefix)
			err = m.tx.QueryRow(m.ctx, `INSERT INTO agents (room_id, id, name, role, token_hash, user_id, client_name, grants) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
				RETURNING id, name, role, status, waiting_on, last_heartbeat`, req.Room, req.Role, req.Name, role, hash, req.User, nonEmpty(req.Client), defs.StoredGrants(req.Grants)).
				Scan(&out.ID, &out.Name, &out.Role, &out.Status, &out.WaitingOn, &out.LastHeartbeat)
			out.Created = true
			bootActions, _ = def["bootstrap_actions"].([]any)
			bootViews, _ = def["bootstrap_views"].([]any)
		}
		if err != nil {
			return err
		}
		patch, _ := json.Marshal(map[string]any{req.Role: map[string]any{"filled_by": req.Role, "filled_at": m.now.UTC().Format(time.RFC3339)}})
		_, writes, err := s.applyOps(m, []op{{Scope: ScopeShared, Key: "roles", Merge: patch, Deep: true}}, "builtin:embody")
		if err != nil {
			return err
		}
		audit["writes"] = writes
		m.audit = audit
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out.Created && len(bootActions)+len(bootViews) > 0 {
		out.Bootstrap = s.bootstrapRole(ctx, req.Room, req.Role, bootActions, bootViews)
	}
	out.Owner, out.Client = req.User, req.Client
	return out, nil
}

// roleToFill is req.Role's definition in the room's live _shared.roles
// and who it says fills it (authority.RoleToFill).
func roleToFill(m *mutation, req EmbodyRoleRequest) (def map[string]any, filledBy string, err error) {
	rows, err := loadRows(m, []op{{Scope: ScopeShared, Key: "roles"}})
	if err != nil {
		return nil, "", err
	}
	var roles map[string]any
	if r := rows[entryKey{ScopeShared, "roles"}]; r != nil && r.Version != 0 && r.timer.live(m.now) {
		_ = json.Unmarshal(r.Value, &roles)
	}
	return authority.RoleToFill(req.Room, req.Role, roles)
}

// reenterRoleAgent resumes the role's agent, or takes over a vacated
// one: the agent is the new occupant's then (its old token stops
// working) and the audit records the previous occupant.
func (s *Service) reenterRoleAgent(m *mutation, req EmbodyRoleRequest, role string, occ *authority.RoleOccupant, audit map[string]any, out *RoleEmbodiment) error {
	q := `UPDATE agents SET status = 'active', waiting_on = NULL, last_heartbeat = now(), client_name = $3, role = $4, grants = $5
				WHERE room_id = $1 AND id = $2 RETURNING id, name, role, status, waiting_on, last_heartbeat`
	args := []any{req.Room, req.Role, nonEmpty(req.Client), role, defs.StoredGrants(req.Grants)}
	if authority.TakesOver(req.User, *occ) {
		_, hash := authority.NewToken(AgentTokenPrefix)
		q = `UPDATE agents SET status = 'active', waiting_on = NULL, last_heartbeat = now(), client_name = $3, role = $4, grants = $5,
						user_id = $6, name = $7, token_hash = $8
					WHERE room_id = $1 AND id = $2 RETURNING id, name, role, status, waiting_on, last_heartbeat`
		args = append(args, req.User, req.Name, hash)
		out.TakenOver = true
		audit["takeover"] = true
		audit["previous_user"] = *occ.Owner
		if occ.PrevName != nil {
			audit["previous_name"] = *occ.PrevName
		}
	}
	return m.tx.QueryRow(m.ctx, q, args...).Scan(&out.ID, &out.Name, &out.Role, &out.Status, &out.WaitingOn, &out.LastHeartbeat)
}
