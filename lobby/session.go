package lobby

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// Error codes of the lobby.
const (
	RoomNotInScope = errs.RoomNotInScope
	NotEmbodied    = errs.NotEmbodied
)

// Caller is who a verified access token says is calling, translated from
// the token once at the MCP edge; a Session carries it as it is.
type Caller struct {
	GrantID, UserID, Username, ClientID, ClientName string
	Scopes                                          []string
}

// Session is the persisted state of one MCP connection (one OAuth grant):
// everything a stateless tool call needs, in smcp_user_sessions.
type Session struct {
	// Caller is the token's identity (its Scopes are the token's; Scope
	// below is the session's own, persisted one).
	Caller
	RoomID, AgentID string // "" when none
	Scope           Scope
	// roles are the user's roles by room, read with the session row so a
	// call needs no further query to know its access.
	roles map[string]string
	// fresh are the rooms shared with the user (or whose role changed)
	// since the session began: Scope.SharedRooms reaches them.
	fresh map[string]bool
}

// level is the session's scope level for room: its scope's, widened to
// Scope.SharedRooms for a room shared with the user since the session
// began (never a revoked one). The user's role still caps it (Access).
func (s *Session) level(room string) string {
	l := s.Scope.Level(room)
	if s.Scope.SharedRooms != "" && s.fresh[room] && !s.Scope.Revoked[room] {
		l = maxLevel(l, s.Scope.SharedRooms)
	}
	return l
}

// Level is the session's scope level for room, rooms shared with the user
// since the session began included.
func (s *Session) Level(room string) string { return s.level(room) }

// freshSQL is true for a membership shared with the user (by someone, not
// created or claimed by the user) after the consent (the millisecond stamp
// in parameter since, from shared_rooms:<level>:<ms>), or, without one,
// after the session row was made.
func freshSQL(since string) string {
	return `(invited_by IS NOT NULL AND shared_at > coalesce(to_timestamp(` + since + `::bigint / 1000.0), sess.created_at))`
}

// sinceArg is a scope's consent stamp as a query argument (NULL if none).
func sinceArg(sc Scope) *int64 {
	if sc.SharedSince <= 0 {
		return nil
	}
	return &sc.SharedSince
}

// Resolve loads the caller's session row, creating it on first use with
// the token's scope. It is keyed by the grant id, which survives refresh.
//
// It reads first, and writes only for a grant without its row: on Citus
// smcp_user_sessions is a reference table, copied to every node, so that
// any write to it, even an insert that conflicts and does nothing, is a
// write on every node and a two-phase commit, which every tool call
// paid.
//
// A new grant's first calls often arrive at once, on several processes.
// The usual statement inserts the row or reads it, writing nothing when
// it exists; but a call whose statement began before another call's
// insert committed neither inserts (the conflict) nor sees the row (its
// snapshot is older), so it finds none. That call asks again with the
// create-or-get statement that returns the row whoever made it
// (ON CONFLICT DO UPDATE locks and returns the committed row): not the
// usual statement, since it writes a row version on every call.
func (l *Lobby) Resolve(ctx context.Context, c Caller) (*Session, error) {
	since := sinceArg(ParseScope(strings.Join(c.Scopes, " ")))
	s, err := l.resolve(ctx, c, readSessionSQL, c.GrantID, c.UserID, since)
	if errors.Is(err, pgx.ErrNoRows) {
		s, err = l.resolve(ctx, c, resolveSQL, c.GrantID, c.UserID, c.ClientID, strings.Join(c.Scopes, " "), since)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		s, err = l.resolve(ctx, c, resolveRaceSQL, c.GrantID, c.UserID, c.ClientID, strings.Join(c.Scopes, " "), since)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		// The grant's row belongs to another user: never served to this one.
		return nil, errs.New(errs.Unauthorized, "this token's connection is not yours").
			WithHint("reconnect the integration")
	}
	return s, err
}

