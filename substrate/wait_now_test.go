package substrate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// nowCase is a room whose wait's outcome turns on now reaching a moment:
// set writes what the room needs given the moment (an RFC 3339 time).
type nowCase struct {
	room, cond string
	set        func(t *testing.T, svc *substrate.Service, pr *substrate.Principal, at string)
	// late is how late the wait may wake after the moment.
	late time.Duration
	// sameSecond: the wait begins and the moment comes in one second
	// (one quantum of the memo of gates on now, Limits.GateQuantum).
	sameSecond bool
}

func nowCases() []nowCase {
	ctx := context.Background()
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const exact = 400 * time.Millisecond
	return []nowCase{
		{room: "now-cond", late: exact, cond: `now > timestamp("%s")`},
		{room: "now-cond-state", late: exact, cond: `now - timestamp(state._shared.started) >= duration("1500ms")`,
			set: func(t *testing.T, svc *substrate.Service, pr *substrate.Principal, at string) {
				started, _ := time.Parse(time.RFC3339Nano, at)
				_, err := svc.WriteState(ctx, pr, "now-cond-state", []substrate.Write{{Scope: "_shared", Key: "started",
					Value: json.RawMessage(fmt.Sprintf("%q", started.Add(-1500*time.Millisecond).Format(time.RFC3339Nano)))}}, true)
				must(t, err)
			}},
		{room: "now-view", late: exact, cond: `views.overdue == true`,
			set: func(t *testing.T, svc *substrate.Service, pr *substrate.Principal, at string) {
				_, err := svc.WriteState(ctx, pr, "now-view", []substrate.Write{{Scope: "_shared", Key: "deadline", Value: json.RawMessage(fmt.Sprintf("%q", at))}}, true)
				must(t, err)
				_, err = svc.RegisterView(ctx, pr, "now-view", substrate.ViewDef{ID: "overdue", Expr: `timestamp(state._shared.deadline) < now`})
				must(t, err)
			}},
		{room: "now-view-gate", late: exact, cond: `has(views.shown)`,
			set: func(t *testing.T, svc *substrate.Service, pr *substrate.Principal, at string) {
				_, err := svc.RegisterView(ctx, pr, "now-view-gate", substrate.ViewDef{ID: "shown", Expr: `1`, Enabled: fmt.Sprintf(`now >= timestamp(%q)`, at)})
				must(t, err)
			}},
		{room: "now-entry-gate", late: exact, cond: `has(state._shared.secret)`,
			set: func(t *testing.T, svc *substrate.Service, pr *substrate.Principal, at string) {
				_, err := svc.WriteState(ctx, pr, "now-entry-gate", []substrate.Write{{Scope: "_shared", Key: "secret", Value: json.RawMessage(`1`),
					Enabled: fmt.Sprintf(`now > timestamp(%q)`, at)}}, true)
				must(t, err)
			}},
		{room: "now-entry-gate-quantum", late: exact, cond: `has(state._shared.secret)`, sameSecond: true,
			set: func(t *testing.T, svc *substrate.Service, pr *substrate.Principal, at string) {
				_, err := svc.WriteState(ctx, pr, "now-entry-gate-quantum", []substrate.Write{{Scope: "_shared", Key: "secret", Value: json.RawMessage(`1`),
					Enabled: fmt.Sprintf(`now > timestamp(%q)`, at)}}, true)
				must(t, err)
			}},
		{room: "now-entry-gate-computed", late: exact, cond: `"secret" in state["_sh" + "ared"]`,
			set: func(t *testing.T, svc *substrate.Service, pr *substrate.Principal, at string) {
				_, err := svc.WriteState(ctx, pr, "now-entry-gate-computed", []substrate.Write{{Scope: "_shared", Key: "secret", Value: json.RawMessage(`1`),
					Enabled: fmt.Sprintf(`now > timestamp(%q)`, at)}}, true)
				must(t, err)
			}},
		{room: "now-entry-gate-self", late: exact, cond: `has(state.self.secret)`,
			set: func(t *testing.T, svc *substrate.Service, pr *substrate.Principal, at string) {
				_, err := svc.WriteState(ctx, pr, "now-entry-gate-self", []substrate.Write{{Scope: "alice", Key: "secret", Value: json.RawMessage(`1`),
					Enabled: fmt.Sprintf(`now > timestamp(%q)`, at)}}, true)
				must(t, err)
			}},
		{room: "now-message-gate", late: exact, cond: `messages.count == 1`,
			set: func(t *testing.T, svc *substrate.Service, pr *substrate.Principal, at string) {
				_, err := svc.WriteState(ctx, pr, "now-message-gate", []substrate.Write{{Scope: "_messages", Append: true,
					Value: json.RawMessage(`{"kind":"chat","body":"later"}`), Enabled: fmt.Sprintf(`now > timestamp(%q)`, at)}}, true)
				must(t, err)
			}},
		{room: "now-action-gate", late: exact, cond: `has(actions.go) && actions.go.enabled`,
			set: func(t *testing.T, svc *substrate.Service, pr *substrate.Principal, at string) {
				_, err := svc.RegisterAction(ctx, pr, "now-action-gate", substrate.ActionDef{ID: "go", Enabled: fmt.Sprintf(`now > timestamp(%q)`, at),
					Writes: []substrate.WriteTemplate{{Key: "k", Value: json.RawMessage(`1`)}}})
				must(t, err)
			}},
		{room: "now-agent-gate", late: exact, cond: `has(agents.bob)`,
			set: func(t *testing.T, svc *substrate.Service, pr *substrate.Principal, at string) {
				_, err := svc.Join(ctx, pr, "now-agent-gate", substrate.JoinRequest{ID: "bob", Name: "bob", Enabled: fmt.Sprintf(`now > timestamp(%q)`, at)})
				must(t, err)
			}},
		// A use of now that cannot be solved: the cadence (1 s) wakes it.
		// int(now) is whole seconds: it passes int(at) in the second after.
		{room: "now-opaque", late: time.Second + exact, cond: `int(now) > int(timestamp("%s"))`},
	}
}

