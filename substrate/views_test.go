package substrate_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// A view that reads only the room's state has one value for every reader
// of that state: an unchanged room does not evaluate it again, whoever
// reads; a view that reads the clock does. (One agent's 300 views once
// made every read of its room evaluate all of them, every time.)
func TestViewValuesSharedUntilTheRoomChanges(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures})
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "memo"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	var readers []*substrate.Principal
	for _, id := range []string{"a", "b", "c"} {
		ag, err := svc.Join(ctx, admin, "memo", substrate.JoinRequest{ID: id, Name: id})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := svc.Authenticate(ctx, ag.Token)
		readers = append(readers, p)
	}
	write := func(v int) {
		t.Helper()
		raw, _ := json.Marshal(v)
		if _, err := svc.WriteState(ctx, admin, "memo", []substrate.Write{{Scope: "_shared", Key: "n", Value: raw}}, false); err != nil {
			t.Fatal(err)
		}
	}
	write(1)
	for _, v := range []substrate.ViewDef{{ID: "double", Expr: "state._shared.n * 2"}, {ID: "sum", Expr: "views.double + 1"}} {
		if _, err := svc.RegisterView(ctx, admin, "memo", v); err != nil {
			t.Fatal(err)
		}
	}
	read := func(p *substrate.Principal) map[string]any {
		t.Helper()
		env, err := svc.Context(ctx, p, "memo", substrate.ContextRequest{Depth: "lean", MessagesLimit: 10})
		if err != nil {
			t.Fatal(err)
		}
		return env.Views
	}
	read(readers[0]) // the state after registration: evaluated once here
	before := svc.Stats().ViewEvaluations
	for range 3 {
		for _, p := range readers {
			if v := read(p); v["sum"] != int64(3) {
				t.Fatalf("views %v", v)
			}
		}
	}
	if got := svc.Stats().ViewEvaluations - before; got != 0 {
		t.Fatalf("9 reads of an unchanged room evaluated views %d times, want 0", got)
	}
	write(5)
	for _, p := range readers {
		if v := read(p); v["sum"] != int64(11) {
			t.Fatalf("views after a write %v", v)
		}
	}
	if got := svc.Stats().ViewEvaluations - before; got != 2 {
		t.Fatalf("3 reads after one write evaluated views %d times, want 2 (each view once)", got)
	}
	// A view that reads the clock is evaluated for every read.
	if _, err := svc.RegisterView(ctx, admin, "memo", substrate.ViewDef{ID: "clock", Expr: "now > timestamp('2000-01-01T00:00:00Z')"}); err != nil {
		t.Fatal(err)
	}
	read(readers[0])
	before = svc.Stats().ViewEvaluations
	read(readers[1])
	read(readers[2])
	if got := svc.Stats().ViewEvaluations - before; got != 2 {
		t.Fatalf("2 reads evaluated views %d times, want 2 (the clock view each time, the others shared)", got)
	}
}