// readSessionSQL reads a grant's session row ($1) of user $2 with the
// user's roles and the rooms shared since $3 (Resolve: the consent's
// stamp; reload: the session's).
var readSessionSQL = `SELECT sess.room_id, sess.agent_id, sess.scope,
			coalesce((SELECT jsonb_object_agg(room_id, access) FROM smcp_user_rooms WHERE user_id = $2), '{}'::jsonb),
			coalesce((SELECT array_agg(room_id) FROM smcp_user_rooms WHERE user_id = $2 AND ` + freshSQL("$3") + `), '{}')
		FROM smcp_user_sessions sess WHERE grant_id = $1 AND user_id = $2`

// resolveSQL and resolveRaceSQL read or create the session row (see
// Resolve) with the user's roles and the rooms shared since the consent.
var (
	resolveSQL = resolveQuery(`WITH ins AS (
			INSERT INTO smcp_user_sessions (grant_id, user_id, client_id, scope) VALUES ($1, $2, $3, $4)
			ON CONFLICT (grant_id) DO NOTHING RETURNING room_id, agent_id, scope, created_at),
		sess AS (SELECT room_id, agent_id, scope, created_at FROM ins
			UNION ALL SELECT room_id, agent_id, scope, created_at FROM smcp_user_sessions WHERE grant_id = $1 AND user_id = $2
			LIMIT 1)`)
	resolveRaceSQL = resolveQuery(`WITH sess AS (
			INSERT INTO smcp_user_sessions (grant_id, user_id, client_id, scope) VALUES ($1, $2, $3, $4)
			ON CONFLICT (grant_id) DO UPDATE SET updated_at = smcp_user_sessions.updated_at
				WHERE smcp_user_sessions.user_id = EXCLUDED.user_id
			RETURNING room_id, agent_id, scope, created_at)`)
)

func resolveQuery(with string) string {
	return with + `
		SELECT sess.room_id, sess.agent_id, sess.scope,
			coalesce((SELECT jsonb_object_agg(room_id, access) FROM smcp_user_rooms WHERE user_id = $2), '{}'::jsonb),
			coalesce((SELECT array_agg(room_id) FROM smcp_user_rooms WHERE user_id = $2 AND ` + freshSQL("$5") + `), '{}')
		FROM sess`
}

// resolve runs query, one of the statements reading a session row, with
// args (the consent's stamp is the grant's: the token's scope carries
// it).
func (l *Lobby) resolve(ctx context.Context, c Caller, query string, args ...any) (*Session, error) {
	s := &Session{Caller: c}
	var room, agent *string
	var scope string
	var fresh []string
	err := l.db.QueryRow(ctx, query, args...).Scan(&room, &agent, &scope, &s.roles, &fresh)
	if err != nil {
		return nil, err
	}
	s.fresh = map[string]bool{}
	for _, id := range fresh {
		s.fresh[id] = true
	}
	if room != nil {
		s.RoomID = *room
	}
	if agent != nil {
		s.AgentID = *agent
	}
	s.Scope = ParseScope(scope)
	return s, nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (l *Lobby) save(ctx context.Context, s *Session) error {
	_, err := l.db.Exec(ctx, `UPDATE smcp_user_sessions SET room_id = $2, agent_id = $3, scope = $4, updated_at = now() WHERE grant_id = $1`,
		s.GrantID, nullable(s.RoomID), nullable(s.AgentID), s.Scope.String())
	return err
}

// reload reads a session's row again, with the user's rooms and roles as
// they are now. A session whose grant was revoked (and its row purged) is
// errs.Unauthorized.
func (l *Lobby) reload(ctx context.Context, s *Session) (*Session, error) {
	n := &Session{Caller: s.Caller}
	var room, agent *string
	var scope string
	var fresh []string
	err := l.db.QueryRow(ctx, readSessionSQL, s.GrantID, s.UserID, sinceArg(s.Scope)).
		Scan(&room, &agent, &scope, &n.roles, &fresh)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errs.New(errs.Unauthorized, "this connection was revoked").WithHint("reconnect the integration")
	}
	if err != nil {
		return nil, err
	}
	n.fresh = map[string]bool{}
	for _, id := range fresh {
		n.fresh[id] = true
	}
	if room != nil {
		n.RoomID = *room
	}
	if agent != nil {
		n.AgentID = *agent
	}
	n.Scope = ParseScope(scope)
	return n, nil
}
