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
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Attacks on the core's exported operations for features (ReadRoom,
// MutateRoom, RoomTx.Apply, AdmitKeyLog): a feature that forwards a
// caller's principal and arguments must not read or write beyond what
// the core itself would allow that principal.

func attackRooms(t *testing.T) (*substrate.Service, *substrate.Principal, *substrate.Principal) {
	t.Helper()
	svc := substrate.New(pgtest.New(t), substrate.Options{})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	a, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "atk-a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "atk-b"})
	if err != nil {
		t.Fatal(err)
	}
	pa, _ := svc.Authenticate(ctx, a.Token)
	pb, _ := svc.Authenticate(ctx, b.Token)
	return svc, pa, pb
}

// A principal of one room never reads or writes another room through a
// RoomTx, whatever room id the feature passes along.
func TestAttackRoomTxStaysInThePrincipalsRoom(t *testing.T) {
	svc, pa, pb := attackRooms(t)
	ctx := context.Background()
	if _, err := svc.WriteState(ctx, pb, "atk-b", []substrate.Write{{Scope: "_shared", Key: "secret", Value: json.RawMessage(`"b's"`)}}, false); err != nil {
		t.Fatal(err)
	}
	var got json.RawMessage
	err := svc.ReadRoom(ctx, pa, "atk-b", func(tx *substrate.RoomTx) error {
		v, _, err := tx.Get("_shared", "secret")
		got = v
		return err
	})
	if !errs.Is(err, errs.Forbidden) {
		t.Errorf("HOLE: room atk-a's token read room atk-b through ReadRoom: %s (err %v)", got, err)
	}
	_, err = svc.MutateRoom(ctx, pa, "atk-b", func(tx *substrate.RoomTx) error {
		audit, err := tx.Apply([]substrate.Op{{Scope: "_shared", Key: "secret", Value: json.RawMessage(`"a's"`)}}, "test")
		tx.Audit(map[string]any{"kind": "test", "writes": audit})
		return err
	})
	if !errs.Is(err, errs.Forbidden) {
		t.Errorf("HOLE: room atk-a's token wrote room atk-b through MutateRoom (err %v)", err)
	}
}

// Apply is the core's write path for features: it keeps the core's own
// reserved scopes (the audit log, agents, action and view definitions,
// cooldowns) to the core, and names and keys to the rules every write
// obeys.
func TestAttackApplyKeepsTheCoresRules(t *testing.T) {
	svc, pa, _ := attackRooms(t)
	ctx := context.Background()
	for _, o := range []substrate.Op{
		{Scope: "_actions", Key: "evil", Value: json.RawMessage(`{"writes":[]}`)},
		{Scope: "_audit", Key: "999999", Value: json.RawMessage(`{}`), Append: true},
		{Scope: "_agents", Key: "mallory", Value: json.RawMessage(`{}`)},
		{Scope: "_views", Key: "v", Value: json.RawMessage(`{}`)},
		{Scope: "_cooldowns", Key: "c", Value: json.RawMessage(`{}`)},
		{Scope: "_shared", Key: "bad\x01key", Value: json.RawMessage(`1`)},
		{Scope: "bad scope", Key: "k", Value: json.RawMessage(`1`)},
		{Scope: "_shared", Key: "", Value: json.RawMessage(`1`)},
	} {
		_, err := svc.MutateRoom(ctx, pa, "atk-a", func(tx *substrate.RoomTx) error {
			audit, err := tx.Apply([]substrate.Op{o}, "test")
			tx.Audit(map[string]any{"kind": "test", "writes": audit})
			return err
		})
		if e := errs.From(err); e == nil || (e.Code != errs.ScopeDenied && e.Code != errs.InvalidField) {
			t.Errorf("HOLE: Apply wrote %q/%q: err %v", o.Scope, o.Key, err)
		}
	}
	// What a feature legitimately writes still goes through.
	_, err := svc.MutateRoom(ctx, pa, "atk-a", func(tx *substrate.RoomTx) error {
		audit, err := tx.Apply([]substrate.Op{{Scope: "_shared", Key: "ok", Value: json.RawMessage(`1`)}, {Scope: "feat.x", Key: "n:1", Value: json.RawMessage(`1`), Append: true}}, "test")
		tx.Audit(map[string]any{"kind": "test", "writes": audit})
		return err
	})
	if err != nil {
		t.Fatalf("a legitimate Apply was refused: %v", err)
	}
}

