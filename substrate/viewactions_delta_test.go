package substrate_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/substrate"
)

// A view that reads actions changes when an action's enablement does: a
// write its enabled gate reads, its registration, its deletion. A delta
// (a read with since, a wait's wake-up) must show that view, or a model
// waiting in a loop never learns it changed. Views reading agents and
// messages change without a write to anything they name: a delta shows
// them too.
func TestDeltaShowsViewsThatReadActions(t *testing.T) {
	const room = "vd-actions"
	svc, pr, alice := roomWithAgent(t, room, "alice")
	ctx := context.Background()
	if _, err := svc.WriteState(ctx, pr, room, []substrate.Write{
		{Scope: "_shared", Key: "open", Value: json.RawMessage(`false`)},
	}, true); err != nil {
		t.Fatal(err)
	}
	for _, a := range []substrate.ActionDef{
		{ID: "go", Enabled: `state._shared.open == true`, Writes: []substrate.WriteTemplate{{Key: "n", Value: json.RawMessage(`1`)}}},
		{ID: "gone", Writes: []substrate.WriteTemplate{{Key: "n", Value: json.RawMessage(`2`)}}},
		// Availability: an if a write makes hold, a cooldown an
		// invocation starts.
		{ID: "when", If: `state._shared.open == true`, Writes: []substrate.WriteTemplate{{Key: "n", Value: json.RawMessage(`4`)}}},
		{ID: "rest", OnInvoke: &substrate.OnInvoke{Timer: &substrate.Timer{MS: 60000}}, Writes: []substrate.WriteTemplate{{Key: "n", Value: json.RawMessage(`5`)}}},
	} {
		if _, err := svc.RegisterAction(ctx, pr, room, a); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []substrate.ViewDef{
		{ID: "v1", Expr: `actions.go.enabled ? "open" : "closed"`},
		{ID: "v2", Expr: `views.v1 + "!"`},
		{ID: "v3", Expr: `actions.exists(a, a == "go" && actions[a].enabled) ? "some" : "none"`},
		{ID: "v4", Expr: `has(actions.gone) ? "there" : "deleted"`},
		{ID: "v5", Expr: `has(actions.later) ? "registered" : "not yet"`},
		{ID: "v6", Expr: `size(agents)`},
		{ID: "v7", Expr: `messages.count`},
		{ID: "v8", Expr: `"unrelated"`},
	} {
		if _, err := svc.RegisterView(ctx, pr, room, v); err != nil {
			t.Fatal(err)
		}
	}
	// alice's last read, before the changes.
	env, err := svc.Context(ctx, alice, room, substrate.ContextRequest{Depth: "full"})
	if err != nil {
		t.Fatal(err)
	}
	from := env.Context.Seq
	if _, err := svc.WriteState(ctx, pr, room, []substrate.Write{{Scope: "_shared", Key: "open", Value: json.RawMessage(`true`)}}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Invoke(ctx, pr, room, "rest", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.DeleteAction(ctx, pr, room, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.RegisterAction(ctx, pr, room, substrate.ActionDef{ID: "later", Writes: []substrate.WriteTemplate{{Key: "n", Value: json.RawMessage(`3`)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.WriteState(ctx, pr, room, []substrate.Write{{Scope: "_messages", Append: true, Value: json.RawMessage(`{"kind":"chat","body":"hi"}`)}}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Join(ctx, pr, room, substrate.JoinRequest{ID: "bob", Name: "bob"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"v1": `"open"`, "v2": `"open!"`, "v3": `"some"`, "v4": `"deleted"`, "v5": `"registered"`, "v6": `2`, "v7": `2`} // the invocation posted a message too
	checkDelta := func(what string, env *substrate.Envelope) {
		t.Helper()
		if env == nil || env.Context.Delta == nil {
			t.Fatalf("%s: no delta", what)
		}
		for id, w := range want {
			v, ok := env.Views[id]
			got := ""
			if ok {
				b, _ := json.Marshal(v)
				got = string(b)
			}
			if got != w {
				t.Errorf("%s: view %s is %q, want %q", what, id, got, w)
			}
		}
		for id, w := range map[string]bool{"when": true, "rest": false} {
			if a, ok := env.Actions[id]; !ok || a.Available != w {
				t.Errorf("%s: action %s listed %v (%+v), want listed with available %v", what, id, ok, a, w)
			}
		}
	}
	// The wake-up of a wait on the action: a delta since alice's last read.
	res, err := svc.Wait(ctx, alice, room, `actions.go.enabled`, 10*time.Second, substrate.ContextRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Triggered {
		t.Fatalf("the wait on actions.go.enabled timed out")
	}
	checkDelta("the wait's wake-up", res.Context)
	env, err = svc.Context(ctx, alice, room, substrate.ContextRequest{Depth: "full", Since: &from})
	if err != nil {
		t.Fatal(err)
	}
	checkDelta("a read since alice's last read", env)
}
