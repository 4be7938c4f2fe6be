package lobby

import (
	"context"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// The operations below are what one MCP tool does, each in one call, so
// the tool stays a thin adapter (decode, one operation, encode) and the
// steps and rules inside live here, where another surface can reach them.
// words is the calling surface's vocabulary, carried by the principal the
// substrate reads with.

// ReadContext is observing a room: its context as the session reads it
// (the embodied agent there, else an observer), after which the room is
// the session's focus.
func (l *Lobby) ReadContext(ctx context.Context, s *Session, room string, q substrate.ContextRequest, words errs.Words) (*substrate.Envelope, error) {
	p, _, err := l.Principal(ctx, s, room)
	if err != nil {
		return nil, err
	}
	p.Words = words
	env, err := l.svc.Context(ctx, p, room, q)
	if err != nil {
		return nil, err
	}
	return env, l.Focus(ctx, s, room)
}

// EmbodyAndRead embodies (see Embody) and, unless q is nil, returns with
// the embodiment the room's context as the agent now sees it, shaped by q,
// so the next step needs no further call. frame, if set, is how many bytes
// of q's budget the caller's result around the context takes, known only
// once the embodiment is.
func (l *Lobby) EmbodyAndRead(ctx context.Context, s *Session, room, agent, role string, q *substrate.ContextRequest,
	frame func(*Embodiment) int, words errs.Words) (*Embodiment, *substrate.Envelope, error) {
	e, err := l.Embody(ctx, s, room, agent, role)
	if err != nil || q == nil {
		return e, nil, err
	}
	p, err := l.Actor(ctx, s)
	if err != nil {
		return e, nil, err
	}
	p.Words = words
	if frame != nil {
		q.Reserve = frame(e)
	}
	env, err := l.svc.Context(ctx, p, s.RoomID, *q)
	return e, env, err
}

// DisembodyToLobby disembodies (see Disembody) and returns the lobby to
// pick from next.
func (l *Lobby) DisembodyToLobby(ctx context.Context, s *Session) (*Embodiment, *View, error) {
	e, err := l.Disembody(ctx, s)
	if err != nil {
		return nil, nil, err
	}
	v, err := l.View(ctx, s)
	return e, v, err
}

// ShareRoomByName gives the user named username a role in room (default
// participant) from a session: the connection must hold admin on the room
// (and the user be an owner, as ShareRoom requires). userID resolves a
// username (the accounts are the authorization server's); it is asked
// only once the session may share, so a caller without the right learns
// nothing of who exists. It returns the role given.
func (l *Lobby) ShareRoomByName(ctx context.Context, s *Session, room, username, role string,
	userID func(ctx context.Context, username string) (string, error)) (string, error) {
	if role == "" {
		role = "participant"
	}
	if level, held, err := l.Access(ctx, s, room); err != nil {
		return "", err
	} else if held != "" && held != "owner" {
		return "", errs.New(errs.Forbidden, "only an owner of %q can share it; your role there is %s", room, held).With("role", held).
			WithHint("ask an owner of %q to share it (sync_lobby shows your rooms and roles)", room)
	} else if level != "admin" {
		return "", errs.New(errs.Forbidden, "sharing %q needs admin access in this connection", room).WithHint("the user reconnects with admin access to the room, or shares it on the account page")
	}
	other, err := userID(ctx, username)
	if err != nil {
		return "", err
	}
	if err := l.ShareRoom(ctx, s.UserID, room, other, role); errs.Is(err, errs.LastOwner) {
		// The way out in tool calls: deleting a room is the account
		// page's (no tool deletes one).
		return "", errs.From(err).WithHint(`%q must keep an owner: first make another member an owner (sync_share_room {"room": %q, "username": "<their username>", "role": "owner"}), then change your own role; or the user deletes the room on the account page`, room, room)
	} else if err != nil {
		return "", err
	}
	return role, nil
}
