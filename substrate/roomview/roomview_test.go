package roomview_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/roomview"
)

// The lobby's summaries of rooms, shaped over the core's reads (moved
// from substrate/lobbyops_test.go, then lobby/summary_test.go, with them).

func newSummaryRoom(t *testing.T, svc *substrate.Service, id string) *substrate.Principal {
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

// Summaries apply timers: a roles entry whose timer ran out is no role
// (the lobby read the table directly and listed it).
func TestRoomSummariesApplyTimers(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures})
	ctx := context.Background()
	admin := newSummaryRoom(t, svc, "sum")
	if _, err := svc.Join(ctx, admin, "sum", substrate.JoinRequest{ID: "tok", Name: "Token agent"}); err != nil {
		t.Fatal(err)
	}
	roles := json.RawMessage(`{"lead": {"description": "leads", "filled_by": null}}`)
	// The timer runs long enough for the read before it runs out to come
	// first on a loaded machine (with 200 ms it did not always: the
	// summary then lacked the role as if the product had dropped it).
	const ms = 3000
	earliest := time.Now().Add(ms * time.Millisecond)
	if _, err := svc.WriteState(ctx, admin, "sum", []substrate.Write{
		{Scope: "_shared", Key: "roles", Value: roles, Timer: &substrate.Timer{MS: ms}},
		{Scope: "_shared", Key: "note", Value: json.RawMessage(`1`)},
	}, true); err != nil {
		t.Fatal(err)
	}
	latest := time.Now().Add(ms * time.Millisecond)
	sums, err := roomview.Summaries(ctx, svc, []string{"sum", "missing"})
	if err != nil {
		t.Fatal(err)
	}
	if time.Now().After(earliest) {
		t.Fatalf("the summary before the timer ran out took longer than its %d ms: too slow a machine for this test", ms)
	}
	s := sums["sum"]
	if len(sums) != 1 || s.Label != "The sum" || s.SharedKeys != 2 || len(s.Roles) != 1 || len(s.Agents) != 1 || s.Agents[0].Owner != "" {
		t.Fatalf("summary %+v", s)
	}
	// Stays (and in the tests below): what the summary says once the timer
	// has ended, at a known time, is what this checks.
	time.Sleep(time.Until(latest) + 100*time.Millisecond)
	sums, _ = roomview.Summaries(ctx, svc, []string{"sum"})
	if s := sums["sum"]; len(s.Roles) != 0 || s.SharedKeys != 1 {
		t.Fatalf("after the roles entry expired: roles %v, shared keys %d", s.Roles, s.SharedKeys)
	}
}

// A summary's message total counts the messages everyone sees: it counted
// those gated by enabled (a whisper) and those whose timer ran out, telling
// every member of the room that hidden messages were sent.
func TestRoomSummaryCountsOnlyPublicMessages(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures})
	ctx := context.Background()
	admin := newSummaryRoom(t, svc, "msgs")
	gate := `self == "a"`
	if _, err := svc.WriteState(ctx, admin, "msgs", []substrate.Write{
		{Scope: "_messages", Append: true, Value: json.RawMessage(`{"body": "hello"}`)},
		{Scope: "_messages", Append: true, Value: json.RawMessage(`{"body": "psst"}`), Enabled: gate},
		{Scope: "_messages", Append: true, Value: json.RawMessage(`{"body": "soon gone"}`), Timer: &substrate.Timer{MS: 100}},
	}, true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // Stays: soon gone's 100 ms timer has ended
	sums, err := roomview.Summaries(ctx, svc, []string{"msgs"})
	if err != nil {
		t.Fatal(err)
	}
	if n := sums["msgs"].Messages; n != 1 {
		t.Fatalf("the summary counts %d messages, want 1", n)
	}
}

