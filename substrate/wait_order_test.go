package substrate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// An agent is shown waiting before its wait's first read, so another
// agent that writes as soon as it sees the status may write before that
// read: the condition then holds at the first read. The wake-up's delta
// must hold that write. Its start was the first read's seq, the write's
// own, so an agent that never read the room woke with "changed": {} and
// without the entry its condition was about (TestWait in substrate/rest
// flaked on it under load). The hook runs the write exactly there. REST's
// GET /wait and MCP's sync_wait are this call with their arguments
// (this package's tests do not import a surface: rest would attach
// salience to every test of the package).
func TestWaitDeltaHoldsAWriteMadeOnSeeingTheWaiter(t *testing.T) {
	svc, admin, waiter := roomWithAgent(t, "shown", "waiter")
	ctx := context.Background()

	var once sync.Once
	var wrote int64
	substrate.SetShownWaiting(svc, func(roomID, agentID string) {
		once.Do(func() {
			w, err := svc.WriteState(ctx, admin, "shown", []substrate.Write{{Scope: "_shared", Key: "go", Value: json.RawMessage(`true`)}}, false)
			if err != nil {
				t.Errorf("write on seeing the waiter: %v", err)
				return
			}
			wrote = w.Seq
		})
	})
	res, err := svc.Wait(ctx, waiter, "shown", `state._shared.?go.orValue(false)`, 5*time.Second, substrate.ContextRequest{Depth: "lean", MessagesLimit: 20})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Triggered || res.Context == nil || res.Context.Context.Delta == nil {
		t.Fatalf("wait: %+v", res)
	}
	d := res.Context.Context.Delta
	shared, _ := json.Marshal(res.Context.State["_shared"])
	if wrote == 0 || d.Changed["_shared.go"] != wrote || string(shared) != `{"go":true}` {
		t.Fatalf("the wake-up's delta (from %d) lacks the write at seq %d that satisfied the condition: changed %v, state %v", d.FromSeq, wrote, d.Changed, res.Context.State)
	}
}

// A delta exists to cost less than reading the room again. When most of
// what the reader sees changed since its last read, it repeated nearly
// the whole room plus a list of every changed key, larger than the room
// itself (a 500-key room: 52,136 bytes as a delta, 43,404 whole). Then the
// answer is the whole context, which says so; a room where a few entries
// changed still gets a delta.
func TestDeltaOfMostOfTheRoomIsTheWholeContext(t *testing.T) {
	svc, admin, reader := roomWithAgent(t, "most", "reader")
	ctx := context.Background()
	write := func(from, to int, v string) int64 {
		var ws []substrate.Write
		for i := from; i < to; i++ {
			ws = append(ws, substrate.Write{Scope: "_shared", Key: fmt.Sprintf("k%02d", i), Value: json.RawMessage(`"` + v + `"`)})
		}
		w, err := svc.WriteState(ctx, admin, "most", ws, false)
		if err != nil {
			t.Fatal(err)
		}
		return w.Seq
	}
	lean := substrate.ContextRequest{Depth: "lean", MessagesLimit: 20}
	read := func() int64 {
		env, err := svc.Context(ctx, reader, "most", lean)
		if err != nil {
			t.Fatal(err)
		}
		return env.Context.Seq
	}
	write(0, 40, "a")
	read()
	for _, tc := range []struct {
		name      string
		changed   int
		wantDelta bool
	}{
		{"a few changed", 4, true},
		{"most changed", 34, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq := write(0, tc.changed, tc.name)
			res, err := svc.Wait(ctx, reader, "most", fmt.Sprintf("state._shared.k00 == %q", tc.name), time.Second, lean)
			if err != nil || !res.Triggered || res.Context == nil {
				t.Fatalf("wait: %+v, %v", res, err)
			}
			shared, _ := res.Context.State["_shared"].(map[string]any)
			if raw, ok := res.Context.State["_shared"].(map[string]json.RawMessage); ok {
				shared = map[string]any{}
				for k, v := range raw {
					shared[k] = v
				}
			}
			if d := res.Context.Context.Delta; tc.wantDelta {
				if d == nil || len(d.Changed) != tc.changed || len(shared) != tc.changed {
					t.Fatalf("%d of 40 changed: want a delta of them, got delta %+v and %d entries", tc.changed, d, len(shared))
				}
			} else {
				if d != nil || len(shared) != 40 || !strings.Contains(res.Context.Context.Note, "whole context") {
					t.Fatalf("%d of 40 changed: want the whole context (40 entries) saying so, got delta %v, %d entries, note %q", tc.changed, d != nil, len(shared), res.Context.Context.Note)
				}
			}
			if res.Context.Context.Seq != seq {
				t.Fatalf("seq %d, want %d", res.Context.Context.Seq, seq)
			}
		})
	}
}

// roomWithAgent makes a service (waits re-checked only on notifications)
// with room roomID, and returns it with the room's principal and that of
// agent agentID, joined.
func roomWithAgent(t *testing.T, roomID, agentID string) (svc *substrate.Service, admin, agent *substrate.Principal) {
	t.Helper()
	svc = substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures, Wait: substrate.WaitOptions{Recheck: time.Minute}})
	t.Cleanup(svc.Close)
	admin, agent = joinedRoom(t, svc, roomID, agentID)
	return svc, admin, agent
}

// roomWithViewer is a service (default options) with room roomID, its
// room and view-token principals and agent agentID, joined.
func roomWithViewer(t *testing.T, roomID, agentID string) (svc *substrate.Service, admin, viewer, agent *substrate.Principal) {
	t.Helper()
	svc = substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: roomID})
	if err != nil {
		t.Fatal(err)
	}
	if viewer, err = svc.Authenticate(ctx, room.ViewToken); err != nil {
		t.Fatal(err)
	}
	if admin, err = svc.Authenticate(ctx, room.Token); err != nil {
		t.Fatal(err)
	}
	ag, err := svc.Join(ctx, admin, roomID, substrate.JoinRequest{ID: agentID, Name: agentID})
	if err != nil {
		t.Fatal(err)
	}
	if agent, err = svc.Authenticate(ctx, ag.Token); err != nil {
		t.Fatal(err)
	}
	return svc, admin, viewer, agent
}

// joinedRoom makes room roomID in svc and returns the room's principal and
// that of agent agentID, joined.
func joinedRoom(t *testing.T, svc *substrate.Service, roomID, agentID string) (admin, agent *substrate.Principal) {
	t.Helper()
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: roomID})
	if err != nil {
		t.Fatal(err)
	}
	if admin, err = svc.Authenticate(ctx, room.Token); err != nil {
		t.Fatal(err)
	}
	ag, err := svc.Join(ctx, admin, roomID, substrate.JoinRequest{ID: agentID, Name: agentID})
	if err != nil {
		t.Fatal(err)
	}
	if agent, err = svc.Authenticate(ctx, ag.Token); err != nil {
		t.Fatal(err)
	}
	return admin, agent
}
