package substrate

import (
	"context"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Every entry's admission to the room's expression budget ends with the
// call, on its error paths too (the expression failing, the key or action
// not found, a write refused under the lock): a bucket left counted in use
// is never swept, and its room's spending is kept for a request long gone.
func TestEntriesEndTheirAdmission(t *testing.T) {
	s := New(pgtest.New(t), Options{})
	t.Cleanup(s.Close)
	ctx := context.Background()
	room, err := s.CreateRoom(ctx, CreateRoomRequest{ID: "rel"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := s.Authenticate(ctx, room.Token)
	ag, err := s.Join(ctx, admin, "rel", JoinRequest{ID: "a", Name: "a", Enabled: `now > timestamp("2000-01-01T00:00:00Z")`})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := s.Authenticate(ctx, ag.Token)
	view, err := s.RotateToken(ctx, admin, "rel", "view")
	if err != nil {
		t.Fatal(err)
	}
	viewer, _ := s.Authenticate(ctx, view.Token)
	stale := int64(99)
	calls := map[string]func(p *Principal) error{
		"eval": func(p *Principal) error { _, err := s.Eval(ctx, p, "rel", `size(state) >= 0`, nil); return err },
		"eval failing": func(p *Principal) error {
			_, err := s.Eval(ctx, p, "rel", `state._shared.nothing.here`, nil)
			return err
		},
		"search": func(p *Principal) error {
			_, err := s.SearchRows(ctx, p, "rel", SearchQuery{Query: "x", Limit: 6, Views: true})
			return err
		},
		"search unseen": func(p *Principal) error {
			_, err := s.SearchRows(ctx, p, "rel", SearchQuery{Query: "x", Scope: "b", Limit: 6, Views: true})
			return err
		},
		"actions":          func(p *Principal) error { _, err := s.ListActions(ctx, p, "rel"); return err },
		"action not found": func(p *Principal) error { _, err := s.GetAction(ctx, p, "rel", "nope"); return err },
		"views":            func(p *Principal) error { _, err := s.ListViews(ctx, p, "rel"); return err },
		"view not found":   func(p *Principal) error { _, err := s.GetView(ctx, p, "rel", "nope"); return err },
		"help":             func(p *Principal) error { _, err := s.Help(ctx, p, "rel", ""); return err },
		"help not found":   func(p *Principal) error { _, err := s.Help(ctx, p, "rel", "nope"); return err },
		"invoke help":      func(p *Principal) error { _, err := s.Invoke(ctx, p, "rel", "help", nil); return err },
		"invoke not found": func(p *Principal) error { _, err := s.Invoke(ctx, p, "rel", "nope", nil); return err },
		"agents":           func(p *Principal) error { _, err := s.ListAgents(ctx, p, "rel"); return err },
		"context":          func(p *Principal) error { _, err := s.Context(ctx, p, "rel", ContextRequest{}); return err },
		"state":            func(p *Principal) error { _, err := s.ReadState(ctx, p, "rel", ReadQuery{}); return err },
		"wait": func(p *Principal) error {
			_, err := s.Wait(ctx, p, "rel", `size(state) < 0`, time.Millisecond, ContextRequest{})
			return err
		},
		"write": func(p *Principal) error {
			_, err := s.WriteState(ctx, p, "rel", []Write{{Scope: "_shared", Key: "k", Value: []byte(`1`)}}, false)
			return err
		},
		"write conflicting": func(p *Principal) error {
			_, err := s.WriteState(ctx, p, "rel", []Write{{Scope: "_shared", Key: "k", Value: []byte(`2`), IfVersion: &stale}}, false)
			return err
		},
		"register action": func(p *Principal) error {
			_, err := s.RegisterAction(ctx, p, "rel", ActionDef{ID: "go", Writes: []WriteTemplate{{Key: "n", Value: []byte(`1`)}}})
			return err
		},
		"register bad if": func(p *Principal) error {
			_, err := s.RegisterAction(ctx, p, "rel", ActionDef{ID: "bad", If: `nothing.here`, Writes: []WriteTemplate{{Key: "n", Value: []byte(`1`)}}})
			return err
		},
		"register view": func(p *Principal) error {
			_, err := s.RegisterView(ctx, p, "rel", ViewDef{ID: "v", Expr: `1`})
			return err
		},
		"register view over": func(p *Principal) error {
			_, err := s.RegisterView(ctx, p, "rel", ViewDef{ID: "w", Expr: `nothing.here`})
			return err
		},
	}
	failed := 0
	for name, call := range calls {
		for _, who := range []*Principal{admin, p, viewer} {
			if err := call(who); err != nil {
				failed++
				if errs.Is(err, errs.Internal) || errs.Is(err, errs.RoomBusy) {
					t.Fatalf("%s: %v", name, err)
				}
			}
		}
	}
	t.Logf("%d of %d calls failed", failed, 3*len(calls))
	if failed < 10 {
		t.Fatalf("only %d calls failed: the error paths were not taken", failed)
	}
	inUse := s.workMeter.InUse()
	if len(inUse) == 0 {
		t.Fatal("no budget was used")
	}
	for key, n := range inUse {
		if n != 0 {
			t.Errorf("HOLE: after every call returned, the budget %q counts %d requests in use", key, n)
		}
	}
}
