package substrate_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// The set-up the group commit tests (groupcommit_test.go,
// groupcommit_pipeline_test.go) share: a room on a service of its own
// over a database of its own (pgtest's pool of 2 connections, so
// invocations queue and share group transactions), a trigger by which
// PostgreSQL refuses some writes, and ways to invoke in a known order.

// refuseBoom makes PostgreSQL refuse a statement that writes "boom"
// ("boom refused"): the refusal comes from the pipeline, after the
// invocation's earlier writes went out.
// One statement each, run one by one: Citus carries a trigger to the
// shards with its statement's whole text.
var refuseBoom = []string{`CREATE FUNCTION gc_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN IF NEW.value = '"boom"'::jsonb THEN RAISE EXCEPTION 'boom refused'; END IF; RETURN NEW; END $$`,
	`CREATE TRIGGER gc_refuse BEFORE INSERT OR UPDATE ON state FOR EACH ROW EXECUTE FUNCTION gc_refuse()`}

// boomAction's increment of n is valid; its second write is what
// refuseBoom refuses, after the increment went out.
var boomAction = substrate.ActionDef{ID: "boom", Writes: []substrate.WriteTemplate{{Key: "n", Increment: json.RawMessage(`1000`)}, {Key: "b", Value: json.RawMessage(`"boom"`)}}}

// refuseDoomAtCommit makes PostgreSQL refuse the COMMIT of a transaction
// that wrote "doom" (a deferred constraint trigger): every statement of it
// was accepted.
var refuseDoomAtCommit = []string{`CREATE FUNCTION gc_doom() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN IF NEW.value = '"doom"'::jsonb THEN RAISE EXCEPTION 'doom refused at commit'; END IF; RETURN NULL; END $$`,
	`CREATE CONSTRAINT TRIGGER gc_doom AFTER INSERT OR UPDATE ON state DEFERRABLE INITIALLY DEFERRED
		FOR EACH ROW EXECUTE FUNCTION gc_doom()`}

// gcRoom is a group commit test's room; pr is its admin (the room
// token's principal).
type gcRoom struct {
	t   *testing.T
	db  *store.DB
	svc *substrate.Service
	ctx context.Context
	id  string
	pr  *substrate.Principal
}

// newGCRoom creates room id, installs trigger (refuseBoom,
// refuseDoomAtCommit) and registers actions as the admin, in that order.
func newGCRoom(t *testing.T, id string, trigger []string, actions ...substrate.ActionDef) *gcRoom {
	t.Helper()
	db := pgtest.New(t)
	svc := substrate.New(db, substrate.Options{Features: testFeatures})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	rm, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	pr, _ := svc.Authenticate(ctx, rm.Token)
	for _, q := range trigger {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range actions {
		if _, err := svc.RegisterAction(ctx, pr, id, a); err != nil {
			t.Fatal(err)
		}
	}
	return &gcRoom{t: t, db: db, svc: svc, ctx: ctx, id: id, pr: pr}
}

// invoke invokes action as the admin; it must succeed.
func (r *gcRoom) invoke(action string, params json.RawMessage) *substrate.InvokeResult {
	r.t.Helper()
	res, err := r.svc.Invoke(r.ctx, r.pr, r.id, action, params)
	if err != nil {
		r.t.Fatal(err)
	}
	return res
}

// join is a new agent's principal.
func (r *gcRoom) join(agentID string) *substrate.Principal {
	r.t.Helper()
	j, err := r.svc.Join(r.ctx, r.pr, r.id, substrate.JoinRequest{ID: agentID, Name: "w"})
	if err != nil {
		r.t.Fatal(err)
	}
	p, _ := r.svc.Authenticate(r.ctx, j.Token)
	return p
}

// lockRoom holds the room's lock from the pool's second connection, so
// that invocations queue behind it, until the returned func commits.
func (r *gcRoom) lockRoom() (release func()) {
	r.t.Helper()
	tctx, tx, err := r.db.Begin(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := tx.Exec(tctx, `SELECT FROM rooms WHERE id = $1 FOR UPDATE`, r.id); err != nil {
		r.t.Fatal(err)
	}
	return func() {
		r.t.Helper()
		if err := tx.Commit(tctx); err != nil {
			r.t.Fatal(err)
		}
	}
}

type gcCall struct {
	action string
	params json.RawMessage
}

// invocations are calls of actions without params.
func invocations(actions ...string) []gcCall {
	calls := make([]gcCall, len(actions))
	for i, a := range actions {
		calls[i] = gcCall{action: a}
	}
	return calls
}

type gcAnswer struct {
	res *substrate.InvokeResult
	err error
}

// queued invokes calls as the admin while the test holds the room lock,
// each once the one before is queued: the first leads and waits for the
// lock, the others queue behind it in order, so (after the first) they
// share the transaction's second round in a known order. The answers are
// in the calls' order.
func (r *gcRoom) queued(calls ...gcCall) []gcAnswer {
	r.t.Helper()
	release := r.lockRoom()
	answers := make([]chan gcAnswer, len(calls))
	for i, c := range calls {
		answers[i] = make(chan gcAnswer, 1)
		go func() {
			res, err := r.svc.Invoke(r.ctx, r.pr, r.id, c.action, c.params)
			answers[i] <- gcAnswer{res, err}
		}()
		r.untilQueued(i)
	}
	release()
	got := make([]gcAnswer, len(calls))
	for i := range answers {
		got[i] = <-answers[i]
	}
	return got
}

// shared is the admin's context read of _shared: served from this
// process's snapshot of the room at the room's committed seq.
func (r *gcRoom) shared() (seq int64, raw string) {
	r.t.Helper()
	env, err := r.svc.Context(r.ctx, r.pr, r.id, substrate.ContextRequest{Only: []string{"state._shared"}, NoActions: true, NoMessages: true})
	if err != nil {
		r.t.Fatal(err)
	}
	b, _ := json.Marshal(env.State["_shared"])
	return env.Context.Seq, string(b)
}

// untilQueued waits until the room's group transaction has a leader that
// took its own invocation and n more callers are queued behind it.
// (Sleeping 150 ms between callers instead let a caller starved on a
// loaded machine queue after the one started next: the order the tests
// assert then differed.)
func (r *gcRoom) untilQueued(n int) {
	r.t.Helper()
	pgtest.Eventually(r.t, 30*time.Second, func() bool { leading, queued := substrate.GroupQueue(r.svc, r.id); return leading && queued == n },
		"%d queued behind a leader in the room's group transaction ([leading, queued] = %v)", n,
		func() any { leading, queued := substrate.GroupQueue(r.svc, r.id); return []any{leading, queued} })
}
