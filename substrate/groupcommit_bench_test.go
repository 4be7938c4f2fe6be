package substrate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
)

// Invocations of the bench's "move" action (an `if` and two writes) on
// one room by 1 and by 8 agents at once, without HTTP: the transaction
// part of an invocation, group commit's batches and rounds. The test
// cluster runs with fsync off, so a commit costs less than on a durable
// one (where `syncd bench` measures).
//
//	go test ./substrate -run '^$' -bench BenchmarkGroupCommit -benchtime 4s
func BenchmarkGroupCommit1(b *testing.B) { benchGroupCommit(b, 1) }
func BenchmarkGroupCommit8(b *testing.B) { benchGroupCommit(b, 8) }

func benchGroupCommit(b *testing.B, clients int) {
	svc := substrate.New(pgtest.NewPool(b, store.DefaultMaxConns), substrate.Options{Features: testFeatures})
	b.Cleanup(svc.Close)
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "gc-bench"})
	if err != nil {
		b.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	if _, err := svc.RegisterAction(ctx, admin, "gc-bench", substrate.ActionDef{ID: "move",
		Params: map[string]substrate.ParamSpec{"n": {Type: "integer"}},
		If:     `!has(state._shared.stop) || state._shared.stop == false`,
		Writes: []substrate.WriteTemplate{{Key: "moves", Increment: json.RawMessage(`1`)},
			{Scope: "${self}", Key: "last", Value: json.RawMessage(`"${params.n}"`)}}}); err != nil {
		b.Fatal(err)
	}
	agents := make([]*substrate.Principal, clients)
	for i := range agents {
		j, err := svc.Join(ctx, admin, "gc-bench", substrate.JoinRequest{ID: fmt.Sprint("agent", i), Name: "a"})
		if err != nil {
			b.Fatal(err)
		}
		agents[i], _ = svc.Authenticate(ctx, j.Token)
	}
	before := svc.Stats()
	var mu sync.Mutex
	var ds []time.Duration
	var wg sync.WaitGroup
	b.ResetTimer()
	next := make(chan int)
	go func() {
		for i := 0; i < b.N; i++ {
			next <- i
		}
		close(next)
	}()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for i := range next {
				t0 := time.Now()
				if _, err := svc.Invoke(ctx, agents[c], "gc-bench", "move", json.RawMessage(fmt.Sprintf(`{"n": %d}`, i))); err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			ds = append(ds, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	b.StopTimer()
	after := svc.Stats()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "invokes/s")
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	if len(ds) > 0 {
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50_ms")
		b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, "p99_ms")
	}
	if tx := after.GroupBatches - before.GroupBatches; tx > 0 {
		b.ReportMetric(float64(after.GroupInvocations-before.GroupInvocations)/float64(tx), "invokes/tx")
		b.ReportMetric(float64(after.GroupRounds-before.GroupRounds)/float64(tx), "rounds/tx")
	}
}
