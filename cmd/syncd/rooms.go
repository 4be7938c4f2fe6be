package main

import (
	"context"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/oauth"
)

// roomDirectory shows the lobby's rooms to the authorization server, which
// knows rooms only through this narrow interface.
type roomDirectory struct{ *lobby.Lobby }

func (d roomDirectory) UserRooms(ctx context.Context, userID string) ([]oauth.UserRoom, error) {
	rooms, err := d.Lobby.UserRooms(ctx, userID)
	if err != nil {
		return nil, err
	}
	out := make([]oauth.UserRoom, len(rooms))
	for i, r := range rooms {
		out[i] = oauth.UserRoom{ID: r.ID, Label: r.Label, Access: r.Access, Roles: r.Roles}
		for _, a := range r.Agents {
			out[i].Agents = append(out[i].Agents, oauth.RoomAgent{ID: a.ID, Name: a.Name, Status: a.Status, LastHeartbeat: a.LastHeartbeat})
		}
	}
	return out, nil
}
