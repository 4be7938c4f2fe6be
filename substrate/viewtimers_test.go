package substrate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// A timer ends or starts views, actions, state entries and messages
// without a write: the room's seq stays, and every cache of what a read
// evaluated (the views memo of a state, the builds shared by readers of
// one authority, the lobby's public summary) must still show what the
// room shows after the timer, not what it showed before. Each room below
// isolates one way a view's value depends on a timer; every reader (an
// agent, the room token, the view token) and the lobby's PublicView read
// it twice before the timer (the second read takes what the first
// cached) and twice after.
func TestTimersEndCachedViewValues(t *testing.T) {
	// The timers end on the real clock (that is what this checks: nothing
	// writes), so the reads before them must finish in time. A machine too
	// busy for the margin gets the whole test again, on a fresh database,
	// with a wider one, rather than a failure that proves nothing.
	for _, margin := range []time.Duration{5 * time.Second, 20 * time.Second, 60 * time.Second} {
		if !timersEndCachedViewValues(t, margin) {
			return
		}
		t.Logf("the reads before the timers outran a margin of %v: again with a wider one", margin)
	}
	t.Fatal("the reads before the timers outran every margin: too slow a machine for this test")
}

// timersEndCachedViewValues is one attempt with timers margin from now;
// tooSlow reports that the reads before them did not finish in time, and
// then nothing they saw is reported.
func timersEndCachedViewValues(t *testing.T, margin time.Duration) (tooSlow bool) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures})
	defer svc.Close()
	ctx := context.Background()
	// One moment for every timer: the reads before it all happen before
	// any timer runs out, and one sleep covers them all.
	at := time.Now().Add(margin)
	end := func() *substrate.Timer { return &substrate.Timer{At: at.UTC().Format(time.RFC3339Nano)} }
	start := func() *substrate.Timer {
		return &substrate.Timer{At: at.UTC().Format(time.RFC3339Nano), Effect: "enable"}
	}
	type room struct {
		id      string
		views   []substrate.ViewDef
		writes  []substrate.Write
		actions []substrate.ActionDef
		// before and after are the views' values as JSON ("" for absent).
		before, after map[string]string
		// actBefore and actAfter: whether each action is listed.
		actBefore, actAfter map[string]bool
	}
	n := substrate.Write{Scope: "_shared", Key: "n", Value: json.RawMessage(`1`)}
	rooms := []room{{
		id:     "vt-dep-ends",
		writes: []substrate.Write{n},
		views: []substrate.ViewDef{
			{ID: "v1", Expr: `state._shared.n`, Timer: end()},
			{ID: "v2", Expr: `has(views.v1) ? views.v1 * 10 : -1`},
		},
		before: map[string]string{"v1": `1`, "v2": `10`},
		after:  map[string]string{"v1": ``, "v2": `-1`},
	}, {
		id:     "vt-dep-starts",
		writes: []substrate.Write{n},
		views: []substrate.ViewDef{
			{ID: "v1", Expr: `state._shared.n`, Timer: start()},
			{ID: "v2", Expr: `has(views.v1) ? views.v1 * 10 : -1`},
		},
		before: map[string]string{"v1": ``, "v2": `-1`},
		after:  map[string]string{"v1": `1`, "v2": `10`},
	}, {
		// The reverse: the view that reads another has the timer.
		id:     "vt-reader-timed",
		writes: []substrate.Write{n},
		views: []substrate.ViewDef{
			{ID: "v1", Expr: `state._shared.n`},
			{ID: "v2", Expr: `views.v1 * 10`, Timer: end()},
			{ID: "v3", Expr: `views.v1 + 5`, Timer: start()},
		},
		before: map[string]string{"v1": `1`, "v2": `10`, "v3": ``},
		after:  map[string]string{"v1": `1`, "v2": ``, "v3": `6`},
	}, {
		// Entries: one a timer ends, one it starts; a view reads each,
		// and a view reads that view.
		id: "vt-entries",
		writes: []substrate.Write{
			{Scope: "_shared", Key: "brief", Value: json.RawMessage(`"soon gone"`), Timer: end()},
			{Scope: "_shared", Key: "later", Value: json.RawMessage(`"here"`), Timer: start()},
		},
		views: []substrate.ViewDef{
			{ID: "v1", Expr: `has(state._shared.brief) ? state._shared.brief : "gone"`},
			{ID: "v2", Expr: `views.v1 + "!"`},
			{ID: "v3", Expr: `has(state._shared.later) ? state._shared.later : "not yet"`},
		},
		before: map[string]string{"v1": `"soon gone"`, "v2": `"soon gone!"`, "v3": `"not yet"`},
		after:  map[string]string{"v1": `"gone"`, "v2": `"gone!"`, "v3": `"here"`},
	}, {
		// An entry in an agent's private scope, read by that agent's view.
		id: "vt-private-entry",
		writes: []substrate.Write{
			{Scope: "alice", Key: "note", Value: json.RawMessage(`"mine"`), Timer: end()},
		},
		views: []substrate.ViewDef{
			{ID: "v1", Scope: "alice", Expr: `has(state.self.note) ? state.self.note : "none"`},
			{ID: "v2", Expr: `views.v1 + "?"`},
		},
		before: map[string]string{"v1": `"mine"`, "v2": `"mine?"`},
		after:  map[string]string{"v1": `"none"`, "v2": `"none?"`},
	}, {
		id:     "vt-actions",
		writes: []substrate.Write{n},
		actions: []substrate.ActionDef{
			{ID: "go", Timer: end(), Writes: []substrate.WriteTemplate{{Key: "n", Value: json.RawMessage(`2`)}}},
			{ID: "late", Timer: start(), Writes: []substrate.WriteTemplate{{Key: "n", Value: json.RawMessage(`3`)}}},
		},
		views: []substrate.ViewDef{
			{ID: "v1", Expr: `has(actions.go) ? "go open" : "go closed"`},
			{ID: "v2", Expr: `has(actions.late) ? "late open" : "late closed"`},
		},
		before:    map[string]string{"v1": `"go open"`, "v2": `"late closed"`},
		after:     map[string]string{"v1": `"go closed"`, "v2": `"late open"`},
		actBefore: map[string]bool{"go": true, "late": false},
		actAfter:  map[string]bool{"go": false, "late": true},
	}, {
		// A message a timer ends leaves messages.count: a view of it
		// follows, though no write made a new seq.
		id: "vt-messages",
		writes: []substrate.Write{
			{Scope: "_messages", Append: true, Value: json.RawMessage(`{"kind":"chat","body":"soon gone"}`), Timer: end()},
			{Scope: "_messages", Append: true, Value: json.RawMessage(`{"kind":"chat","body":"stays"}`)},
		},
		views: []substrate.ViewDef{
			{ID: "v1", Expr: `messages.count`},
			{ID: "v2", Expr: `views.v1 * 10`},
		},
		before: map[string]string{"v1": `2`, "v2": `20`},
		after:  map[string]string{"v1": `1`, "v2": `10`},
	}}

	type readers struct {
		names []string
		ps    map[string]*substrate.Principal
	}
	rs := map[string]readers{}
	for _, r := range rooms {
		made, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: r.id})
		if err != nil {
			t.Fatal(err)
		}
		pr, _ := svc.Authenticate(ctx, made.Token)
		pv, _ := svc.Authenticate(ctx, made.ViewToken)
		j, err := svc.Join(ctx, pr, r.id, substrate.JoinRequest{ID: "alice", Name: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		pa, _ := svc.Authenticate(ctx, j.Token)
		rs[r.id] = readers{names: []string{"agent", "room token", "view token"},
			ps: map[string]*substrate.Principal{"agent": pa, "room token": pr, "view token": pv}}
		if _, err := svc.WriteState(ctx, pr, r.id, r.writes, true); err != nil {
			t.Fatalf("%s: %v", r.id, err)
		}
		for _, a := range r.actions {
			if _, err := svc.RegisterAction(ctx, pr, r.id, a); err != nil {
				t.Fatalf("%s: %v", r.id, err)
			}
		}
		for _, v := range r.views {
			p := pr
			if v.Scope == "alice" {
				p = pa
			}
			if _, err := svc.RegisterView(ctx, p, r.id, v); err != nil {
				t.Fatalf("%s: %v", r.id, err)
			}
		}
	}
	asJSON := func(v any, ok bool) string {
		if !ok {
			return ""
		}
		b, _ := json.Marshal(v)
		return string(b)
	}
	// Before the timers, what the reads saw is reported only once they are
	// known to have finished in time.
	var early []string
	buffering := true
	errorf := func(format string, args ...any) {
		t.Helper()
		if buffering {
			early = append(early, fmt.Sprintf(format, args...))
			return
		}
		t.Errorf(format, args...)
	}
	check := func(when string, r room, want map[string]string, acts map[string]bool) {
		t.Helper()
		for pass := 1; pass <= 2; pass++ {
			for _, who := range rs[r.id].names {
				env, err := svc.Context(ctx, rs[r.id].ps[who], r.id, substrate.ContextRequest{Depth: "full", MessagesLimit: 10})
				if err != nil {
					t.Fatalf("%s %s: %v", r.id, who, err)
				}
				for id, w := range want {
					v, ok := env.Views[id]
					if got := asJSON(v, ok); got != w {
						errorf("%s, %s, read %d by the %s: view %s is %q, want %q", r.id, when, pass, who, id, got, w)
					}
				}
				for id, w := range acts {
					if _, ok := env.Actions[id]; ok != w {
						errorf("%s, %s, read %d by the %s: action %s listed %v, want %v", r.id, when, pass, who, id, ok, w)
					}
				}
			}
			heads, err := svc.RoomHeads(ctx, []string{r.id})
			if err != nil {
				t.Fatal(err)
			}
			rv, err := svc.RoomView(ctx, heads[r.id])
			if err != nil {
				t.Fatal(err)
			}
			for id, w := range want {
				v, ok, err := rv.PublicView(ctx, id)
				if err != nil {
					t.Fatalf("%s: PublicView(%s): %v", r.id, id, err)
				}
				if got := asJSON(v, ok); got != w {
					errorf("%s, %s, lobby render %d: PublicView(%s) is %q, want %q", r.id, when, pass, id, got, w)
				}
			}
		}
	}
	seqs := map[string]int64{}
	for _, r := range rooms {
		check("before the timers", r, r.before, r.actBefore)
		heads, err := svc.RoomHeads(ctx, []string{r.id})
		if err != nil {
			t.Fatal(err)
		}
		seqs[r.id] = heads[r.id].Seq
	}
	if left := time.Until(at); left < 200*time.Millisecond {
		return true
	}
	buffering = false
	for _, e := range early {
		t.Error(e)
	}
	// Stays: the timers end on the real clock at a known time, and the
	// reads after are what this checks (a poll would be such a read).
	time.Sleep(time.Until(at) + 100*time.Millisecond)
	// A delta since the last read before the timers (a model's next read
	// of its room, which carried that seq) shows each view whose value
	// the timer changed, with its new value: views reading actions the
	// timers ended or started too.
	for _, r := range rooms {
		since := seqs[r.id]
		env, err := svc.Context(ctx, rs[r.id].ps["agent"], r.id, substrate.ContextRequest{Depth: "full", MessagesLimit: 10, Since: &since})
		if err != nil {
			t.Fatalf("%s: %v", r.id, err)
		}
		for id, w := range r.after {
			if w == "" || w == r.before[id] {
				continue
			}
			v, ok := env.Views[id]
			if got := asJSON(v, ok); got != w {
				t.Errorf("%s, a delta since seq %d after the timers: view %s is %q, want %q", r.id, seqs[r.id], id, got, w)
			}
		}
	}
	for _, r := range rooms {
		check("after the timers", r, r.after, r.actAfter)
	}
	return false
}

