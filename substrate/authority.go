package substrate

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// The authority rules are package authority's (issue 45): what a
// credential is, which scopes it reads and writes, the one read rule,
// who may do what to a room and its agents (authority/room.go). The core
// keeps the lookups (below: a credential found in the rooms and agents
// tables, checked again) and re-exports the names, so that callers keep
// saying substrate.Principal.

// Credentials and read rules (package authority).
type (
	Kind      = authority.Kind
	Principal = authority.Principal
	RowFunc   = authority.RowFunc
	ReadRule  = authority.ReadRule
	Reader    = authority.Reader
)

// Credential kinds, scope names and token prefixes (package authority).
const (
	KindRoom     = authority.KindRoom
	KindView     = authority.KindView
	KindAgent    = authority.KindAgent
	KindObserver = authority.KindObserver

	ScopeShared   = authority.ScopeShared
	ScopeMessages = authority.ScopeMessages
	ScopeAudit    = authority.ScopeAudit
	ScopeSelf     = authority.ScopeSelf

	RoomTokenPrefix  = authority.RoomTokenPrefix
	ViewTokenPrefix  = authority.ViewTokenPrefix
	AgentTokenPrefix = authority.AgentTokenPrefix
)

// RoomPrincipal is the room's own authority (authority.RoomPrincipal).
func RoomPrincipal(roomID string) *Principal { return authority.RoomPrincipal(roomID) }

// ObserverPrincipal reads a room's communal scopes only
// (authority.ObserverPrincipal).
func ObserverPrincipal(roomID string) *Principal { return authority.ObserverPrincipal(roomID) }

// ViewPrincipal reads everything in a room and writes nothing
// (authority.ViewPrincipal).
func ViewPrincipal(roomID string) *Principal { return authority.ViewPrincipal(roomID) }

// ReadOnlyOf is p's authority to read with and nothing more
// (authority.ReadOnlyOf).
func ReadOnlyOf(p *Principal) *Principal { return authority.ReadOnlyOf(p) }

func words(p *Principal) errs.Words {
	if p == nil || p.Words == nil {
		return errs.Plain
	}
	return p.Words
}

var systemScopes = []string{ScopeAudit, "_agents", "_actions", "_views", "_cooldowns", ScopeThreads, ScopeAcks}

// isSystemScope reports scopes only the system writes: the reserved ones
// and features' (reservedScopes: the loom's _loom, _loom.*, whether or not
// the Service runs the loom), which their operations keep consistent.
func isSystemScope(scope string) bool {
	return slices.Contains(systemScopes, scope) || featureScope(scope)
}

// IsSystemScope reports scopes only the system writes (the reserved ones
// and features'), whose keys are its records, not the room's vocabulary:
// pages say what they are rather than name them.
func IsSystemScope(scope string) bool { return isSystemScope(scope) }

// checkWrite returns nil when p may write scope directly
// (authority.CheckWrite, told which scopes are the system's).
func checkWrite(p *Principal, scope string) error {
	return authority.CheckWrite(p, scope, isSystemScope(scope))
}

// snapRows reads entries from a snapshot (every mutable row, timers not
// applied: a rule's records carry no timers).
func snapRows(snap *snapshot) RowFunc {
	return func(scope, key string) (json.RawMessage, bool, error) {
		r, ok := snap.scopes[scope][key]
		if !ok {
			return nil, false, nil
		}
		return r.Value, true, nil
	}
}

// dbRows reads entries on q.
func dbRows(ctx context.Context, q querier, roomID string) RowFunc {
	return func(scope, key string) (json.RawMessage, bool, error) {
		var v json.RawMessage
		err := q.QueryRow(ctx, `SELECT value FROM state WHERE room_id = $1 AND scope = $2 AND key = $3 AND sort_key IS NULL`+liveSQL,
			roomID, scope, key).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, nil
		}
		return v, err == nil, err
	}
}

// visibilityIn loads p's visibility in roomID on q.
func (s *Service) visibilityIn(ctx context.Context, q querier, p *Principal, roomID string) (*authority.Visibility, error) {
	return authority.VisibilityOf(s.wired.rules, p, dbRows(ctx, q, roomID))
}

