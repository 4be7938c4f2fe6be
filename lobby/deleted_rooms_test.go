package lobby_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// a new user's first two rooms, created at once (an MCP client's
// parallel tool calls, two tabs): both memberships ask to be the default
// (is_default = NOT EXISTS …), the one-default index refuses the second
// with a raw unique violation (a 500), and the lobby rolls the room back,
// which now retires its id for good. Made deterministic here: the other
// first membership is held uncommitted while CreateRoom runs.
func TestConcurrentFirstRoomsBothCreated(t *testing.T) {
	f := newFixture(t, "newbie")
	ctx := context.Background()
	if _, err := f.l.CreateRoom(ctx, "user_newbie", "first", ""); err != nil {
		t.Fatal(err)
	}
	// Back to no membership: the state of a user's very first call.
	if _, err := f.db.Exec(ctx, `DELETE FROM smcp_user_rooms WHERE user_id = 'user_newbie'`); err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	// A failure below must still end the held transaction, or closing the
	// pool at cleanup waits for its connection forever.
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := f.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO smcp_user_rooms (user_id, room_id, access, is_default) VALUES ('user_newbie', 'first', 'owner', true)`); err != nil {
				return err
			}
			close(held)
			<-release
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}()
	<-held
	// The fixture's pool of two is taken by the held transaction and
	// CreateRoom: a connection of its own sees CreateRoom queue on the held
	// membership (a transaction sees one snapshot of the activity views, so
	// each look is a statement of its own; on Citus the wait is on a worker:
	// pgtest.LockWaits counts every node).
	watcher, err := pgx.ConnectConfig(ctx, f.db.ConnConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(ctx)
	created := make(chan error, 1)
	go func() {
		_, err := f.l.CreateRoom(ctx, "user_newbie", "second", "")
		created <- err
	}()
	pgtest.Eventually(t, 20*time.Second, func() bool {
		var waiting int
		if err := watcher.QueryRow(ctx, pgtest.LockWaits()).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting >= 1
	}, "CreateRoom to queue on the held membership")
	releaseOnce()
	err = <-created
	wg.Wait()
	if err != nil {
		var retired bool
		_ = f.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM rooms_retired WHERE id = 'second')`).Scan(&retired)
		t.Fatalf("the second of two first rooms: %v (id retired: %v)", err, retired)
	}
}

// With the foreign keys gone, a membership of a room deleted
// other than through the lobby lives until the owner next lists their
// rooms; meanwhile ShareRoom accepts it and writes a new membership (dated,
// so "rooms shared with me" sessions see it) for a room that does not exist.
func TestShareDeletedRoomRefused(t *testing.T) {
	f := newFixture(t, "alice", "bob")
	ctx := context.Background()
	if _, err := f.l.CreateRoom(ctx, "user_alice", "gone", ""); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.DeleteRoom(ctx, substrate.RoomPrincipal("gone"), "gone"); err != nil {
		t.Fatal(err)
	}
	err := f.l.ShareRoom(ctx, "user_alice", "gone", "user_bob", "participant")
	var n int
	_ = f.db.QueryRow(ctx, `SELECT count(*) FROM smcp_user_rooms WHERE user_id = 'user_bob' AND room_id = 'gone'`).Scan(&n)
	if err == nil || n > 0 {
		t.Fatalf("sharing a deleted room: err %v, bob's memberships of it: %d", err, n)
	}
}
