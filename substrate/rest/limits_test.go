package rest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/rest"
)

// The limits the README's table promises, each at its boundary: one past
// it is refused with its code, and (where the limit is a size) what is
// within it is accepted.
func TestDocumentedLimits(t *testing.T) {
	e := newEnvWith(t, rest.Options{}, substrate.Limits{MaxReadEntries: 5, MaxLogPage: 7, MaxKeysPerScope: 1000})
	rm := e.room("limits", nil)
	a := e.join(rm, "a")

	t.Run("meta 16 KiB", func(t *testing.T) {
		big := map[string]any{"x": strings.Repeat("m", 16<<10)}
		if r := e.do("POST", "/rooms", "", map[string]any{"id": "fat", "meta": big}); r.status != 413 {
			t.Fatalf("room meta over 16 KiB: %d %s", r.status, r.raw[:min(200, len(r.raw))])
		}
		if r := e.do("POST", "/rooms/limits/agents", rm.token, map[string]any{"id": "fat", "name": "F", "meta": big}); r.status/100 != 4 {
			t.Fatalf("agent meta over 16 KiB: %d", r.status)
		}
		e.do("POST", "/rooms", "", map[string]any{"id": "lean", "meta": map[string]any{"x": strings.Repeat("m", 15<<10)}}).must(t, 201)
	})
	t.Run("64 grants", func(t *testing.T) {
		grants := make([]string, 65)
		for i := range grants {
			grants[i] = fmt.Sprint("g", i)
		}
		if r := e.do("PATCH", "/rooms/limits/agents/a", rm.token, map[string]any{"grants": grants}); r.status != 400 || r.str("error") != "invalid_field" {
			t.Fatalf("65 grants: %d %s", r.status, r.raw)
		}
		e.do("PATCH", "/rooms/limits/agents/a", rm.token, map[string]any{"grants": grants[:64]}).must(t, 200)
	})
	t.Run("whole-room read and log pages", func(t *testing.T) {
		e.do("PUT", "/rooms/limits/state/batch", rm.token, map[string]any{"writes": validWrites(7)}).must(t, 200)
		r := e.do("GET", "/rooms/limits/state", rm.token, nil).must(t, 200)
		if n := len(r.body["entries"].([]any)); n != 5 || r.body["more"] != true {
			t.Fatalf("whole-room read: %d entries, more %v", n, r.body["more"])
		}
		for range 3 {
			var writes []map[string]any
			for i := range 5 {
				writes = append(writes, map[string]any{"scope": "_log", "append": true, "value": i})
			}
			e.do("PUT", "/rooms/limits/state/batch", rm.token, map[string]any{"writes": writes}).must(t, 200)
		}
		r = e.do("GET", "/rooms/limits/state?scope=_log&limit=100", rm.token, nil).must(t, 200)
		if n := len(r.body["entries"].([]any)); n != 7 || r.body["more"] != true {
			t.Fatalf("log page capped at 7: %d entries, more %v", n, r.body["more"])
		}
	})
	t.Run("32 writes and 32 params per action", func(t *testing.T) {
		writes := make([]any, 33)
		params := map[string]any{}
		for i := range writes {
			writes[i] = map[string]any{"key": fmt.Sprint("w", i), "value": i}
			params[fmt.Sprint("p", i)] = map[string]any{"type": "string"}
		}
		if r := e.do("PUT", "/rooms/limits/actions", rm.token, map[string]any{"id": "many", "writes": writes}); r.status != 400 {
			t.Fatalf("33 writes: %d %s", r.status, r.raw)
		}
		if r := e.do("PUT", "/rooms/limits/actions", rm.token, map[string]any{"id": "many", "params": params, "writes": writes[:1]}); r.status != 400 {
			t.Fatalf("33 params: %d %s", r.status, r.raw)
		}
		e.do("PUT", "/rooms/limits/actions", rm.token, map[string]any{"id": "many", "writes": writes[:32]}).must(t, 201)
	})
	t.Run("1,000 unread", func(t *testing.T) {
		for range 11 {
			var writes []map[string]any
			for i := range 100 {
				writes = append(writes, map[string]any{"scope": "_messages", "append": true, "value": map[string]any{"body": i}})
			}
			e.do("PUT", "/rooms/limits/state/batch", rm.token, map[string]any{"writes": writes}).must(t, 200)
		}
		if got := path(e.ctx(rm, a, "messages_limit=1").body, "messages", "unread"); got != float64(1000) {
			t.Fatalf("unread over 1,100 messages: %v, want the cap 1000", got)
		}
	})
	t.Run("negative rate disables", func(t *testing.T) {
		off := newEnv(t, rest.Options{RatePerSecond: -1})
		for i := range 300 {
			if r := off.do("POST", "/rooms", "", map[string]any{}); r.status != 201 {
				t.Fatalf("request %d with rate limiting off: %d", i, r.status)
			}
		}
	})
}

// A wait never outlasts the server's cap, whatever it asks for.
func TestWaitCap(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures, Wait: substrate.WaitOptions{MaxTimeout: 300 * time.Millisecond}})
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "cap"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	// The test's own deadline, well under go test's: an uncapped wait
	// fails here, saying so, rather than by the whole run timing out.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type outcome struct {
		res *substrate.WaitResult
		err error
	}
	done := make(chan outcome, 1)
	start := time.Now()
	go func() {
		res, err := svc.Wait(ctx, admin, "cap", "false", time.Hour, substrate.ContextRequest{Depth: "lean", MessagesLimit: 1, NoContext: true})
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		if o.err != nil || !o.res.Timeout {
			t.Fatalf("capped wait: %+v %v", o.res, o.err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("a wait asking for an hour ran %v past a 300 ms cap", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a wait asking for an hour was still waiting after 5 s, past a 300 ms cap")
	}
}

// The whole-room read at its real size: a room of 10,001 entries returns
// the default 10,000 and says there is more (the rest is read scope by
// scope).
func TestWholeRoomReadAtRealSize(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 10,001 entries")
	}
	e := newEnvWith(t, rest.Options{}, substrate.Limits{})
	rm := e.room("big", nil)
	for batch := range 101 {
		writes := make([]map[string]any, 0, 100)
		for i := range 100 {
			if n := batch*100 + i; n <= 10_000 {
				writes = append(writes, map[string]any{"scope": fmt.Sprintf("s%d", n%2), "key": fmt.Sprintf("k%05d", n), "value": n})
			}
		}
		e.do("PUT", "/rooms/big/state/batch", rm.token, map[string]any{"writes": writes}).must(t, 200)
	}
	r := e.do("GET", "/rooms/big/state", rm.token, nil).must(t, 200)
	if n := len(r.body["entries"].([]any)); n != 10_000 || r.body["more"] != true {
		t.Fatalf("whole-room read of 10,001 entries: %d entries, more %v", n, r.body["more"])
	}
}
