package substrate_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// A message's timer ends or starts it without a write: no notification
// wakes a wait, and messages.count, messages.unread and the views reading
// them change all the same. A wait on them must wake when the timer runs
// out, not at its safety-net re-check (a minute here).
func TestWaitWakesWhenAMessageTimerRunsOut(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures, Wait: substrate.WaitOptions{Recheck: time.Minute}})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	cases := []struct {
		room, cond string
		effect     string // the message's timer: "" ends it, "enable" starts it
		views      []substrate.ViewDef
	}{
		{room: "mt-count-ends", cond: `messages.count == 0`},
		{room: "mt-count-starts", cond: `messages.count == 1`, effect: "enable"},
		{room: "mt-unread-ends", cond: `messages.unread == 0`},
		{room: "mt-unread-starts", cond: `messages.unread == 1`, effect: "enable"},
		{room: "mt-view-ends", cond: `views.n == 0`, views: []substrate.ViewDef{{ID: "n", Expr: `messages.count`}}},
		{room: "mt-view-starts", cond: `views.n == 1`, effect: "enable", views: []substrate.ViewDef{{ID: "n", Expr: `messages.count`}}},
	}
	for _, c := range cases {
		t.Run(c.room, func(t *testing.T) {
			t.Parallel()
			pr, alice := joinedRoom(t, svc, c.room, "alice")
			for _, v := range c.views {
				if _, err := svc.RegisterView(ctx, pr, c.room, v); err != nil {
					t.Fatal(err)
				}
			}
			at := time.Now().Add(1500 * time.Millisecond)
			if _, err := svc.WriteState(ctx, pr, c.room, []substrate.Write{{Scope: "_messages", Append: true,
				Value: json.RawMessage(`{"kind":"chat","body":"timed"}`), Timer: &substrate.Timer{At: at.UTC().Format(time.RFC3339Nano), Effect: c.effect}}}, true); err != nil {
				t.Fatal(err)
			}
			res, err := svc.Wait(ctx, alice, c.room, c.cond, 20*time.Second, substrate.ContextRequest{NoContext: true})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Triggered {
				t.Fatalf("%s: the wait timed out after %d ms though the message's timer ran out after 1.5 s", c.cond, res.ElapsedMS)
			}
			if late := time.Since(at); late > 2*time.Second {
				t.Errorf("%s: the wait woke %v after the message's timer ran out, want at once", c.cond, late)
			}
		})
	}
}
