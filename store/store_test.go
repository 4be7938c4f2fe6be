package store_test

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// Several processes starting at once each run Migrate; the advisory lock
// must make every migration apply exactly once and every caller succeed.
func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	db := pgtest.New(t) // already migrated once by the template
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = db.Migrate(ctx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent migrate: %v", err)
		}
	}
	var n, files int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT version) FROM schema_migrations`).Scan(&n, &files); err != nil {
		t.Fatal(err)
	}
	if n != files || n == 0 {
		t.Fatalf("schema_migrations has %d rows for %d versions", n, files)
	}
}

func TestMigrateFromEmptyDatabase(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `DROP TABLE smcp_user_sessions, smcp_server_keys, smcp_user_rooms, smcp_consents, smcp_oauth_tokens, smcp_oauth_clients, smcp_recovery_codes, smcp_invites, smcp_sessions, smcp_webauthn_sessions, smcp_credentials, smcp_users, state, agents, rooms, schema_migrations`); err != nil {
		t.Fatal(err)
	}
	applied, err := db.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if applied == 0 {
		t.Fatal("no migration applied to an empty database")
	}
	if _, err := db.Pool.Exec(ctx, `SELECT room_id, scope, key, version FROM state LIMIT 0`); err != nil {
		t.Fatalf("state table missing after migrate: %v", err)
	}
	again, err := db.Migrate(ctx)
	if err != nil || again != 0 {
		t.Fatalf("second migrate applied %d (err %v), want 0", again, err)
	}
}

func TestInTxRollsBackOnError(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	boom := errBoom{}
	err := db.InTx(ctx, func(tx store.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO rooms (id, token_hash, view_token_hash) VALUES ('r', 'a', 'b')`); err != nil {
			return err
		}
		return boom
	})
	if err != boom {
		t.Fatalf("InTx returned %v, want the callback's error", err)
	}
	var n int
	_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM rooms`).Scan(&n)
	if n != 0 {
		t.Fatalf("rolled-back insert is visible: %d rooms", n)
	}
}

type errBoom struct{}

func (errBoom) Error() string { return "boom" }
