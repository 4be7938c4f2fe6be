package lobby

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/lobby/roomdir"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Error codes of the lobby.
const (
	RoomNotInScope = errs.RoomNotInScope
	NotEmbodied    = errs.NotEmbodied
)

// Caller is who a verified access token says is calling.
type Caller struct {
	GrantID, UserID, Username, ClientID, ClientName string
	Scopes                                          []string
}

// Session is the persisted state of one MCP connection (one OAuth grant):
// everything a stateless tool call needs, in smcp_user_sessions.
type Session struct {
	GrantID, UserID, Username, ClientID, ClientName string
	RoomID, AgentID                                 string // "" when none
	Scope                                           Scope
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
// A new grant's first calls often arrive at once, on several processes.
// The usual statement inserts the row or reads it, writing nothing when
// it exists; but a call whose statement began before another call's
// insert committed neither inserts (the conflict) nor sees the row (its
// snapshot is older), so it finds none. That call asks again with the
// create-or-get statement that returns the row whoever made it
// (ON CONFLICT DO UPDATE locks and returns the committed row): not the
// usual statement, since it writes a row version on every call.
func (l *Lobby) Resolve(ctx context.Context, c Caller) (*Session, error) {
	s, err := l.resolve(ctx, c, resolveSQL)
	if errors.Is(err, pgx.ErrNoRows) {
		s, err = l.resolve(ctx, c, resolveRaceSQL)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		// The grant's row belongs to another user: never served to this one.
		return nil, errs.New(errs.Unauthorized, "this token's connection is not yours").
			WithHint("reconnect the integration")
	}
	return s, err
}

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

func (l *Lobby) resolve(ctx context.Context, c Caller, query string) (*Session, error) {
	s := &Session{GrantID: c.GrantID, UserID: c.UserID, Username: c.Username, ClientID: c.ClientID, ClientName: c.ClientName}
	var room, agent *string
	var scope string
	var fresh []string
	err := l.db.QueryRow(ctx, query, c.GrantID, c.UserID, c.ClientID, strings.Join(c.Scopes, " "),
		// The consent's stamp is the grant's: the token's scope carries it.
		sinceArg(ParseScope(strings.Join(c.Scopes, " ")))).Scan(&room, &agent, &scope, &s.roles, &fresh)
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

// Access is the session's effective level on a room: the lesser of its
// scope and the user's role there.
func (l *Lobby) Access(ctx context.Context, s *Session, room string) (level, role string, err error) {
	if room == "" {
		return "", "", errs.New(errs.InvalidField, "no room given and none in focus").
			WithHint("pass room (see sync_lobby for your rooms), or sync_create_room")
	}
	role, member := s.roles[room]
	if !member { // a room joined since the session row was read
		var fresh bool
		err := l.db.QueryRow(ctx, `SELECT access, `+freshSQL("$4")+` FROM smcp_user_rooms,
				(SELECT created_at FROM smcp_user_sessions WHERE grant_id = $3) sess
			WHERE user_id = $1 AND room_id = $2`, s.UserID, room, s.GrantID, sinceArg(s.Scope)).Scan(&role, &fresh)
		if err == nil {
			member = true
			if s.roles == nil {
				s.roles = map[string]string{}
			}
			s.roles[room] = role
			if fresh {
				if s.fresh == nil {
					s.fresh = map[string]bool{}
				}
				s.fresh[room] = true
			}
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return "", "", err
		}
	}
	if !member {
		return "", "", l.notInScope(s, room, "not_shared", "")
	}
	scopeLevel := s.level(room)
	if scopeLevel == "" {
		switch {
		case s.Scope.Revoked[room]:
			return "", "", l.notInScope(s, room, "revoked", role)
		case s.fresh[room]:
			return "", "", l.notInScope(s, room, "shared_not_allowed", role)
		}
		return "", "", l.notInScope(s, room, "not_granted", role)
	}
	return minLevel(scopeLevel, roleCap(role)), role, nil
}

// notInScope is room_not_in_scope saying which case it is (reason) and
// what the user can do about it:
//
//   - not_shared: the room is not shared with the user (or does not exist:
//     the two are not told apart).
//   - not_granted: shared before this connection was made, and not
//     ticked on its consent screen.
//   - shared_not_allowed: shared since, and the consent screen did not
//     allow new shared rooms.
//   - revoked: dropped with sync_revoke_access.
func (l *Lobby) notInScope(s *Session, room, reason, role string) error {
	return l.notInScopeErr(s, room, reason, role).WithOptions(scopeOptions(s, room, reason)...)
}

// scopeOptions are room_not_in_scope's ways out (seed 003 §IX: ask the
// owner to share it, re-authorize with the room ticked, create a room),
// those that can work in this case, each worded by the surface.
func scopeOptions(s *Session, room, reason string) []errs.Step {
	var out []errs.Step
	if reason == "not_shared" {
		out = append(out, errs.Step{Op: errs.OpShareRoom, Room: room, Args: map[string]any{"username": s.Username}})
	}
	// Sharing alone reaches the connection when its consent allows new
	// shared rooms; otherwise re-authorizing is the way in.
	if reason != "not_shared" || s.Scope.SharedRooms == "" {
		re := errs.Step{Op: errs.OpReauthorize, Room: room}
		if reason != "revoked" {
			re.Args = map[string]any{"allow_shared": true}
		}
		out = append(out, re)
	}
	if s.Scope.CreateRooms {
		out = append(out, errs.Step{Op: errs.OpCreateRoom})
	}
	return out
}

func (l *Lobby) notInScopeErr(s *Session, room, reason, role string) *errs.Error {
	reconnect := "the user reconnects the integration (disconnect it in the client's settings, connect again) and ticks " + room + " on the consent screen"
	e := errs.New(RoomNotInScope, "room %q is not in this connection's scope", room).With("room", room).With("reason", reason)
	if role != "" {
		e = e.With("role", role)
	}
	switch reason {
	case "not_shared":
		hint := "the room is not shared with you: ask its owner to share it with you (sync_share_room, or their account page)"
		if s.Scope.SharedRooms != "" {
			hint += "; it then joins this connection at once, at up to " + s.Scope.SharedRooms + " access"
		} else {
			hint += "; then " + reconnect + ", or allows \"new rooms shared with me\" there"
		}
		return e.WithHint("%s; sync_lobby lists the rooms you can use now", hint)
	case "shared_not_allowed":
		return errs.New(RoomNotInScope, "room %q was shared with you after this connection was made, and its consent did not allow new shared rooms", room).
			With("room", room).With("reason", reason).With("role", role).
			WithHint("%s, or allows \"new rooms shared with me\" on it", reconnect)
	case "revoked":
		return errs.New(RoomNotInScope, "room %q was removed from this connection with sync_revoke_access", room).
			With("room", room).With("reason", reason).With("role", role).
			WithHint("only reconnecting adds it back: %s", reconnect)
	}
	return errs.New(RoomNotInScope, "room %q is shared with you (as %s) but this connection was not granted it", room, role).
		With("room", room).With("reason", reason).With("role", role).
		WithHint("%s; or use a room listed by sync_lobby, or create one with sync_create_room", reconnect)
}

// Principal is the authority the session reads with in room: the embodied
// agent there, else an observer (owners with admin scope read everything).
//
// An owner's embodied agent (admin level) reads everything too
// (Principal.ReadsAll): an owner observing reads the whole room, and
// embodying must not read less. That widens only the caller's own reads
// (context, eval, wait); Actor, which acting tools use, drops it, and the
// actions and views the agent registers read with their registrar's
// authority whatever the invoker may read.
func (l *Lobby) Principal(ctx context.Context, s *Session, room string) (*substrate.Principal, string, error) {
	agent := ""
	if s.RoomID == room {
		agent = s.AgentID
	}
	p, level, err := l.principal(ctx, s, room, agent)
	if err != nil {
		return nil, "", err
	}
	// A call that outlives this moment (a wait) asks again at each
	// wake-up, from the session as it is then: a person who left the room,
	// lost it (unshared, sync_revoke_access) or whose connection was
	// revoked hears no more of it. It keeps the agent it started as (the
	// session may embody another meanwhile), for as long as the person
	// may still drive it.
	p.Refresh = l.refresher(s, room, agent)
	return p, level, nil
}

func (l *Lobby) refresher(s *Session, room, agent string) func(context.Context) (*substrate.Principal, error) {
	return func(ctx context.Context) (*substrate.Principal, error) {
		now, err := l.reload(ctx, s)
		if err != nil {
			return nil, err
		}
		p, _, err := l.principal(ctx, now, room, agent)
		if err != nil {
			return nil, err
		}
		p.Refresh = l.refresher(now, room, agent)
		return p, nil
	}
}

// reload reads a session's row again, with the user's rooms and roles as
// they are now. A session whose grant was revoked (and its row purged) is
// errs.Unauthorized.
func (l *Lobby) reload(ctx context.Context, s *Session) (*Session, error) {
	n := &Session{GrantID: s.GrantID, UserID: s.UserID, Username: s.Username, ClientID: s.ClientID, ClientName: s.ClientName}
	var room, agent *string
	var scope string
	var fresh []string
	err := l.db.QueryRow(ctx, `SELECT sess.room_id, sess.agent_id, sess.scope,
			coalesce((SELECT jsonb_object_agg(room_id, access) FROM smcp_user_rooms WHERE user_id = $2), '{}'::jsonb),
			coalesce((SELECT array_agg(room_id) FROM smcp_user_rooms WHERE user_id = $2 AND `+freshSQL("$3")+`), '{}')
		FROM smcp_user_sessions sess WHERE grant_id = $1 AND user_id = $2`, s.GrantID, s.UserID, sinceArg(s.Scope)).
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

// principal is Principal as agent (or observing, with agent "").
func (l *Lobby) principal(ctx context.Context, s *Session, room, agent string) (*substrate.Principal, string, error) {
	level, role, err := l.Access(ctx, s, room)
	if err != nil {
		return nil, "", err
	}
	if agent != "" && levelRank(level) >= levelRank("write") {
		p, err := l.svc.EmbodiedPrincipal(ctx, room, agent, s.UserID)
		if err != nil {
			return nil, "", err
		}
		if level == "admin" {
			p.ReadsAll = true
		}
		// The agent's grants never exceed what the user's role and this
		// connection give now (grantsFor), whatever it was given before or
		// by a token holder: room authority ("*") with the admin level
		// only, communal write grants with a role that has them. The
		// ceiling holds in mutations too, which re-read the grants.
		p.Ceiling = grantCeiling(role, level)
		p.Grants = slices.DeleteFunc(slices.Clone(p.Grants), func(g string) bool { return !p.Ceiling(g) })
		return p, level, nil
	}
	if level == "admin" {
		return substrate.ViewPrincipal(room), level, nil
	}
	p, err := l.observer(ctx, s, room)
	return p, level, err
}

// observer is how s reads room without acting there: an observer that
// keeps the loom's reading permissions (loom_aware, doc_read) of the
// connection's own agent in the room, when it has one, so that a model
// denied the loom does not read it by ceasing to act (the web pages keep
// the person's web agent's the same way). Without one, an observer's
// defaults.
func (l *Lobby) observer(ctx context.Context, s *Session, room string) (*substrate.Principal, error) {
	id := ""
	if s.AgentID != "" && s.RoomID == room {
		id = s.AgentID
	} else {
		base := s.Username + ":" + clientSlug(s.ClientName)
		for n := 1; n <= 9 && id == ""; n++ {
			cand := base
			if n > 1 {
				cand = fmt.Sprintf("%s-%d", base, n)
			}
			owner, exists, err := l.svc.AgentOwner(ctx, room, cand)
			if err != nil {
				return nil, err
			}
			if !exists {
				break
			}
			if owner == s.UserID {
				id = cand
			}
		}
	}
	if id == "" {
		return substrate.ObserverPrincipal(room), nil
	}
	// No grants: read-only, whatever the agent may do when embodied.
	return substrate.ReadOnlyOf(&substrate.Principal{Kind: substrate.KindAgent, RoomID: room, AgentID: id}), nil
}

// summaryReader is the read rule for s in room, for its lobby summary:
// the scopes its principal there (the one its reads use) reads. _shared
// and _messages, which every session that sees the room reads, are
// answered without it, so a room with nothing else costs no principal
// look-up; if the principal cannot be had, only those are counted.
func (l *Lobby) summaryReader(ctx context.Context, s *Session, room string, sum *RoomSummary) func(string) bool {
	var rule func(string) bool
	return func(scope string) bool {
		if scope == substrate.ScopeShared || scope == substrate.ScopeMessages {
			return true
		}
		if rule == nil {
			rule = func(string) bool { return false }
			if p, _, err := l.Principal(ctx, s, room); err == nil {
				rule = sum.Reader(p)
			}
		}
		return rule(scope)
	}
}

// communalGrants are what collaborators' agents may write directly
// (seed 001's example grants).
var communalGrants = []string{substrate.ScopeShared, substrate.ScopeMessages}

// grantsFor is what embodying gives an agent (seed 003 §XI: "set grants
// per user's access level"): room authority ("*") at the admin level (an
// owner whose connection has admin), direct writes to the communal scopes
// for owners and collaborators at the write level, nothing more for
// participants (their own scope; actions are the front door). Observers
// cannot embody, so their agents get none.
func grantsFor(role, level string) []string {
	switch {
	case level == "admin":
		return []string{"*"}
	case levelRank(level) >= levelRank("write") && (role == "owner" || role == "collaborator"):
		return slices.Clone(communalGrants)
	}
	return []string{}
}

// grantCeiling admits the grants grantsFor(role, level) gives and any
// other scope a token holder granted, but never "*" or the communal
// grants beyond what the role and level allow.
func grantCeiling(role, level string) func(string) bool {
	allowed := grantsFor(role, level)
	return func(g string) bool {
		if slices.Contains(allowed, g) || slices.Contains(allowed, "*") {
			return true
		}
		return g != "*" && !slices.Contains(communalGrants, g)
	}
}

// Actor is the embodied agent's authority; acting without one fails with
// the call to make.
func (l *Lobby) Actor(ctx context.Context, s *Session) (*substrate.Principal, error) {
	if s.AgentID == "" || s.RoomID == "" {
		room := s.RoomID
		if room == "" {
			room = "<room id>"
		}
		return nil, errs.New(NotEmbodied, "you are observing: acting needs an embodied agent").
			WithHint(`call sync_embody {"room": %q} first (sync_lobby lists rooms and agents)`, room)
	}
	p, level, err := l.Principal(ctx, s, s.RoomID)
	if err != nil {
		return nil, err
	}
	if p.Kind != substrate.KindAgent {
		return nil, errs.New(errs.Forbidden, "your access to %q is %s, which cannot act", s.RoomID, level).
			WithHint("ask the room's owner for a participant role")
	}
	// Acting carries the agent's authority, never the owner's wider reads.
	p.ReadsAll = false
	return p, nil
}

var slugRE = regexp.MustCompile(`[^a-z0-9-]+`)

func clientSlug(name string) string {
	s := strings.Trim(slugRE.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if s == "" {
		s = "client"
	}
	if len(s) > 32 {
		s = s[:32]
	}
	return s
}

// Embody makes the session act as an agent in room: a new agent
// <username>:<client>, an existing agent of this user, or the agent filling
// a role defined in _shared.roles.
//
// A role's agent is named for the role (seed 003 §XI: "the role IS the
// identity"): whoever fills role "researcher" embodies agent
// "researcher", made on first use, and the next user to fill the role
// after it is vacated (sync_disembody) takes over that same agent with its
// scope and history; the substrate's EmbodyRole records the previous
// occupant in the room's _audit log. Naming a role's agent with agent
// (without role) fills the role too, so an agent that is a role is never
// driven without holding it.
func (l *Lobby) Embody(ctx context.Context, s *Session, room, agent, role string) (*Embodiment, error) {
	level, userRole, err := l.Access(ctx, s, room)
	if err != nil {
		return nil, err
	}
	if levelRank(level) < levelRank("write") {
		// Say which of the two ceilings is too low: the user's role, or
		// what this connection was granted.
		if levelRank(roleCap(userRole)) < levelRank("write") {
			return nil, errs.New(errs.Forbidden, "your role in %q is %s, which can read but not act: observers cannot embody", room, userRole).
				With("room", room).With("reason", "role_below").With("role", userRole).With("access", level).
				WithHint("keep observing with sync_read_context, or ask an owner of %q to make you a participant (they share it with you again with role participant)", room)
		}
		hint := "keep observing with sync_read_context, or the user reconnects the integration and gives " + room + " the write level on the consent screen"
		if s.fresh[room] && s.Scope.Level(room) == "" {
			hint = "keep observing with sync_read_context, or the user reconnects the integration and allows \"new rooms shared with me\" at write (or ticks " + room + " at write)"
		}
		return nil, errs.New(errs.Forbidden, "this connection's access to %q is %s: acting needs write", room, level).
			With("room", room).With("reason", "level_below").With("role", userRole).With("access", level).WithHint("%s", hint)
	}
	if role == "" && agent != "" {
		sums, err := roomSummaries(ctx, l.svc, []string{room}, func(string) bool { return false }) // its roles only
		if err != nil {
			return nil, err
		}
		// An id with ":" is a person's agent, never a role's, whatever
		// _shared.roles says: it is embodied as an agent (yours or not).
		if sum := sums[room]; sum != nil && sum.Roles[agent] != nil && !strings.Contains(agent, ":") {
			role = agent
		}
	}
	if role != "" {
		return l.embodyRole(ctx, s, room, agent, role, grantsFor(userRole, level))
	}
	// Embodying creates an agent for this user or switches to one this
	// user already owns; it never adopts an agent created with a token or
	// by another user, whatever its id.
	id := agent
	if agent != "" {
		owner, exists, err := l.svc.AgentOwner(ctx, room, agent)
		if err != nil {
			return nil, err
		}
		if !exists || owner != s.UserID {
			return nil, errs.New(errs.Forbidden, "agent %q is not yours to embody", agent).
				WithHint("embody without agent to get your own, or pick one marked yours in sync_lobby")
		}
	} else {
		var err error
		if id, err = l.ownAgentID(ctx, room, s.Username+":"+clientSlug(s.ClientName), s.UserID); err != nil {
			return nil, err
		}
	}
	// The substrate checks ownership again under the room lock: an agent
	// made meanwhile by a token or another user is refused, not adopted.
	// Seed 003 §XI: a user's own agent has the role mcp-client and the
	// grants of the user's access level.
	if _, err := l.svc.Embody(ctx, substrate.EmbodyRequest{Room: room, Agent: id, Name: s.Username, Role: "mcp-client", User: s.UserID, Client: s.ClientName,
		Grants: grantsFor(userRole, level)}); err != nil {
		return nil, err
	}
	// Only once the new embodiment holds does the session let go of the
	// old one: a refused embodiment leaves the session as it was.
	if err := l.leaveFor(ctx, s, room, id); err != nil {
		return nil, err
	}
	s.RoomID, s.AgentID = room, id
	if err := l.save(ctx, s); err != nil {
		return nil, err
	}
	return &Embodiment{Embodied: true, Room: room, Agent: id, Role: "mcp-client",
		Next: "read the room with sync_read_context, then act with sync_invoke_action"}, nil
}

// ownAgentID is the id of the user's own agent in room: base
// (<username>:<client>), or when someone else's agent already has it, the
// next free <base>-2, -3…
func (l *Lobby) ownAgentID(ctx context.Context, room, base, userID string) (string, error) {
	for n := 1; n <= 9; n++ {
		id := base
		if n > 1 {
			id = fmt.Sprintf("%s-%d", base, n)
		}
		owner, exists, err := l.svc.AgentOwner(ctx, room, id)
		if err != nil {
			return "", err
		}
		if !exists || owner == userID {
			return id, nil
		}
	}
	return "", errs.New(errs.Forbidden, "agent ids %s…%s-9 are all taken by agents that are not yours", base, base).
		WithHint("embody one of your own agents (sync_lobby marks them yours)")
}

// PersonActor is the authority a signed-in person acts with in a room from
// its web pages: their own agent there, <username>:web, made on first use
// with the role mcp-client and the grants of their access (seed 003 §XI,
// as an MCP embodiment gets them; owners hold the room's authority).
// Observers cannot act. Like PersonPrincipal, a room the person has no
// access to is room_not_found.
func (l *Lobby) PersonActor(ctx context.Context, userID, username, room string) (*substrate.Principal, error) {
	access, err := l.access(ctx, userID, room)
	if err != nil {
		return nil, err
	}
	level := roleCap(access)
	if levelRank(level) < levelRank("write") {
		return nil, errs.New(errs.Forbidden, "your role in %q is %s, which can read but not act", room, access).
			With("room", room).With("role", access).WithHint("ask an owner of %q to make you a participant", room)
	}
	id, err := l.ownAgentID(ctx, room, username+":web", userID)
	if err != nil {
		return nil, err
	}
	grants := grantsFor(access, level)
	p, err := l.svc.EmbodiedPrincipal(ctx, room, id, userID)
	if err != nil || !slices.Equal(p.Grants, grants) {
		// First use, or the person's access changed since: (re)embody,
		// which the room's audit records. The substrate checks ownership
		// again under the room lock.
		if _, err := l.svc.Embody(ctx, substrate.EmbodyRequest{Room: room, Agent: id, Name: username, Role: "mcp-client", User: userID, Client: "web",
			Grants: grants}); err != nil {
			return nil, err
		}
		if p, err = l.svc.EmbodiedPrincipal(ctx, room, id, userID); err != nil {
			return nil, err
		}
	}
	p.Ceiling = grantCeiling(access, level)
	p.Grants = slices.DeleteFunc(slices.Clone(p.Grants), func(g string) bool { return !p.Ceiling(g) })
	p.Person = true
	return p, nil
}

// leaveFor steps out of the session's current agent before it embodies
// agent in room (unless that is the same one).
func (l *Lobby) leaveFor(ctx context.Context, s *Session, room, agent string) error {
	if s.AgentID != "" && (s.RoomID != room || s.AgentID != agent) {
		if _, err := l.Disembody(ctx, s); err != nil && !errs.Is(err, NotEmbodied) {
			return err
		}
	}
	return nil
}

// embodyRole fills role in room: the session embodies the agent named for
// the role (made, resumed, or taken over when vacated; see
// substrate.EmbodyRole).
func (l *Lobby) embodyRole(ctx context.Context, s *Session, room, agent, role string, grants []string) (*Embodiment, error) {
	if agent != "" && agent != role {
		return nil, errs.New(errs.InvalidField, "a role's agent is named for the role: role %q is agent %q, not %q", role, role, agent).
			With("role", role).With("agent", agent).
			WithHint(`call sync_embody {"room": %q, "role": %q} without agent`, room, role)
	}
	res, err := l.svc.EmbodyRole(ctx, substrate.EmbodyRoleRequest{Room: room, Role: role, Name: s.Username, User: s.UserID, Client: s.ClientName, Grants: grants})
	if err != nil {
		return nil, err // the session keeps its embodiment
	}
	if err := l.leaveFor(ctx, s, room, res.ID); err != nil {
		return nil, err
	}
	s.RoomID, s.AgentID = room, res.ID
	if err := l.save(ctx, s); err != nil {
		return nil, err
	}
	next := "read the room with sync_read_context, then act with sync_invoke_action"
	if !res.Created {
		next = "read the room with sync_read_context: the role's agent keeps its state, actions and views from before; then act with sync_invoke_action"
	}
	return &Embodiment{Embodied: true, Room: room, Agent: res.ID, Role: role, TakenOver: res.TakenOver, Bootstrap: res.Bootstrap, Next: next}, nil
}

// Disembody returns the session to observing: the agent goes idle, keeps
// its state, actions and views, and leaves any role it filled.
func (l *Lobby) Disembody(ctx context.Context, s *Session) (*Embodiment, error) {
	if s.AgentID == "" {
		return nil, errs.New(NotEmbodied, "you are not embodied").WithHint("nothing to do; sync_embody to act")
	}
	room, agent := s.RoomID, s.AgentID
	// An agent another user has taken over since (a vacated role filled
	// again) is theirs now: the session only lets go of it.
	if owner, _, err := l.svc.AgentOwner(ctx, room, agent); err != nil {
		return nil, err
	} else if owner != s.UserID {
		s.AgentID = ""
		if err := l.save(ctx, s); err != nil {
			return nil, err
		}
		return &Embodiment{Embodied: false, Room: room, Agent: agent, Status: "taken_over"}, nil
	}
	if err := l.svc.SetIdle(ctx, room, agent); err != nil {
		return nil, err
	}
	admin := substrate.RoomPrincipal(room)
	if read, err := l.svc.ReadState(ctx, admin, room, substrate.ReadQuery{Scope: substrate.ScopeShared, Key: "roles"}); err == nil {
		var roles map[string]map[string]any
		if json.Unmarshal(read.Entries[0].Value, &roles) == nil {
			changed := false
			for _, r := range roles {
				if r["filled_by"] == agent {
					r["filled_by"] = nil
					changed = true
				}
			}
			if changed {
				v := read.Entries[0].Version
				raw, _ := json.Marshal(roles)
				_, _ = l.svc.WriteState(ctx, admin, room, []substrate.Write{{Scope: substrate.ScopeShared, Key: "roles", Value: raw, IfVersion: &v}}, false)
			}
		}
	}
	s.AgentID = ""
	if err := l.save(ctx, s); err != nil {
		return nil, err
	}
	return &Embodiment{Embodied: false, Room: room, Agent: agent, Status: "idle",
		Next: "you observe " + room + " now (it stays focused: calls without room read it); sync_embody {\"room\": \"" + room + "\"} acts again"}, nil
}

// CreateRoomFor creates a room owned by the session's user and widens the
// session's scope to it.
//
// The session then focuses the new room as an observer. A session embodied
// elsewhere first steps out of its agent exactly as Disembody does (the
// agent goes idle, keeps its state and frees its role): an embodiment is
// an agent in one room, and keeping the old agent while focusing a room it
// is not in would make the next call fail with "agent … is not in room".
// Acting in the new room is one explicit sync_embody away, which keeps
// presence a deliberate act (seed 003 §VII).
func (l *Lobby) CreateRoomFor(ctx context.Context, s *Session, id, label string) (*CreatedRoom, error) {
	if !s.Scope.CreateRooms {
		return nil, errs.New(errs.ScopeDenied, "this connection may not create rooms").
			WithHint("the user reconnects the integration and ticks \"may create new rooms\" on the consent screen")
	}
	room, err := l.CreateRoom(ctx, s.UserID, id, label)
	if err != nil {
		return nil, err
	}
	out := &CreatedRoom{Created: true, Room: room, Access: "admin", Next: `sync_embody {"room": "` + room + `"} to act in it`}
	if s.AgentID != "" {
		left, err := l.Disembody(ctx, s)
		if err != nil {
			return nil, err
		}
		out.Left = &Embodied{Room: left.Room, Agent: left.Agent}
	}
	s.Scope.Rooms[room] = "admin"
	s.RoomID = room
	if err := l.save(ctx, s); err != nil {
		return nil, err
	}
	return out, nil
}

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
		sum := sums[r.ID]
		access := minLevel(level, roleCap(r.Access))
		entry := ViewRoom{Room: r.ID, Label: r.Label, Role: r.Access, Access: access, Default: r.Default,
			SharedSince: s.Scope.Level(r.ID) == "", Summary: summarise(sum, access, l.summaryReader(ctx, s, r.ID, sum))}
		if r.Default && defaultRoom == "" {
			defaultRoom = r.ID
		}
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
		out.Rooms = append(out.Rooms, entry)
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
	switch {
	case len(out.Rooms) == 0 && s.Scope.CreateRooms:
		out.Next = "no rooms yet: create one with sync_create_room"
	case len(out.Rooms) == 0:
		out.Next = "no rooms in scope: the user reconnects and ticks rooms on the consent screen"
	case s.AgentID == "":
		out.Next = "observe with sync_read_context {room}, or act: sync_embody {room}"
	default:
		// Reading the lobby leaves nothing: say so, since a model may
		// expect it to (seed 003's lobby is where one goes between rooms).
		out.Next = "you are still acting as " + s.AgentID + " in " + s.RoomID + " (the lobby changes nothing): read with sync_read_context, act with sync_invoke_action; sync_disembody stops acting, sync_embody {room} moves you to another room"
	}
	return out, nil
}

// summarise is a room's state summary as a session at access sees it:
// scope key counts for the scopes it reads observing (communal ones below
// admin, and of those only what the read rule lets it read: reads), open
// roles, last activity.
func summarise(sum *RoomSummary, access string, reads func(scope string) bool) StateSummary {
	out := StateSummary{Keys: map[string]int{}, Messages: sum.Messages, Seq: sum.Seq,
		LastActivity: sum.LastActivity, LastActive: substrate.Ago(time.Since(sum.LastActivity)), OpenRoles: []string{}, Values: sum.Values, Summary: sum.View, SummaryBusy: sum.Busy}
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
