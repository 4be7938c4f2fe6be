package mcp_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// An MCP session row lives as long as its grant, and a registered client
// nobody used for 30 days (and that holds no live token) is purged.
func TestPurgeEndedSessionsAndUnusedClients(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	ctx := context.Background()
	alice := signup(t, srv, "alice")
	var grants [2]string
	var clients [2]string
	for i := range grants {
		tok := mintToken(t, srv, alice, nil)
		clients[i] = tok["client_id"].(string)
		// One call creates the grant's session row.
		if res := postMCP(t, srv.base, tok["access_token"].(string), []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sync_lobby","arguments":{}}}`)); res.StatusCode != http.StatusOK {
			t.Fatalf("tool call %d: %d", i, res.StatusCode)
		}
	}
	if err := srv.db.QueryRow(ctx, `SELECT array_agg(grant_id ORDER BY created_at) FROM smcp_user_sessions`).Scan(&grants); err != nil {
		t.Fatal(err)
	}
	// The first grant is revoked; both sessions and both clients are old.
	var aliceID string
	_ = srv.db.QueryRow(ctx, `SELECT id FROM smcp_users WHERE username = 'alice'`).Scan(&aliceID)
	if err := srv.auth.RevokeGrant(ctx, aliceID, grants[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.db.Exec(ctx, `UPDATE smcp_user_sessions SET updated_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.db.Exec(ctx, `UPDATE smcp_oauth_clients SET created_at = now() - interval '31 days', last_used_at = now() - interval '31 days'`); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.db.Exec(ctx, `INSERT INTO smcp_oauth_clients (id, name, redirect_uris, auth_method, created_at) VALUES
		('client_stale', 'never used', '{http://localhost:1/cb}', 'none', now() - interval '40 days'),
		('client_fresh', 'just registered', '{http://localhost:1/cb}', 'none', now())`); err != nil {
		t.Fatal(err)
	}

	n, err := srv.lobby.PurgeSessions(ctx, srv.auth)
	if err != nil || n != 1 {
		t.Fatalf("purged %d sessions (%v), want the revoked grant's 1", n, err)
	}
	var left []string
	_ = srv.db.QueryRow(ctx, `SELECT array_agg(grant_id) FROM smcp_user_sessions`).Scan(&left)
	if len(left) != 1 || left[0] != grants[1] {
		t.Fatalf("sessions left %v, want only the live grant %s", left, grants[1])
	}
	if _, purged, err := srv.auth.Purge(ctx); err != nil || purged != 2 {
		t.Fatalf("purged %d clients (%v), want 2: the never-used one and the revoked grant's", purged, err)
	}
	var kept []string
	_ = srv.db.QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM smcp_oauth_clients`).Scan(&kept)
	if len(kept) != 2 || !(kept[0] == "client_fresh" && kept[1] == clients[1] || kept[1] == "client_fresh" && kept[0] == clients[1]) {
		t.Fatalf("clients kept %v, want client_fresh and the live grant's %s", kept, clients[1])
	}
}
