// Package lobby is users' side of rooms: which rooms a user belongs to and
// with what access (smcp_user_rooms), MCP sessions (smcp_user_sessions),
// observing and embodying. It sits between the OAuth/MCP layers and the
// substrate, whose rooms and agents it reaches only through the
// substrate's operations.
package lobby

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/syncsubstrate/sync/lobby/roomdir"
	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/roomview"
)

// Lobby is the users' view of rooms.
type Lobby struct {
	db  *store.DB
	svc *substrate.Service
}

// New returns a Lobby over db and the substrate.
func New(db *store.DB, svc *substrate.Service) *Lobby { return &Lobby{db: db, svc: svc} }

// Room is a room as listed for a user (roomdir.Room: the authorization
// server lists rooms too, without importing the lobby).
type Room = roomdir.Room

// Agent is an agent's presence, as shown next to a room (roomdir.Agent).
type Agent = roomdir.Agent

// UserRooms lists the rooms a user belongs to, with their agents and
// defined roles.
func (l *Lobby) UserRooms(ctx context.Context, userID string) ([]Room, error) {
	rooms, _, err := l.userRooms(ctx, userID, nil)
	return rooms, err
}

// userRooms is UserRooms with the substrate's summary of each room, its
// summary view evaluated for the rooms view admits (nil: none; a Room
// does not show it).
func (l *Lobby) userRooms(ctx context.Context, userID string, view func(room string) bool) ([]Room, map[string]*roomview.Summary, error) {
	rows, err := l.db.Query(ctx, `SELECT room_id, coalesce(label, ''), access, is_default FROM smcp_user_rooms
		WHERE user_id = $1 ORDER BY created_at, room_id`, userID)
	if err != nil {
		return nil, nil, err
	}
	var out []Room
	var ids []string
	for rows.Next() {
		var rm Room
		if err := rows.Scan(&rm.ID, &rm.Label, &rm.Access, &rm.Default); err != nil {
			rows.Close()
			return nil, nil, err
		}
		out = append(out, rm)
		ids = append(ids, rm.ID)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if view == nil {
		view = func(string) bool { return false }
	}
	sums, err := roomview.SummariesViewing(ctx, l.svc, ids, view)
	if err != nil {
		return nil, nil, err
	}
	// With the default room gone (left, deleted), the earliest room is
	// the default until the user picks another.
	hasDefault := false
	for _, rm := range out {
		hasDefault = hasDefault || (rm.Default && sums[rm.ID] != nil)
	}
	if !hasDefault {
		for i := range out {
			if sums[out[i].ID] != nil {
				out[i].Default = true
				break
			}
		}
	}
	kept := out[:0]
	var gone []string
	for _, rm := range out {
		sum := sums[rm.ID]
		if sum == nil {
			gone = append(gone, rm.ID) // deleted other than through the lobby
			continue
		}
		if rm.Label == "" {
			rm.Label = sum.Label
		}
		rm.Roles = sum.RoleIDs()
		st := summarise(sum, "", func(string) bool { return false }) // its keys are not shown
		rm.OpenRoles, rm.LastActive = st.OpenRoles, st.LastActive
		for _, a := range sum.Agents {
			if a.Gated && rm.Access != "owner" {
				continue // shown per reader in the room (see View)
			}
			ag := Agent{ID: a.ID, Name: a.Name, Status: a.Status, LastHeartbeat: a.LastHeartbeat,
				LastSeen: a.LastSeen, Client: a.Client, IdleForS: a.IdleForS}
			if a.WaitingOn != nil {
				ag.WaitingOn = *a.WaitingOn
			}
			rm.Agents = append(rm.Agents, ag)
		}
		kept = append(kept, rm)
	}
	for _, id := range gone {
		if err := l.forgetRoom(ctx, id); err != nil {
			return nil, nil, err
		}
	}
	return kept, sums, nil
}

// AddMember gives a user access to a room (owner when they created it).
// It keeps the rule every membership change keeps (setMember): the room
// keeps an owner.
func (l *Lobby) AddMember(ctx context.Context, userID, roomID, access, label, invitedBy string) error {
	return l.setMember(ctx, roomID, userID, access, label, invitedBy, nil)
}

// setMember is the one way a membership is made, changed or removed: it
// gives userID the role access in roomID (with label and invitedBy, as
// AddMember), or removes the membership when access is "". may, when
// set, decides whether the change is the caller's to make, from the
// room's owners (sorted) as they are under the lock.
//
// It keeps the rule every path keeps: a room that has an owner keeps
// one. The room's owner rows are locked for the check and the change,
// in user order so that any two changes lock alike and cannot deadlock:
// two owners demoting each other (or leaving) at once are serialised,
// and the second finds the first's change made (PostgreSQL re-reads a
// locked row once its locker commits: a demoted owner is no longer
// among the owners) and is refused with last_owner. A single
// conditional statement would not do: under READ COMMITTED both would
// see the other still an owner.
func (l *Lobby) setMember(ctx context.Context, roomID, userID, access, label, invitedBy string, may func(owners []string) error) error {
	return l.db.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT user_id FROM smcp_user_rooms WHERE room_id = $1 AND access = 'owner' ORDER BY user_id FOR UPDATE`, roomID)
		if err != nil {
			return err
		}
		owners, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if may != nil {
			if err := may(owners); err != nil {
				return err
			}
		}
		if access != "owner" && len(owners) == 1 && owners[0] == userID {
			return errs.New(errs.LastOwner, "%q would be left with no owner: you are its only one", roomID).With("room", roomID).
				WithHint("make another member an owner first (share the room with them as owner), then change your own role or leave; or delete the room")
		}
		if access == "" {
			tag, err := tx.Exec(ctx, `DELETE FROM smcp_user_rooms WHERE user_id = $1 AND room_id = $2`, userID, roomID)
			if err == nil && tag.RowsAffected() == 0 {
				return errs.New(errs.RoomNotFound, "you have no room %q", roomID).WithHint("pick one of your rooms")
			}
			return err
		}
		return upsertMember(ctx, tx, userID, roomID, access, label, invitedBy)
	})
}

// upsertMember writes a membership in tx.
func upsertMember(ctx context.Context, tx pgx.Tx, userID, roomID, access, label, invitedBy string) error {
	var lbl, by *string
	if label != "" {
		lbl = &label
	}
	if invitedBy != "" {
		by = &invitedBy
	}
	// A new membership, or a changed role, is dated (shared_at) and
	// attributed to whoever shared it: open sessions whose consent allows
	// "new rooms shared with me" reach it from their next call.
	// A user's first room is their default room (until they pick
	// another; see userRooms for when it is gone). The new date is the
	// proposed row's (its default, now()): Citus refuses now() inside a
	// CASE of an upsert.
	// (A SELECT, not VALUES: Citus refuses a subquery in VALUES.)
	const upsert = `INSERT INTO smcp_user_rooms (user_id, room_id, access, label, invited_by, is_default)
		SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::boolean AND NOT EXISTS (SELECT 1 FROM smcp_user_rooms WHERE user_id = $1::text)
		ON CONFLICT (user_id, room_id) DO UPDATE SET access = EXCLUDED.access, label = coalesce(EXCLUDED.label, smcp_user_rooms.label),
			shared_at = CASE WHEN smcp_user_rooms.access <> EXCLUDED.access THEN EXCLUDED.shared_at ELSE smcp_user_rooms.shared_at END,
			invited_by = CASE WHEN smcp_user_rooms.access <> EXCLUDED.access THEN EXCLUDED.invited_by ELSE smcp_user_rooms.invited_by END`
	// The first try runs in a savepoint: its failure must not abort the
	// transaction that holds the owners' locks.
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err = sp.Exec(ctx, upsert, userID, roomID, access, lbl, by, true); err == nil {
		return sp.Commit(ctx)
	}
	_ = sp.Rollback(ctx)
	if !store.IsUniqueViolation(err) {
		return err
	}
	// Another first room of the user's took the default meanwhile
	// (the one-default index): this one is not the default.
	_, err = tx.Exec(ctx, upsert, userID, roomID, access, lbl, by, false)
	return err
}

// SetDefault makes room the user's default room: the one sync_lobby
// focuses when a session has none. The user must belong to it.
func (l *Lobby) SetDefault(ctx context.Context, userID, roomID string) error {
	// Two statements: the one-default index is checked row by row.
	return l.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE smcp_user_rooms SET is_default = false WHERE user_id = $1 AND is_default AND room_id <> $2`, userID, roomID); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE smcp_user_rooms SET is_default = true WHERE user_id = $1 AND room_id = $2`, userID, roomID)
		if err == nil && tag.RowsAffected() == 0 {
			return errs.New(errs.RoomNotFound, "you have no room %q", roomID).With("room", roomID).WithHint("make one of the rooms sync_lobby lists your default")
		}
		return err
	})
}

// Access levels of users in rooms.
var accessLevels = []string{"owner", "collaborator", "participant", "observer"}

func (l *Lobby) access(ctx context.Context, userID, roomID string) (string, error) {
	var a string
	err := l.db.QueryRow(ctx, `SELECT access FROM smcp_user_rooms WHERE user_id = $1 AND room_id = $2`, userID, roomID).Scan(&a)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", errs.New(errs.RoomNotFound, "you have no room %q", roomID).WithHint("pick one of your rooms")
	}
	return a, err
}

// PersonPrincipal is the authority a signed-in person reads a room with on
// its web pages: an owner holds the room's authority, as with its room
// token (reading everything, the history and replay included); a person
// who may act reads as their own web agent once they have acted
// (PersonActor), so the page shows what that agent may do; anyone else
// observes, as an observing MCP session does. It returns room_not_found
// for a room the person has no access to, so pages say nothing of rooms
// that are not theirs. Reading makes nothing.
func (l *Lobby) PersonPrincipal(ctx context.Context, userID, username, roomID string) (*substrate.Principal, string, error) {
	access, err := l.access(ctx, userID, roomID)
	if err != nil {
		return nil, "", err
	}
	switch level := roleCap(access); {
	case access == "owner":
		return substrate.RoomPrincipal(roomID), access, nil
	case levelRank(level) >= levelRank("write"):
		id, err := l.ownAgentID(ctx, roomID, username+":web", userID)
		if err != nil {
			return nil, "", err
		}
		if owner, exists, err := l.svc.AgentOwner(ctx, roomID, id); err != nil {
			return nil, "", err
		} else if exists && owner == userID {
			p, err := l.svc.EmbodiedPrincipal(ctx, roomID, id, userID)
			if err != nil {
				return nil, "", err
			}
			p.Ceiling = grantCeiling(access, level)
			p.Grants = slices.DeleteFunc(slices.Clone(p.Grants), func(g string) bool { return !p.Ceiling(g) })
			return p, access, nil
		}
	}
	return substrate.ObserverPrincipal(roomID), access, nil
}

// CreateRoom makes a room owned by the user.
func (l *Lobby) CreateRoom(ctx context.Context, userID, roomID, label string) (string, error) {
	meta, _ := json.Marshal(map[string]string{"label": label})
	if label == "" {
		meta = nil
	}
	room, err := l.svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: roomID, Meta: meta})
	if err != nil {
		return "", err
	}
	if err := l.AddMember(ctx, userID, room.ID, "owner", label, ""); err != nil {
		// The id is retired with the room: a retry needs another id,
		// which the refusal says.
		_ = l.svc.DeleteRoom(context.WithoutCancel(ctx), substrate.RoomPrincipal(room.ID), room.ID)
		return "", err
	}
	return room.ID, nil
}

// ClaimRoom makes the user an owner of a room created over REST, proven by
// its room token. With rotate, the room token is replaced as well (the
// pasted one may have been seen by others: it stops working) and the new
// one is returned, to be shown once. The rotation is audited as the
// room token's (by _room): the lobby knows the claimer's id, not the
// username its web agent is named for; the claim itself is the
// membership it adds.
func (l *Lobby) ClaimRoom(ctx context.Context, userID, roomID, roomToken string, rotate bool) (newToken string, err error) {
	p, err := l.svc.AuthenticateIn(ctx, roomID, roomToken)
	if err != nil || p.Kind != substrate.KindRoom || p.RoomID != roomID {
		return "", errs.New(errs.Forbidden, "that is not the room token of %q", roomID).WithHint("paste the room_… token returned when the room was created")
	}
	if err := l.AddMember(ctx, userID, roomID, "owner", "", ""); err != nil {
		return "", err
	}
	if !rotate {
		return "", nil
	}
	rt, err := l.svc.RotateToken(ctx, p, roomID, "room")
	if err != nil {
		return "", err
	}
	return rt.Token, nil
}

// RotateToken replaces a room's room or view token (which), for one of its
// owners, who act as their web agent (the audit names them); the new token
// is returned, to be shown once.
func (l *Lobby) RotateToken(ctx context.Context, userID, username, roomID, which string) (*substrate.RotatedToken, error) {
	if a, err := l.access(ctx, userID, roomID); err != nil {
		return nil, err
	} else if a != "owner" {
		return nil, errs.New(errs.Forbidden, "only an owner of %q can rotate its tokens", roomID).WithHint("ask an owner")
	}
	if which != "room" && which != "view" {
		// Refused before PersonActor, which may make the owner's agent.
		return nil, errs.New(errs.InvalidField, "which is %q: rotate the \"room\" token or the \"view\" token", which).With("field", "which").
			WithHint("pick the room token or the view token")
	}
	p, err := l.PersonActor(ctx, userID, username, roomID)
	if err != nil {
		return nil, err
	}
	return l.svc.RotateToken(ctx, p, roomID, which)
}

// ShareRoom gives another user (otherID, resolved from a username by the
// account's owner, oauth) access to a room; owners only. An owner may
// change her own role, or another owner's, as long as the room keeps an
// owner (setMember): else last_owner.
func (l *Lobby) ShareRoom(ctx context.Context, userID, roomID, otherID, access string) error {
	if a, err := l.access(ctx, userID, roomID); err != nil {
		return err
	} else if a != "owner" {
		return notOwner(roomID)
	}
	if !contains(accessLevels, access) {
		return errs.New(errs.InvalidField, "role %q is not one of %v", access, accessLevels).WithHint("choose owner, collaborator, participant or observer")
	}
	// A membership may outlive its room (no foreign key; see forgetRoom):
	// share only a room that still exists.
	if _, err := l.svc.GetRoom(ctx, substrate.RoomPrincipal(roomID), roomID); errs.Is(err, errs.RoomNotFound) {
		if ferr := l.forgetRoom(ctx, roomID); ferr != nil {
			return ferr
		}
		return errs.New(errs.RoomNotFound, "you have no room %q", roomID).WithHint("pick one of your rooms")
	} else if err != nil {
		return err
	}
	// The sharer is an owner still, under the lock: one demoted
	// meanwhile by another owner shares no more.
	return l.setMember(ctx, roomID, otherID, access, "", userID, func(owners []string) error {
		if !slices.Contains(owners, userID) {
			return notOwner(roomID)
		}
		return nil
	})
}

func notOwner(roomID string) error {
	return errs.New(errs.Forbidden, "only an owner of %q can share it", roomID).WithHint("ask an owner")
}

// LeaveRoom removes the user from a room; a room's last owner is refused
// (last_owner): she makes someone else an owner first, or deletes it.
func (l *Lobby) LeaveRoom(ctx context.Context, userID, roomID string) error {
	if _, err := l.access(ctx, userID, roomID); err != nil {
		return err
	}
	return l.setMember(ctx, roomID, userID, "", "", "", nil)
}

// DeleteRoom deletes a room the user owns, with everything in it.
func (l *Lobby) DeleteRoom(ctx context.Context, userID, roomID string) error {
	if a, err := l.access(ctx, userID, roomID); err != nil {
		return err
	} else if a != "owner" {
		return errs.New(errs.Forbidden, "only an owner can delete %q", roomID).WithHint("leave the room instead")
	}
	if err := l.svc.DeleteRoom(ctx, substrate.RoomPrincipal(roomID), roomID); err != nil {
		return err
	}
	return l.forgetRoom(ctx, roomID)
}

// forgetRoom removes what the lobby keeps about a deleted room: every
// membership, and the focus of sessions on it. Foreign keys onto rooms did
// this until the lobby's tables were made ready to be reference tables of a
// distributed database (migration 0012; README, "Scaling out"). A room
// deleted other than through the lobby is forgotten lazily (userRooms);
// its id is retired, so what remains can never reach another room.
func (l *Lobby) forgetRoom(ctx context.Context, roomID string) error {
	return l.db.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM smcp_user_rooms WHERE room_id = $1`, roomID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE smcp_user_sessions SET room_id = NULL, agent_id = NULL, updated_at = now() WHERE room_id = $1`, roomID)
		return err
	})
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
