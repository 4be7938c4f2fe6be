package substrate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/ctxtest"
	"github.com/syncsubstrate/sync/substrate/search"
)

// A gate that reads now is evaluated once per reader per quantum
// (Limits.GateQuantum), not at every read: a room full of them no longer
// costs its whole gate budget per read (issue 25 item 4). With the quantum
// off, every read evaluates every gate again.
func TestNowGatesReusedWithinQuantum(t *testing.T) {
	db := pgtest.New(t)
	for _, tc := range []struct {
		quantum time.Duration
		reused  bool
	}{{time.Hour, true}, {-1, false}} {
		svc := substrate.New(db, substrate.Options{Features: testFeatures, Limits: substrate.Limits{GateQuantum: tc.quantum, RoomCostPerSecond: -1}})
		ctx := context.Background()
		id := fmt.Sprintf("quantum%d", tc.quantum)
		room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		admin, _ := svc.Authenticate(ctx, room.Token)
		var writes []substrate.Write
		for i := range 50 {
			writes = append(writes, substrate.Write{Scope: "_shared", Key: fmt.Sprintf("g%02d", i), Value: []byte(`1`),
				Enabled: `now > timestamp("2000-01-01T00:00:00Z")`})
		}
		if _, err := svc.WriteState(ctx, admin, id, writes, true); err != nil {
			t.Fatal(err)
		}
		ag, err := svc.Join(ctx, admin, id, substrate.JoinRequest{ID: "reader", Name: "reader"})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := svc.Authenticate(ctx, ag.Token)
		read := func() (evals uint64) {
			before := svc.Stats().CELEvaluations
			env, err := svc.Context(ctx, p, id, substrate.ContextRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if n := len(env.State["_shared"].(map[string]any)); n != 50 {
				t.Fatalf("quantum %v: %d of 50 now-gated entries shown", tc.quantum, n)
			}
			return svc.Stats().CELEvaluations - before
		}
		if first := read(); first < 50 {
			t.Fatalf("quantum %v: the first read evaluated %d expressions, fewer than its 50 gates", tc.quantum, first)
		}
		second := read()
		if tc.reused && second >= 50 {
			t.Fatalf("a second read within the quantum evaluated %d expressions: the gates' results were not reused", second)
		}
		if !tc.reused && second < 50 {
			t.Fatalf("with the quantum off a second read evaluated %d expressions: now-gates were reused", second)
		}
		svc.Close()
	}
}

// _shared definitions read the loom with their registrant's permissions
// (a denied agent's _shared view must not read what it may not), but
// registrants with the same permissions share one registrar state: ten
// agents' _shared actions in a room of gated entries do not evaluate the
// gates ten times more per read.
func TestSharedRegistrantsShareOneState(t *testing.T) {
	db := pgtest.New(t)
	svc := substrate.New(db, substrate.Options{Features: testFeatures, Limits: substrate.Limits{GateQuantum: -1, RoomCostPerSecond: -1}})
	defer svc.Close()
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "sharers"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	var writes []substrate.Write
	for i := range 50 {
		writes = append(writes, substrate.Write{Scope: "_shared", Key: fmt.Sprintf("g%02d", i), Value: []byte(`1`),
			Enabled: `now > timestamp("2000-01-01T00:00:00Z")`})
	}
	if _, err := svc.WriteState(ctx, admin, "sharers", writes, true); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		ag, err := svc.Join(ctx, admin, "sharers", substrate.JoinRequest{ID: fmt.Sprintf("a%d", i), Name: "a"})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := svc.Authenticate(ctx, ag.Token)
		if _, err := svc.RegisterAction(ctx, p, "sharers", substrate.ActionDef{ID: fmt.Sprintf("act%d", i), Scope: "_shared",
			Enabled: `size(state._shared) > 0`, Writes: []substrate.WriteTemplate{{Scope: "_shared", Key: "k", Value: []byte(`1`)}}}); err != nil {
			t.Fatal(err)
		}
	}
	before := svc.Stats().CELEvaluations
	if _, err := svc.Context(ctx, admin, "sharers", substrate.ContextRequest{}); err != nil {
		t.Fatal(err)
	}
	if n := svc.Stats().CELEvaluations - before; n > 200 {
		t.Fatalf("one read evaluated %d expressions: each _shared registrant's state evaluated the 50 gates again", n)
	}
}

// A caller that makes call after call on one context (a live page, a
// collaborator, a bench client) leaves nothing behind per call: each
// call's use of the room's expression budget ends with the call, not with
// the context. It was released when the context ended, one registration
// per call meanwhile (the soak of issue 32 saw 9,700 goroutines start when
// four live pages closed).
func TestLongLivedContextHoldsNothingPerCall(t *testing.T) {
	db := pgtest.New(t)
	svc := substrate.New(db, substrate.Options{Features: testFeatures})
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	var held atomic.Int64
	ctx := ctxtest.NewCounting(base, &held)
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "longlived"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	if _, err := svc.RegisterAction(ctx, admin, "longlived", substrate.ActionDef{ID: "bump", Scope: "_shared",
		Writes: []substrate.WriteTemplate{{Scope: "_shared", Key: "n", Value: json.RawMessage(`"has(state._shared.n) ? state._shared.n + 1 : 1"`), Expr: true}}}); err != nil {
		t.Fatal(err)
	}
	ag, err := svc.Join(ctx, admin, "longlived", substrate.JoinRequest{ID: "a", Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := svc.Authenticate(ctx, ag.Token)
	const calls = 20
	for range calls {
		if _, err := svc.Context(ctx, p, "longlived", substrate.ContextRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Invoke(ctx, p, "longlived", "bump", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.ReadState(ctx, p, "longlived", substrate.ReadQuery{}); err != nil {
			t.Fatal(err)
		}
		// The other entries that admit at their start.
		if _, err := svc.Eval(ctx, p, "longlived", `has(state._shared.n)`, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := search.Room(ctx, svc, p, "longlived", search.Request{Query: "n", Limit: 5}); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.ListActions(ctx, p, "longlived"); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.ListAgents(ctx, p, "longlived"); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if _, err := svc.Wait(ctx, p, "longlived", `state._shared.n > 1000`, 20*time.Millisecond, substrate.ContextRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := held.Load(); n > 2 {
		t.Fatalf("after %d calls on one context, %d functions wait for it to end: each call left its release of the room's budget behind", 7*calls+3, n)
	}
}