// Authentication: finding the principal a credential names, in the rooms
// and agents tables, and checking again that it still holds.

// Authenticate resolves a bearer token to its principal, in whichever room
// it belongs to. It searches every room, so in a sharded deployment (see
// the README, "Scaling out") it reaches every shard: requests that name
// their room use AuthenticateIn.
func (s *Service) Authenticate(ctx context.Context, token string) (*Principal, error) {
	return s.AuthenticateIn(ctx, "", token)
}

// AuthenticateIn resolves a bearer token presented to room roomID ("" when
// the request names no room), looking in that room only: with the room as
// the shard key, the lookup reaches one shard. A token of another room is
// still resolved, on this failure path only, so the caller can say whose
// it is (requireRoom's 403) rather than call it unknown. An agent's call
// also counts as its heartbeat (refreshed at most every HeartbeatEvery).
func (s *Service) AuthenticateIn(ctx context.Context, roomID, token string) (*Principal, error) {
	p, ok := authority.FromToken(token)
	if !ok {
		return nil, errs.New(errs.Unauthorized, "the bearer token is not a sync token").
			WithHint("send Authorization: Bearer room_…, view_… or as_… as returned when the room was created or the agent joined")
	}
	kind, h := p.Kind, p.TokenHash()
	var err error
	var stale bool
	switch {
	case roomID == "":
		err = pgx.ErrNoRows
	case kind == KindRoom:
		err = s.db.QueryRow(ctx, `SELECT id FROM rooms WHERE id = $1 AND token_hash = $2`, roomID, h).Scan(&p.RoomID)
	case kind == KindView:
		err = s.db.QueryRow(ctx, `SELECT id FROM rooms WHERE id = $1 AND view_token_hash = $2`, roomID, h).Scan(&p.RoomID)
	default:
		var age float64
		err = s.db.QueryRow(ctx,
			`SELECT room_id, id, grants, coalesce(extract(epoch FROM now() - last_heartbeat)::float8, 1e9)
			   FROM agents WHERE room_id = $1 AND token_hash = $2`, roomID, h).
			Scan(&p.RoomID, &p.AgentID, &p.Grants, &age)
		stale = age > s.hbEach.Seconds()
		p.SetHeartbeatAge(time.Duration(age * float64(time.Second)))
	}
	if errors.Is(err, pgx.ErrNoRows) {
		err = s.findToken(ctx, p, h, &stale)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errs.New(errs.Unauthorized, "the bearer token is unknown or was rotated").
			WithHint("use the token returned by the latest room creation or agent join; re-join the agent with the room token to get a new one")
	}
	if err != nil {
		return nil, err
	}
	if stale {
		s.touch(ctx, p.RoomID, p.AgentID)
		p.SetHeartbeatAge(0)
	}
	return p, nil
}

// AuthenticateInvoke is AuthenticateIn for an invocation of the room's
// action actionID, answered from memory when the same token was looked up
// for the same room a moment ago (issue 32: the lookup was a round trip of
// every invocation). That is safe for an invocation only: it verifies the
// token again under the room lock, before it reads or writes anything
// (mutateOn: the room's token hashes and the agent's row with its grants),
// and nothing before the lock reads the room; a refusal Invoke gives
// before the lock looks the token up first (deadRemembered). The builtin
// help and the underscore builtins, which may read before any lock, and
// read-only credentials, which invoke nothing, are always looked up. A
// remembered agent token is looked up again when its heartbeat is
// due, so the heartbeat (and its check of the token) is as without memory.
func (s *Service) AuthenticateInvoke(ctx context.Context, roomID, actionID, token string) (*Principal, error) {
	if _, builtin := builtinDescriptions[actionID]; builtin || roomID == "" {
		return s.AuthenticateIn(ctx, roomID, token)
	}
	kind, ok := authority.TokenKind(token)
	if !ok {
		return s.AuthenticateIn(ctx, roomID, token)
	}
	h := authority.HashToken(token)
	// The memory holds who a token named (its kind, room and agent, which
	// never change for a token: a rotation or re-join makes a new one)
	// and, for rate budgets only, the grants it had; the invocation
	// re-reads the grants under the lock.
	if p, ok := s.tokens.Get(roomID, h, time.Now()); ok {
		return p.Remembered(), nil
	}
	p, err := s.AuthenticateIn(ctx, roomID, token)
	if err != nil || p.RoomID != roomID || p.Kind != kind || p.ReadOnly() {
		// A read-only credential invokes nothing of the room's: it is
		// refused before the lock (Invoke), which is no place for a
		// remembered answer, so it is looked up each time.
		return p, err
	}
	// Remembered until the heartbeat is due (agents), or as long (the
	// room's token), whichever way the principal was found.
	s.tokens.Put(roomID, h, p.Remembered(), time.Now().Add(s.hbEach-p.HeartbeatAge()))
	return p, nil
}

