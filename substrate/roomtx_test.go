package substrate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// The reads a feature gets are bounded and exact: Chain stops at Max,
// List matches its prefix byte for byte (not as a LIKE pattern, where _
// and % match anything) and stops at Limit, and a read cannot write.
func TestRoomTxReadsAreBoundedAndExact(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "feat"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	// A line of 10 nodes: c:<i>:1 → {"id": i+1}, n:<i> → {"at": i}.
	_, err = svc.MutateRoom(ctx, admin, "feat", func(tx *substrate.RoomTx) error {
		var ops []substrate.Op
		for i := 1; i <= 10; i++ {
			ops = append(ops,
				substrate.Op{Scope: "feat.t", Key: fmt.Sprintf("c:%d:1", i), Value: json.RawMessage(fmt.Sprintf(`{"id":%d}`, i+1)), Append: true},
				substrate.Op{Scope: "feat.t", Key: fmt.Sprintf("n:%d", i+1), Value: json.RawMessage(fmt.Sprintf(`{"at":%d}`, i+1)), Append: true})
		}
		for _, k := range []string{"a_b:1", "a%b:2", "axb:3", "a_b:4"} {
			ops = append(ops, substrate.Op{Scope: "feat.m", Key: k, Value: json.RawMessage(`1`)})
		}
		audit, err := tx.Apply(ops, "test")
		tx.Audit(map[string]any{"kind": "test", "writes": audit})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Failures are collected and reported after the transaction: a
	// Fatalf inside the callback would leave it open.
	var fails []string
	fail := func(format string, a ...any) { fails = append(fails, fmt.Sprintf(format, a...)) }
	err = svc.ReadRoom(ctx, admin, "feat", func(tx *substrate.RoomTx) error {
		all, err := tx.Chain(substrate.ChainQuery{Scope: "feat.t", Start: "c:1:1", Prefix: "c:", Field: "id", Suffix: ":1"})
		if err != nil || len(all) != 10 {
			fail("whole chain: %d links (%v), want 10", len(all), err)
		}
		three, err := tx.Chain(substrate.ChainQuery{Scope: "feat.t", Start: "c:1:1", Prefix: "c:", Field: "id", Suffix: ":1", Max: 3})
		if err != nil || len(three) != 3 {
			fail("chain with Max 3: %d links (%v)", len(three), err)
		}
		nodes, err := tx.Chain(substrate.ChainQuery{Scope: "feat.t", Start: "c:4:1", Prefix: "c:", Field: "id", Suffix: ":1", Emit: "n:"})
		if err != nil || len(nodes) != 7 || string(nodes[0]) != `{"at": 5}` || string(nodes[6]) != `{"at": 11}` {
			fail("chain emitting nodes from 4: %s (%v)", nodes, err)
		}
		kvs, err := tx.List(substrate.ListQuery{Scope: "feat.m", Prefix: "a_b"})
		if err != nil || len(kvs) != 2 || kvs[0].Key != "a_b:1" || kvs[1].Key != "a_b:4" {
			fail("prefix a_b: %v (%v), want a_b:1 and a_b:4 only", kvs, err)
		}
		if kvs, err = tx.List(substrate.ListQuery{Scope: "feat.m", Prefix: "a", Limit: 2}); err != nil || len(kvs) != 2 {
			fail("prefix a, Limit 2: %v (%v)", kvs, err)
		}
		if kvs, err = tx.List(substrate.ListQuery{Scope: "feat.t", Prefix: "c:", Appended: true, Limit: 2}); err != nil || len(kvs) != 2 || kvs[0].Key != "c:10:1" {
			fail("newest two links: %v (%v)", kvs, err)
		}
		if _, err := tx.Apply([]substrate.Op{{Scope: "feat.m", Key: "x", Value: json.RawMessage(`1`)}}, "test"); !errs.Is(err, errs.ReadOnlyToken) {
			fail("a read applied a write: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fails {
		t.Error(f)
	}
}