// A summary view is evaluated alone (with the views it reads), as the
// room principal, and its value follows the room: one reading actions
// sees their enabled as a context read would, and a value shared between
// renders is the state's, never an older one's.
func TestRoomSummaryViewFollowsTheRoom(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	admin := newSummaryRoom(t, svc, "sv")
	if _, err := svc.WriteState(ctx, admin, "sv", []substrate.Write{{Scope: "_shared", Key: "phase", Value: json.RawMessage(`"play"`)}}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.RegisterAction(ctx, admin, "sv", substrate.ActionDef{ID: "move", Enabled: `state._shared.phase == "play"`,
		Writes: []substrate.WriteTemplate{{Scope: "_shared", Key: "moved", Value: json.RawMessage(`true`)}}}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []substrate.ViewDef{
		{ID: "phase", Expr: `state._shared.phase`},
		{ID: roomview.SummaryView, Expr: `views.phase + (actions.move.enabled ? ", moves open" : ", moves closed")`},
	} {
		if _, err := svc.RegisterView(ctx, admin, "sv", v); err != nil {
			t.Fatal(err)
		}
	}
	want := func(what, summary string) {
		t.Helper()
		for range 2 { // the second render takes the first's value
			sums, err := roomview.Summaries(ctx, svc, []string{"sv"})
			if err != nil {
				t.Fatal(err)
			}
			if got := sums["sv"].View; got != summary || sums["sv"].Busy != nil {
				t.Fatalf("%s: summary %v (busy %v), want %q", what, got, sums["sv"].Busy, summary)
			}
		}
		env, err := svc.Context(ctx, admin, "sv", substrate.ContextRequest{})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(env)
		if !strings.Contains(string(raw), `"summary":"`+summary+`"`) {
			t.Fatalf("%s: the room's own read disagrees with the lobby's %q: %s", what, summary, raw)
		}
	}
	want("playing", "play, moves open")
	if _, err := svc.WriteState(ctx, admin, "sv", []substrate.Write{{Scope: "_shared", Key: "phase", Value: json.RawMessage(`"over"`)}}, false); err != nil {
		t.Fatal(err)
	}
	want("over", "over, moves closed")
}

// A timer changes what a room shows without a write: a summary that
// reads a view a timer ends, a view a timer starts, or messages.count
// when a message's timer ends, shows the room after the timer, not the
// value the renders before it shared.
func TestRoomSummaryViewFollowsTimers(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	at := time.Now().Add(3 * time.Second).UTC().Format(time.RFC3339Nano)
	rooms := map[string]struct {
		writes        []substrate.Write
		views         []substrate.ViewDef
		before, after string
	}{
		"st-views": {
			writes: []substrate.Write{{Scope: "_shared", Key: "phase", Value: json.RawMessage(`"play"`)}},
			views: []substrate.ViewDef{
				{ID: "banner", Expr: `"sale on"`, Timer: &substrate.Timer{At: at}},
				{ID: "phase", Expr: `state._shared.phase`, Timer: &substrate.Timer{At: at, Effect: "enable"}},
				{ID: roomview.SummaryView, Expr: `(has(views.banner) ? views.banner : "no banner") + ", " + (has(views.phase) ? views.phase : "no phase")`},
			},
			before: "sale on, no phase", after: "no banner, play",
		},
		"st-messages": {
			writes: []substrate.Write{
				{Scope: "_messages", Append: true, Value: json.RawMessage(`{"kind":"chat","body":"soon gone"}`), Timer: &substrate.Timer{At: at}},
				{Scope: "_messages", Append: true, Value: json.RawMessage(`{"kind":"chat","body":"stays"}`)},
			},
			views:  []substrate.ViewDef{{ID: roomview.SummaryView, Expr: `string(messages.count) + " messages"`}},
			before: "2 messages", after: "1 messages",
		},
	}
	ids := []string{}
	for id, r := range rooms {
		ids = append(ids, id)
		admin := newSummaryRoom(t, svc, id)
		if _, err := svc.WriteState(ctx, admin, id, r.writes, true); err != nil {
			t.Fatal(err)
		}
		for _, v := range r.views {
			if _, err := svc.RegisterView(ctx, admin, id, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := func(when string, after bool) {
		t.Helper()
		for range 2 { // the second render takes what the first shared
			sums, err := roomview.Summaries(ctx, svc, ids)
			if err != nil {
				t.Fatal(err)
			}
			for id, r := range rooms {
				w := r.before
				if after {
					w = r.after
				}
				if got := sums[id].View; got != w || sums[id].Busy != nil {
					t.Errorf("%s, %s: summary %v (busy %v), want %q", id, when, got, sums[id].Busy, w)
				}
			}
		}
	}
	want("before the timers", false)
	end, _ := time.Parse(time.RFC3339Nano, at)
	if time.Until(end) < 200*time.Millisecond {
		t.Fatal("the renders before the timers ended too close to them for this test's margin")
	}
	time.Sleep(time.Until(end) + 100*time.Millisecond)
	want("after the timers", true)
}

func TestAgo(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "just now", 9 * time.Second: "just now", 42 * time.Second: "42s ago", 3*time.Minute + 59*time.Second: "3m ago",
		2 * time.Hour: "2h ago", 47 * time.Hour: "47h ago", 5 * 24 * time.Hour: "5d ago",
	} {
		if got := roomview.Ago(d); got != want {
			t.Errorf("Ago(%v) = %q, want %q", d, got, want)
		}
	}
}
