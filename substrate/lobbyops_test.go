package substrate_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// The operations the lobby reaches rooms and agents through, tested
// against PostgreSQL directly.

// withUsers is a service on a fresh database holding the given user
// accounts (embodied agents reference their user).
func withUsers(t *testing.T, opt substrate.Options, users ...string) *substrate.Service {
	t.Helper()
	db := pgtest.New(t)
	for _, u := range users {
		if _, err := db.Exec(context.Background(), `INSERT INTO smcp_users (id, username, webauthn_handle) VALUES ($1, $2, $3)`, u, u, []byte(u)); err != nil {
			t.Fatal(err)
		}
	}
	if opt.Features == nil {
		opt.Features = testFeatures
	}
	return substrate.New(db, opt)
}

func newRoom(t *testing.T, svc *substrate.Service, id string) *substrate.Principal {
	t.Helper()
	room, err := svc.CreateRoom(context.Background(), substrate.CreateRoomRequest{ID: id, Meta: json.RawMessage(`{"label": "The ` + id + `"}`)})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := svc.Authenticate(context.Background(), room.Token)
	if err != nil {
		t.Fatal(err)
	}
	return admin
}

// Embody makes an agent for a user or resumes the user's own; it never
// adopts a token's agent or another user's, and two users racing for one
// id cannot both get it.
func TestEmbodyOwnership(t *testing.T) {
	svc := withUsers(t, substrate.Options{}, "user_alice", "user_bob", "user_a", "user_b")
	ctx := context.Background()
	admin := newRoom(t, svc, "emb")
	if _, err := svc.Join(ctx, admin, "emb", substrate.JoinRequest{ID: "planted", Name: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Embody(ctx, substrate.EmbodyRequest{Room: "emb", Agent: "planted", Name: "alice", User: "user_alice"}); !errs.Is(err, errs.Forbidden) {
		t.Fatalf("embodying a token's agent: %v", err)
	}
	a, err := svc.Embody(ctx, substrate.EmbodyRequest{Room: "emb", Agent: "alice:c", Name: "alice", User: "user_alice"})
	if err != nil || a.Status != "active" || a.Owner != "user_alice" {
		t.Fatalf("new agent: %+v %v", a, err)
	}
	if owner, exists, err := svc.AgentOwner(ctx, "emb", "alice:c"); err != nil || !exists || owner != "user_alice" {
		t.Fatalf("owner %q %v %v", owner, exists, err)
	}
	if _, err := svc.Embody(ctx, substrate.EmbodyRequest{Room: "emb", Agent: "alice:c", Name: "bob", User: "user_bob"}); !errs.Is(err, errs.Forbidden) {
		t.Fatalf("bob embodying alice's agent: %v", err)
	}
	if err := svc.SetIdle(ctx, "emb", "alice:c"); err != nil {
		t.Fatal(err)
	}
	if a, err := svc.Embody(ctx, substrate.EmbodyRequest{Room: "emb", Agent: "alice:c", Name: "alice", User: "user_alice"}); err != nil || a.Status != "active" {
		t.Fatalf("alice resuming her agent: %+v %v", a, err)
	}

	var wg sync.WaitGroup
	results := make([]error, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, results[i] = svc.Embody(ctx, substrate.EmbodyRequest{Room: "emb", Agent: "contested", Name: "n", User: []string{"user_a", "user_b"}[i%2]})
		}()
	}
	wg.Wait()
	owner, _, _ := svc.AgentOwner(ctx, "emb", "contested")
	for i, err := range results {
		mine := []string{"user_a", "user_b"}[i%2] == owner
		if mine != (err == nil) {
			t.Fatalf("racing embodiment %d (owner %s): %v", i, owner, err)
		}
	}
}

// A user stepping out of an agent is a presence change: waiters on it wake
// at once, not at their safety-net re-check.
func TestSetIdleWakesPresenceWaiters(t *testing.T) {
	svc := withUsers(t, substrate.Options{Wait: substrate.WaitOptions{Recheck: 30 * time.Second}}, "user_alice")
	ctx := context.Background()
	admin := newRoom(t, svc, "idle")
	if _, err := svc.Embody(ctx, substrate.EmbodyRequest{Room: "idle", Agent: "alice:c", Name: "alice", User: "user_alice"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	evals := svc.Stats().CELEvaluations
	go func() {
		res, err := svc.Wait(ctx, admin, "idle", `agents["alice:c"].status == "idle"`, 20*time.Second, substrate.ContextRequest{Depth: "lean", MessagesLimit: 1})
		if err == nil && !res.Triggered {
			err = errs.New(errs.Internal, "not triggered: %v", res)
		}
		done <- err
	}()
	// The waiter is subscribed and has evaluated its condition once (the
	// room has no other expression to evaluate).
	pgtest.Eventually(t, 20*time.Second, func() bool {
		st := svc.Stats()
		return st.OpenWaits >= 1 && st.CELEvaluations > evals
	}, "the waiter to subscribe and evaluate its condition")
	start := time.Now()
	if err := svc.SetIdle(ctx, "idle", "alice:c"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("woken %v after the presence change", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter on presence was not woken by SetIdle (re-check is 30 s)")
	}
}