// forgetToken drops p's token from memory (AuthenticateInvoke): an
// invocation found it dead under the room lock.
func (s *Service) forgetToken(p *Principal) {
	if p != nil && p.FromMemory() {
		s.tokens.Forget(p.RoomID, p.TokenHash())
	}
}

// deadRemembered looks a remembered principal's token up again before
// Invoke refuses it for something else ahead of the room lock (params
// that are not an object, the room's budget spent): only the lock checks
// a remembered token, and a dead one must hear that it is dead, not how to
// fix a call it can no longer make. It returns the refusal of a token
// rotated or revoked (or of a deleted room), and forgets the token; nil
// when the token still holds, for principals not remembered, and when the
// lookup itself fails (the caller's own refusal stands).
func (s *Service) deadRemembered(ctx context.Context, p *Principal) error {
	if p == nil || !p.FromMemory() {
		return nil
	}
	_, err := s.recheck(ctx, p)
	if errs.Is(err, errs.Unauthorized) || errs.Is(err, errs.RoomNotFound) {
		s.forgetToken(p)
		return err
	}
	return nil
}

// findToken looks for a token's hash in every room: for requests that
// name no room, and for a token presented to a room it does not belong to.
// These are the substrate's only statements on room-owned tables that do
// not name a room (store's TestStatementsNameTheirRoom allows them here).
func (s *Service) findToken(ctx context.Context, p *Principal, h []byte, stale *bool) error {
	switch p.Kind {
	case KindRoom:
		return s.db.QueryRow(ctx, `SELECT id FROM rooms WHERE token_hash = $1`, h).Scan(&p.RoomID)
	case KindView:
		return s.db.QueryRow(ctx, `SELECT id FROM rooms WHERE view_token_hash = $1`, h).Scan(&p.RoomID)
	}
	return s.db.QueryRow(ctx,
		`SELECT room_id, id, grants, last_heartbeat < now() - make_interval(secs => $2)
		   FROM agents WHERE token_hash = $1`, h, s.hbEach.Seconds()).
		Scan(&p.RoomID, &p.AgentID, &p.Grants, stale)
}

// errRotatedMeanwhile refuses a change whose token was rotated (or its
// agent re-joined) between its authentication and the room lock.
func errRotatedMeanwhile() error {
	return errs.New(errs.Unauthorized, "the bearer token was rotated while the call waited for the room").
		WithHint("use the room's current token; an agent re-joins with the room token to get a new one")
}