// A wait whose outcome depends on now (its condition, or a view, entry,
// message, action or agent gate it reads through) wakes when now reaches
// the moment, not at its safety-net re-check (a minute here, past the
// waits' timeout).
func TestWaitWakesWhenNowReachesTheMoment(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures, Wait: substrate.WaitOptions{Recheck: time.Minute}})
	t.Cleanup(svc.Close)
	for _, c := range nowCases() {
		t.Run(c.room, func(t *testing.T) {
			t.Parallel()
			pr, alice := joinedRoom(t, svc, c.room, "alice")
			at := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
			if c.sameSecond {
				// The moment 600 ms after a whole second, the wait's
				// first read (and its gate's result) before it.
				at = time.Now().Truncate(time.Second).Add(time.Second + 600*time.Millisecond)
				time.Sleep(time.Until(at.Add(-500 * time.Millisecond)))
			}
			stamp := at.UTC().Format(time.RFC3339Nano)
			cond := c.cond
			if c.set != nil {
				c.set(t, svc, pr, stamp)
			} else {
				cond = fmt.Sprintf(c.cond, stamp)
			}
			res, err := svc.Wait(context.Background(), alice, c.room, cond, 10*time.Second, substrate.ContextRequest{NoContext: true})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Triggered {
				t.Fatalf("%s: the wait timed out after %d ms though the moment came after 1.5 s", cond, res.ElapsedMS)
			}
			late := time.Since(at)
			t.Logf("%s: woke %v after the moment", c.room, late.Round(time.Millisecond))
			if late < 0 || late > c.late {
				t.Errorf("%s: the wait woke %v after the moment, want within %v", cond, late, c.late)
			}
		})
	}
}