// A timer of ticks ends (or starts) its item with a write to the key it
// ticks on: the write makes a new seq, and the snapshot a mutation
// derives from its own writes must carry the ticks it ran down on other
// rows (a view, an action, an entry), or every cache built on it keeps
// them.
func TestTickTimersEndCachedViewValues(t *testing.T) {
	ctx := context.Background()
	const room = "vt-ticks"
	svc, pr, pv, pa := roomWithViewer(t, room, "alice")
	ticks := func(effect string) *substrate.Timer {
		return &substrate.Timer{Ticks: 2, TickOn: "_shared.turn", Effect: effect}
	}
	if _, err := svc.WriteState(ctx, pr, room, []substrate.Write{
		{Scope: "_shared", Key: "n", Value: json.RawMessage(`1`)},
		{Scope: "_shared", Key: "brief", Value: json.RawMessage(`"soon gone"`), Timer: ticks("")},
	}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.RegisterAction(ctx, pr, room, substrate.ActionDef{ID: "go", Timer: ticks(""),
		Writes: []substrate.WriteTemplate{{Key: "n", Value: json.RawMessage(`2`)}}}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []substrate.ViewDef{
		{ID: "v1", Expr: `state._shared.n`, Timer: ticks("")},
		{ID: "v2", Expr: `has(views.v1) ? views.v1 * 10 : -1`},
		{ID: "v3", Expr: `state._shared.n + 5`, Timer: ticks("enable")},
		{ID: "v4", Expr: `has(views.v3) ? views.v3 * 10 : -1`},
		{ID: "v5", Expr: `has(state._shared.brief) ? state._shared.brief : "gone"`},
		{ID: "v6", Expr: `has(actions.go) ? "go open" : "go closed"`},
	} {
		if _, err := svc.RegisterView(ctx, pr, room, v); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string, want map[string]string) {
		t.Helper()
		for pass := 1; pass <= 2; pass++ {
			for who, p := range map[string]*substrate.Principal{"agent": pa, "room token": pr, "view token": pv} {
				env, err := svc.Context(ctx, p, room, substrate.ContextRequest{Depth: "full", MessagesLimit: 10})
				if err != nil {
					t.Fatal(err)
				}
				for id, w := range want {
					got := ""
					if v, ok := env.Views[id]; ok {
						b, _ := json.Marshal(v)
						got = string(b)
					}
					if got != w {
						t.Errorf("%s, read %d by the %s: view %s is %q, want %q", when, pass, who, id, got, w)
					}
				}
			}
			heads, err := svc.RoomHeads(ctx, []string{room})
			if err != nil {
				t.Fatal(err)
			}
			rv, err := svc.RoomView(ctx, heads[room])
			if err != nil {
				t.Fatal(err)
			}
			for id, w := range want {
				got := ""
				if v, ok, err := rv.PublicView(ctx, id); err != nil {
					t.Fatal(err)
				} else if ok {
					b, _ := json.Marshal(v)
					got = string(b)
				}
				if got != w {
					t.Errorf("%s, lobby render %d: PublicView(%s) is %q, want %q", when, pass, id, got, w)
				}
			}
		}
	}
	turn := func(n int) {
		t.Helper()
		if _, err := svc.WriteState(ctx, pr, room, []substrate.Write{{Scope: "_shared", Key: "turn", Value: json.RawMessage(fmt.Sprint(n))}}, false); err != nil {
			t.Fatal(err)
		}
	}
	before := map[string]string{"v1": `1`, "v2": `10`, "v3": ``, "v4": `-1`, "v5": `"soon gone"`, "v6": `"go open"`}
	check("before any turn", before)
	turn(1)
	check("after one of two ticks", before)
	turn(2)
	check("after the last tick", map[string]string{"v1": ``, "v2": `-1`, "v3": `6`, "v4": `60`, "v5": `"gone"`, "v6": `"go closed"`})
}