// A KeyLog admits its reader to one key's versions: it cannot be pointed
// at another mutation's audit record (which holds every scope it wrote,
// private ones included).
func TestAttackKeyLogReadsOnlyItsKey(t *testing.T) {
	svc, pa, _ := attackRooms(t)
	ctx := context.Background()
	bob, err := svc.Join(ctx, pa, "atk-a", substrate.JoinRequest{ID: "bob", Name: "Bob"})
	if err != nil {
		t.Fatal(err)
	}
	pbob, _ := svc.Authenticate(ctx, bob.Token)
	if _, err := svc.WriteState(ctx, pa, "atk-a", []substrate.Write{{Scope: "_shared", Key: "k", Value: json.RawMessage(`1`)}}, false); err != nil {
		t.Fatal(err)
	}
	// A private write of alice's (here room authority's, in scope
	// "alice"), which bob may not read.
	w, err := svc.WriteState(ctx, pa, "atk-a", []substrate.Write{{Scope: "alice", Key: "secret", Value: json.RawMessage(`"alice's secret"`)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	kl, err := svc.AdmitKeyLog(ctx, pbob, "atk-a", "_shared", "k")
	if err != nil {
		t.Fatal(err)
	}
	var got []substrate.AuditEntry
	var own int
	err = kl.Read(ctx, func(tx *substrate.KeyLogTx) error {
		rev, err := tx.Revision()
		if err != nil {
			return err
		}
		mine, err := tx.Chain(rev, 5)
		own = len(mine)
		if err != nil {
			return err
		}
		got, err = tx.Chain(w.Seq, 1)
		return err
	})
	if own != 1 {
		t.Errorf("the key's own history: %d entries (%v), want 1", own, err)
	}
	for _, e := range got {
		t.Errorf("HOLE: bob's KeyLog of _shared/k read audit entry %d: %s", e.Seq, e.Value)
	}
	if len(got) == 0 && err != nil && errs.From(err).Code != errs.InvalidField {
		t.Errorf("refusal: %v, want invalid_field", err)
	}
}

// AuditPage bounds its page whatever n its caller passes: a negative n
// was a database error (a 500 to whoever forwarded it), a huge one a
// statement without a useful LIMIT.
func TestAttackAuditPageBoundsItsRows(t *testing.T) {
	svc, pa, pb := attackRooms(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := svc.WriteState(ctx, pa, "atk-a", []substrate.Write{{Scope: "_shared", Key: "k", Value: json.RawMessage(`1`)}}, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []int{-1, 0, 1 << 30} {
		page, err := svc.AuditPage(ctx, pa, "atk-a", 0, 1<<62, n)
		if err != nil || len(page) < 3 {
			t.Errorf("AuditPage n=%d: %d entries, err %v", n, len(page), err)
		}
	}
	if _, err := svc.AuditPage(ctx, pb, "atk-a", 0, 1<<62, 10); !errs.Is(err, errs.Forbidden) {
		t.Errorf("HOLE: room atk-b's token paged atk-a's audit log: %v", err)
	}
}

// A feature's mutation that forgets its audit record is refused and
// rolled back (its writes never land unaudited), without a panic.
func TestMutateRoomWithoutAuditIsAnError(t *testing.T) {
	svc, pa, _ := attackRooms(t)
	ctx := context.Background()
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("MutateRoom without an audit record panicked: %v", r)
			}
		}()
		_, err = svc.MutateRoom(ctx, pa, "atk-a", func(tx *substrate.RoomTx) error {
			_, err := tx.Apply([]substrate.Op{{Scope: "_shared", Key: "unaudited", Value: json.RawMessage(`1`)}}, "test")
			return err
		})
	}()
	if err == nil && !t.Failed() {
		t.Error("MutateRoom without an audit record succeeded")
	}
	if r, rerr := svc.ReadState(ctx, pa, "atk-a", substrate.ReadQuery{Scope: "_shared", Key: "unaudited"}); rerr == nil && len(r.Entries) > 0 {
		t.Errorf("the unaudited write landed: %+v", r.Entries)
	}
}

// A view's enabled gate is decided for each reader: a view whose gate is
// false for bob is absent for bob wherever a view can be read (the
// context, only=views.<id>, the views list and one view, CEL in eval and
// waits, a wait's context), while alice, for whom it holds, sees it; and
// neither a view nor an action reading views.<id> carries its value to a
// reader or a registrar it is hidden from (a confused deputy). Its value
// is still shared across readers: reading it first as alice or as bob
// changes nothing.
func TestAttackViewGateIsPerReader(t *testing.T) {
	for _, aliceFirst := range []bool{true, false} {
		svc := substrate.New(pgtest.New(t), substrate.Options{})
		t.Cleanup(svc.Close)
		ctx := context.Background()
		const room = "atk-gate"
		rm, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: room})
		if err != nil {
			t.Fatal(err)
		}
		pr, _ := svc.Authenticate(ctx, rm.Token)
		as := map[string]*substrate.Principal{}
		for _, id := range []string{"alice", "bob"} {
			j, err := svc.Join(ctx, pr, room, substrate.JoinRequest{ID: id, Name: id})
			if err != nil {
				t.Fatal(err)
			}
			as[id], _ = svc.Authenticate(ctx, j.Token)
		}
		alice, bob := as["alice"], as["bob"]
		if _, err := svc.WriteState(ctx, alice, room, []substrate.Write{{Scope: "alice", Key: "code", Value: json.RawMessage(`"s3cret"`)}}, false); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.RegisterView(ctx, alice, room, substrate.ViewDef{ID: "secret", Scope: "alice", Expr: `state.self.code`, Enabled: `self != "bob"`}); err != nil {
			t.Fatal(err)
		}
		// Alice's own view of it: its value is alice's, and shown to bob
		// only without what the gate hides from him, whoever read first.
		if _, err := svc.RegisterView(ctx, alice, room, substrate.ViewDef{ID: "mirror", Scope: "alice", Expr: `views.secret`}); err != nil {
			t.Fatal(err)
		}
		// Bob's deputies: a view of his and a communal action of his
		// that copy views.secret; alice's action that answers with it.
		if _, err := svc.RegisterView(ctx, bob, room, substrate.ViewDef{ID: "copy", Scope: "bob", Expr: `"secret" in views ? views.secret : "none"`}); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.RegisterAction(ctx, bob, room, substrate.ActionDef{ID: "leak", Scope: "_shared",
			Writes: []substrate.WriteTemplate{{Scope: "_shared", Key: "leaked", Value: json.RawMessage(`"\"secret\" in views ? views.secret : \"none\""`), Expr: true}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.RegisterAction(ctx, alice, room, substrate.ActionDef{ID: "peek", Scope: "alice", Result: `"secret" in views ? views.secret : "none"`}); err != nil {
			t.Fatal(err)
		}
		readers := []string{"alice", "bob"}
		if !aliceFirst {
			readers = []string{"bob", "alice"}
		}
		for _, who := range readers {
			p := as[who]
			shows := who == "alice"
			seen := func(surface string, v any) {
				t.Helper()
				raw, _ := json.Marshal(v)
				if got := strings.Contains(string(raw), "s3cret"); got != shows {
					if shows {
						t.Errorf("%s (aliceFirst %v): alice does not see the view: %s", surface, aliceFirst, raw)
					} else {
						t.Errorf("HOLE: %s (aliceFirst %v): bob, whose gate is false, read the view: %s", surface, aliceFirst, raw)
					}
				}
			}
			env, err := svc.Context(ctx, p, room, substrate.ContextRequest{})
			if err != nil {
				t.Fatal(err)
			}
			seen("context", env.Views)
			if _, ok := env.Views["secret"]; ok != shows {
				t.Errorf("%s: context lists view secret: %v, want %v", who, ok, shows)
			}
			env, err = svc.Context(ctx, p, room, substrate.ContextRequest{Only: []string{"views.secret"}})
			if err != nil {
				t.Fatal(err)
			}
			seen("context only=views.secret", env.Views)
			list, err := svc.ListViews(ctx, p, room)
			if err != nil {
				t.Fatal(err)
			}
			seen("ListViews", list)
			one, err := svc.GetView(ctx, p, room, "secret")
			if shows && err != nil || !shows && !errs.Is(err, errs.ViewNotFound) {
				t.Errorf("%s: GetView secret: %+v, %v", who, one, err)
			}
			ev, err := svc.Eval(ctx, p, room, `"secret" in views ? views.secret : "none"`, nil)
			if err != nil {
				t.Fatal(err)
			}
			seen("eval", ev.Value)
			w, err := svc.Wait(ctx, p, room, `"secret" in views && views.secret == "s3cret"`, 50*time.Millisecond, substrate.ContextRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if w.Triggered != shows {
				t.Errorf("%s: a wait on views.secret triggered: %v, want %v", who, w.Triggered, shows)
			}
			// A wait's context is a delta: the view's state changes first.
			if _, err := svc.WriteState(ctx, alice, room, []substrate.Write{{Scope: "alice", Key: "code", Value: json.RawMessage(`"s3cret"`)}}, false); err != nil {
				t.Fatal(err)
			}
			w, err = svc.Wait(ctx, p, room, `true`, 50*time.Millisecond, substrate.ContextRequest{})
			if err != nil {
				t.Fatal(err)
			}
			seen("wait's context", w.Context)
			// The copy is bob's: alice reading it sees what bob may.
			if !shows {
				seen("bob's view copy", env.Views["copy"])
			}
			res, err := svc.Invoke(ctx, p, room, "peek", nil)
			if err != nil {
				t.Fatal(err)
			}
			seen("alice's action peek invoked by "+who, res.Result)
		}
		// Reads of one state share view values: alice's must not be bob's.
		for _, who := range readers {
			env, err := svc.Context(ctx, as[who], room, substrate.ContextRequest{Only: []string{"views"}})
			if err != nil {
				t.Fatal(err)
			}
			if raw, _ := json.Marshal(env.Views); strings.Contains(string(raw), "s3cret") != (who == "alice") {
				t.Errorf("HOLE: %s reading the views of an unchanged room (aliceFirst %v; a value shared across readers): %s", who, aliceFirst, raw)
			}
		}
		// Alice invoking bob's communal action must not copy the view she
		// sees into state bob reads.
		if _, err := svc.Invoke(ctx, alice, room, "leak", nil); err != nil {
			t.Fatal(err)
		}
		r, err := svc.ReadState(ctx, bob, room, substrate.ReadQuery{Scope: "_shared", Key: "leaked"})
		if err != nil {
			t.Fatal(err)
		}
		if raw, _ := json.Marshal(r); strings.Contains(string(raw), "s3cret") {
			t.Errorf("HOLE: bob's action leak, invoked by alice, copied the view hidden from bob: %s", raw)
		}
		env, _ := svc.Context(ctx, alice, room, substrate.ContextRequest{Only: []string{"views.copy"}})
		if raw, _ := json.Marshal(env.Views); strings.Contains(string(raw), "s3cret") {
			t.Errorf("bob's view copy, read by alice, read a view hidden from its registrar bob: %s", raw)
		}
	}
}

// Many readers at once on one unchanged room (a pool of 2 connections):
// the view values they share never carry a gated view to bob, and alice
// always sees it.
func TestAttackViewGatePerReaderConcurrently(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	const room = "atk-gate-many"
	rm, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: room})
	if err != nil {
		t.Fatal(err)
	}
	pr, _ := svc.Authenticate(ctx, rm.Token)
	as := map[string]*substrate.Principal{}
	for _, id := range []string{"alice", "bob"} {
		j, err := svc.Join(ctx, pr, room, substrate.JoinRequest{ID: id, Name: id})
		if err != nil {
			t.Fatal(err)
		}
		as[id], _ = svc.Authenticate(ctx, j.Token)
	}
	if _, err := svc.WriteState(ctx, as["alice"], room, []substrate.Write{{Scope: "alice", Key: "code", Value: json.RawMessage(`"s3cret"`)}}, false); err != nil {
		t.Fatal(err)
	}
	for _, v := range []substrate.ViewDef{
		{ID: "secret", Scope: "alice", Expr: `state.self.code`, Enabled: `self != "bob"`},
		{ID: "mirror", Scope: "alice", Expr: `views.secret`},
	} {
		if _, err := svc.RegisterView(ctx, as["alice"], room, v); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errc := make(chan string, 64)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for n := 0; n < 8; n++ {
				who := []string{"alice", "bob"}[(i+n)%2]
				list, err := svc.ListViews(ctx, as[who], room)
				if err != nil {
					errc <- err.Error()
					return
				}
				raw, _ := json.Marshal(list)
				if strings.Contains(string(raw), "s3cret") != (who == "alice") {
					errc <- fmt.Sprintf("HOLE: %s's views: %s", who, raw)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	close(errc)
	for e := range errc {
		t.Error(e)
	}
}