// recheck establishes p's authority again for a call that outlived its
// authentication (a wait, at each wake-up): a token rotated or revoked
// since is errs.Unauthorized, a room deleted since errs.RoomNotFound, and a
// surface's principal is asked again (Principal.Refresh), which says why it
// no longer holds (the lobby: room_not_in_scope). An agent's grants are
// read again too: a narrowing counts at once.
func (s *Service) recheck(ctx context.Context, p *Principal) (*Principal, error) {
	switch {
	case p.Refresh != nil:
		np, err := p.Refresh(ctx)
		if err != nil {
			return nil, err
		}
		if np.Words == nil {
			np.Words = p.Words
		}
		return np, nil
	case p.TokenHash() == nil:
		return p, nil // the system's own principals (RoomPrincipal, …)
	}
	np := *p
	var err error
	switch p.Kind {
	case KindRoom:
		err = s.db.QueryRow(ctx, `SELECT id FROM rooms WHERE id = $1 AND token_hash = $2`, p.RoomID, p.TokenHash()).Scan(&np.RoomID)
	case KindView:
		err = s.db.QueryRow(ctx, `SELECT id FROM rooms WHERE id = $1 AND view_token_hash = $2`, p.RoomID, p.TokenHash()).Scan(&np.RoomID)
	default:
		err = s.db.QueryRow(ctx, `SELECT grants FROM agents WHERE room_id = $1 AND id = $2 AND token_hash = $3`, p.RoomID, p.AgentID, p.TokenHash()).Scan(&np.Grants)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		var exists bool
		if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM rooms WHERE id = $1)`, p.RoomID).Scan(&exists); err != nil {
			return nil, err
		}
		if !exists {
			return nil, errs.New(errs.RoomNotFound, "room %q was deleted", p.RoomID).WithHint("nothing to wait for: the room is gone")
		}
		return nil, errs.New(errs.Unauthorized, "the bearer token was rotated or revoked while the call ran").
			WithHint("use the room's current token; an agent re-joins with the room token to get a new one")
	}
	if err != nil {
		return nil, err
	}
	return &np, nil
}

// touch records a heartbeat. It is best effort: a failed heartbeat must not
// fail the call it rides on.
func (s *Service) touch(ctx context.Context, roomID, agentID string) {
	if _, err := s.db.Exec(ctx, `UPDATE agents SET last_heartbeat = now() WHERE room_id = $1 AND id = $2`, roomID, agentID); err != nil {
		s.log.Warn("heartbeat update failed", "room", roomID, "agent", agentID, "err", err)
	}
}

// requireRoom checks that p may address roomID at all
// (authority.Address), looking the room up only for a token of another.
func (s *Service) requireRoom(ctx context.Context, p *Principal, roomID string) error {
	return authority.Address(p, roomID, func() (bool, error) {
		var exists bool
		err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM rooms WHERE id = $1)`, roomID).Scan(&exists)
		return exists, err
	})
}

// AgentPrincipal is the authority of an existing agent, for layers (the
// lobby) that established by other means that the caller embodies it. It
// counts as the agent's heartbeat.
func (s *Service) AgentPrincipal(ctx context.Context, roomID, agentID string) (*Principal, error) {
	return s.agentPrincipal(ctx, roomID, agentID, nil)
}

// EmbodiedPrincipal is AgentPrincipal for a user's embodiment: the agent
// must still be that user's. When another user has since taken it over (a
// vacated role filled again, see EmbodyRole) it is errs.Forbidden with
// reason "taken_over": the old session no longer drives it.
func (s *Service) EmbodiedPrincipal(ctx context.Context, roomID, agentID, userID string) (*Principal, error) {
	return s.agentPrincipal(ctx, roomID, agentID, &userID)
}

func (s *Service) agentPrincipal(ctx context.Context, roomID, agentID string, userID *string) (*Principal, error) {
	p := &Principal{Kind: KindAgent, RoomID: roomID, AgentID: agentID}
	var stale bool
	var owner *string
	err := s.db.QueryRow(ctx, `SELECT grants, last_heartbeat < now() - make_interval(secs => $3), user_id FROM agents WHERE room_id = $1 AND id = $2`,
		roomID, agentID, s.hbEach.Seconds()).Scan(&p.Grants, &stale, &owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errs.New(errs.AgentNotFound, "agent %q is not in room %q", agentID, roomID).WithHint("embody an agent again")
	}
	if err != nil {
		return nil, err
	}
	if userID != nil {
		if err := authority.Embodies(roomID, agentID, *userID, owner); err != nil {
			return nil, err
		}
	}
	if stale {
		s.touch(ctx, roomID, agentID)
	}
	return p, nil
}
