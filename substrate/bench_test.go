package substrate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The domain call alone, without HTTP: the difference to the REST
// benchmark of the same name is the HTTP and JSON overhead.
func BenchmarkServiceWriteSerial(b *testing.B) {
	svc := substrate.New(pgtest.New(b), substrate.Options{Features: testFeatures})
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	p, err := svc.Authenticate(ctx, room.Token)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		v, _ := json.Marshal(i)
		if _, err := svc.WriteState(ctx, p, "bench", []substrate.Write{{Scope: "_shared", Key: "k", Value: v}}, false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
}

// gatedRoom makes room id where mallory wrote n entries of _shared, each
// behind an entry-level enabled expression costing about 45,000 cel-go
// units (about 1.3 ms) and false, and regs other agents registered an
// action each (every action evaluates with its registrar's authority, so
// the gates ran once more per registrar). It returns alice's principal,
// a reader who wrote nothing. writer is the service that writes (one
// without the gate budget's write-time refusal, to place more gates than
// it admits); the benchmark reads through svc.
func gatedRoom(b *testing.B, svc, writer *substrate.Service, id string, n, regs int, gate string) *substrate.Principal {
	b.Helper()
	ctx := context.Background()
	room, err := writer.CreateRoom(ctx, substrate.CreateRoomRequest{ID: id})
	if err != nil {
		b.Fatal(err)
	}
	admin, _ := writer.Authenticate(ctx, room.Token)
	agent := func(name string) *substrate.Principal {
		j, err := writer.Join(ctx, admin, id, substrate.JoinRequest{ID: name, Name: name})
		if err != nil {
			b.Fatal(err)
		}
		p, err := writer.Authenticate(ctx, j.Token)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	mallory, alice := agent("mallory"), agent("alice")
	for i := range regs {
		r := agent(fmt.Sprint("reg", i))
		if _, err := writer.RegisterAction(ctx, r, id, substrate.ActionDef{ID: fmt.Sprint("act", i), Scope: r.AgentID,
			Enabled: `"x" in state._shared`, Writes: []substrate.WriteTemplate{{Key: "x", Value: json.RawMessage(`1`)}}}); err != nil {
			b.Fatal(err)
		}
	}
	var writes []substrate.WriteTemplate
	for k := range 32 {
		writes = append(writes, substrate.WriteTemplate{Key: fmt.Sprintf("g${params.i}_%d", k), Value: json.RawMessage(`1`), Enabled: gate})
	}
	if _, err := writer.RegisterAction(ctx, mallory, id, substrate.ActionDef{ID: "arm", Scope: "mallory",
		Params: map[string]substrate.ParamSpec{"i": {Type: "integer"}}, Writes: writes}); err != nil {
		b.Fatal(err)
	}
	for i := range n / 32 {
		if _, err := writer.Invoke(ctx, mallory, id, "arm", json.RawMessage(fmt.Sprintf(`{"i": %d}`, i))); err != nil {
			b.Fatal(err)
		}
	}
	return alice
}

// H2: 640 entries of _shared behind expensive enabled expressions, and
// three registrars. Each op is one context read by an agent who wrote
// none of it. "pure" gates read only state; "now" gates read now, so no
// result can be reused between reads.
//
//	go test ./substrate -run '^$' -bench BenchmarkReadGatedEntries -benchtime 5x
func BenchmarkReadGatedEntries(b *testing.B) {
	for _, c := range []struct{ name, gate string }{
		{"pure", "lists.range(3000).map(x, x * 2).size() < 0"},
		{"now", `lists.range(3000).map(x, x * 2).size() < 0 && now > timestamp("2000-01-01T00:00:00Z")`},
	} {
		b.Run(c.name, func(b *testing.B) {
			db := pgtest.New(b)
			svc := substrate.New(db, substrate.Options{Features: testFeatures})
			writer := gateWriter(db)
			alice := gatedRoom(b, svc, writer, "gated", 640, 3, c.gate)
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := svc.Context(ctx, alice, "gated", substrate.ContextRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		// GET /state of the same scope decides the same gates (once per
		// read, not per registrar).
		b.Run(c.name+"/state_read", func(b *testing.B) {
			db := pgtest.New(b)
			svc := substrate.New(db, substrate.Options{Features: testFeatures})
			writer := gateWriter(db)
			alice := gatedRoom(b, svc, writer, "gated", 640, 3, c.gate)
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := svc.ReadState(ctx, alice, "gated", substrate.ReadQuery{Scope: "_shared"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// gateWriter is a service over db that admits any number of gated
// entries (its budget is far past what they cost), as a room written
// before the budget existed holds them.
func gateWriter(db *store.DB) *substrate.Service {
	return substrate.New(db, substrate.Options{Features: testFeatures, Limits: substrate.Limits{EnabledCostPerRead: 1 << 40}})
}

// BenchmarkReadGatedViews reads the views of a room with 50 views, half of
// them gated by the reader's self: each read decides those 25 gates for
// its reader (the values are shared).
func BenchmarkReadGatedViews(b *testing.B) {
	svc := substrate.New(pgtest.New(b), substrate.Options{Features: testFeatures})
	b.Cleanup(svc.Close)
	ctx := context.Background()
	rm, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "gv"})
	if err != nil {
		b.Fatal(err)
	}
	pr, _ := svc.Authenticate(ctx, rm.Token)
	var readers []*substrate.Principal
	for _, id := range []string{"alice", "bob"} {
		j, err := svc.Join(ctx, pr, "gv", substrate.JoinRequest{ID: id, Name: id})
		if err != nil {
			b.Fatal(err)
		}
		p, _ := svc.Authenticate(ctx, j.Token)
		readers = append(readers, p)
	}
	for i := 0; i < 50; i++ {
		v := substrate.ViewDef{ID: fmt.Sprintf("v%02d", i), Scope: "_shared", Expr: fmt.Sprintf(`"value %d"`, i)}
		if i%2 == 0 {
			v.Enabled = `self != "bob"`
		}
		if _, err := svc.RegisterView(ctx, pr, "gv", v); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := svc.Context(ctx, readers[i%2], "gv", substrate.ContextRequest{Only: []string{"views"}}); err != nil {
			b.Fatal(err)
		}
	}
}