// Waits whose outcome does not depend on now re-check no more often for
// the room's uses of now they do not read: a wait on a scope in a room
// whose views, actions, agents, messages and entries of another scope read
// now in ways no moment can be found for, or whose entry gate on now in
// the scope opens far in the future.
func TestWaitNotOnNowDoesNotRecheck(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures, Wait: substrate.WaitOptions{Recheck: time.Minute}})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	pr, alice := joinedRoom(t, svc, "now-not", "alice")
	opaque := `now.getSeconds() >= 0`
	if _, err := svc.RegisterView(ctx, pr, "now-not", substrate.ViewDef{ID: "clock", Expr: opaque}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.RegisterAction(ctx, pr, "now-not", substrate.ActionDef{ID: "go", Enabled: opaque,
		Writes: []substrate.WriteTemplate{{Key: "k", Value: json.RawMessage(`1`)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Join(ctx, pr, "now-not", substrate.JoinRequest{ID: "bob", Name: "bob", Enabled: opaque}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.WriteState(ctx, pr, "now-not", []substrate.Write{
		{Scope: "_messages", Append: true, Value: json.RawMessage(`{"kind":"chat","body":"x"}`), Enabled: opaque},
		{Scope: "_shared", Key: "later", Value: json.RawMessage(`1`), Enabled: `now > timestamp("2099-01-01T00:00:00Z")`},
		{Scope: "_notes", Key: "tick", Value: json.RawMessage(`1`), Enabled: opaque},
	}, true); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sleeps []time.Duration
	substrate.SetWaitSleeps(svc, func(roomID string, next time.Duration) {
		mu.Lock()
		sleeps = append(sleeps, next)
		mu.Unlock()
	})
	res, err := svc.Wait(ctx, alice, "now-not", `state._shared.?done.orValue(false) == true`, 3*time.Second, substrate.ContextRequest{NoContext: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Timeout {
		t.Fatalf("the wait did not time out: %+v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the wait's checks let it sleep %v", sleeps)
	if len(sleeps) == 0 {
		t.Fatal("no check heard")
	}
	for _, d := range sleeps {
		if d < 30*time.Second {
			t.Errorf("a wait on state alone was let sleep only %v (re-checks %v): it re-checks for uses of now it does not read", d, sleeps)
		}
	}
}

// Many waits on now, directly, through a view and through an entry gate,
// on a pool of two connections: all wake at the moment.
func TestManyWaitsOnNowTinyPool(t *testing.T) {
	svc := substrate.New(pgtest.NewPool(t, 2), substrate.Options{Features: testFeatures, Wait: substrate.WaitOptions{Recheck: time.Minute}})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	pr, _ := joinedRoom(t, svc, "now-many", "a0")
	const n = 60
	agents := make([]*substrate.Principal, n)
	for i := range agents {
		ag, err := svc.Join(ctx, pr, "now-many", substrate.JoinRequest{ID: fmt.Sprintf("w%02d", i), Name: "w"})
		if err != nil {
			t.Fatal(err)
		}
		if agents[i], err = svc.Authenticate(ctx, ag.Token); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Now().Add(2 * time.Second)
	stamp := at.UTC().Format(time.RFC3339Nano)
	if _, err := svc.RegisterView(ctx, pr, "now-many", substrate.ViewDef{ID: "due", Expr: fmt.Sprintf(`now > timestamp(%q)`, stamp)}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.WriteState(ctx, pr, "now-many", []substrate.Write{{Scope: "_shared", Key: "open", Value: json.RawMessage(`true`),
		Enabled: fmt.Sprintf(`now > timestamp(%q)`, stamp)}}, true); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for i, a := range agents {
		cond := [3]string{fmt.Sprintf(`now > timestamp(%q)`, stamp), `views.due`, `state._shared.?open.orValue(false)`}[i%3]
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := svc.Wait(ctx, a, "now-many", cond, 15*time.Second, substrate.ContextRequest{})
			switch {
			case err != nil:
				errc <- err
			case !res.Triggered:
				errc <- fmt.Errorf("%s: timed out after %d ms", cond, res.ElapsedMS)
			case time.Since(at) > time.Second:
				errc <- fmt.Errorf("%s: woke %v after the moment", cond, time.Since(at))
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	t.Logf("%d waits answered %v after the moment", n, time.Since(at).Round(time.Millisecond))
}
