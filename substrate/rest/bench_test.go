package rest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/rest"
)

// Benchmarks of the REST API over real HTTP and PostgreSQL. They use the
// throwaway test cluster (fsync off) unless SYNC_TEST_DATABASE_URL points
// at a server; for numbers comparable with pgbench, point it at a durable
// cluster and run testdata/pgbench_write.sql against the same one (see the
// README's Performance section).
//
//	go test ./substrate/rest -run '^$' -bench . -benchtime 5s

type benchEnv struct {
	b   *testing.B
	srv *httptest.Server
	cli *http.Client
}

func newBench(b *testing.B) *benchEnv {
	db := pgtest.New(b)
	svc := substrate.New(db, substrate.Options{})
	b.Cleanup(svc.Close)
	srv := httptest.NewServer(rest.Handler(svc, rest.Options{RatePerSecond: -1}))
	b.Cleanup(srv.Close)
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	return &benchEnv{b: b, srv: srv, cli: &http.Client{Transport: tr}}
}

func (e *benchEnv) do(method, path, token string, body any) []byte {
	var rd io.Reader
	if body != nil {
		buf, _ := json.Marshal(body)
		rd = bytes.NewReader(buf)
	}
	req, _ := http.NewRequest(method, e.srv.URL+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := e.cli.Do(req)
	if err != nil {
		e.b.Fatal(err)
	}
	out, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode >= 300 {
		e.b.Fatalf("%s %s: %d %s", method, path, res.StatusCode, out)
	}
	return out
}

func (e *benchEnv) room(id string) string {
	var r struct{ Token string }
	_ = json.Unmarshal(e.do("POST", "/rooms", "", map[string]any{"id": id}), &r)
	return r.Token
}

// One client writing one key of one room, back to back.
func BenchmarkWriteOneRoomSerial(b *testing.B) {
	e := newBench(b)
	tok := e.room("bench")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.do("PUT", "/rooms/bench/state", tok, map[string]any{"scope": "_shared", "key": "counter", "value": i})
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
}

// Eight clients writing to one room: they serialise on the room lock.
func BenchmarkWriteOneRoom8Clients(b *testing.B) {
	e := newBench(b)
	tok := e.room("bench")
	var n atomic.Int64
	b.SetParallelism(4) // 4 × GOMAXPROCS(2) = 8 clients on CI's 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprint("k", n.Add(1))
		for i := 0; pb.Next(); i++ {
			e.do("PUT", "/rooms/bench/state", tok, map[string]any{"scope": "_shared", "key": key, "value": i})
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
}

// Eight clients, each on its own room: rooms proceed in parallel.
func BenchmarkWriteManyRooms8Clients(b *testing.B) {
	e := newBench(b)
	const rooms = 64
	toks := make([]string, rooms)
	for i := range toks {
		toks[i] = e.room(fmt.Sprint("bench", i))
	}
	var n atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			r := int(n.Add(1)) % rooms
			e.do("PUT", fmt.Sprintf("/rooms/bench%d/state", r), toks[r], map[string]any{"scope": "_shared", "key": "k", "value": i})
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
}

// A whole-state read of a room with 500 keys (about 60 KB of JSON).
func BenchmarkReadState500Keys(b *testing.B) {
	e := newBench(b)
	tok := e.room("bench")
	for batch := 0; batch < 5; batch++ {
		writes := make([]any, 100)
		for i := range writes {
			writes[i] = map[string]any{"scope": "_shared", "key": fmt.Sprintf("key-%03d", batch*100+i),
				"value": map[string]any{"n": i, "label": "some short text", "done": i%2 == 0}}
		}
		e.do("PUT", "/rooms/bench/state/batch", tok, map[string]any{"writes": writes})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.do("GET", "/rooms/bench/state", tok, nil)
	}
}
