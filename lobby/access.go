// A session's access to a room, and the principals it reads and acts as.

package lobby

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/roomview"
)

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
func (l *Lobby) summaryReader(ctx context.Context, s *Session, room string, sum *roomview.Summary) func(string) bool {
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
