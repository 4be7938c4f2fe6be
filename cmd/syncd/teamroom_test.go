package main

import (
	"context"
	"testing"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/lobby/teamroom"
	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate"
)

// teamRoomFor builds the real-size room (lobby/teamroom) in the server's
// database for owner, a person already signed up (browserSignedUp's
// alice), shared with raj, whose account the test adds as a row (signing
// up a second person is another browser's work). It is built by a service
// of its own, as another process of the server would write: the server
// sees it through the database and its notifications.
func teamRoomFor(t *testing.T, dbURL, owner string) *teamroom.Room {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, dbURL, store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ownerID string
	if err := db.QueryRow(ctx, `SELECT id FROM smcp_users WHERE username = $1`, owner).Scan(&ownerID); err != nil {
		t.Fatalf("the account of %s: %v", owner, err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO smcp_users (id, username, webauthn_handle) VALUES ('user_raj', 'raj', 'raj') ON CONFLICT DO NOTHING`); err != nil {
		t.Fatal(err)
	}
	svc := substrate.New(db, substrate.Options{Features: features()})
	defer svc.Close()
	room, err := teamroom.Build(ctx, svc, lobby.New(db, svc), teamroom.Options{Owner: teamroom.Person{UserID: ownerID, Username: owner}})
	if err != nil {
		t.Fatal(err)
	}
	return room
}
