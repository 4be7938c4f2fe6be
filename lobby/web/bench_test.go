package web_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/lobby/web"
)

// BenchmarkHundredLiveStreams opens 100 live streams on one room and
// reports what each costs the process (server and client share it, so
// this is an upper bound for the server) and how long one write takes to
// reach all of them:
//
//	go test ./lobby/web -run '^$' -bench HundredLiveStreams -benchtime 5x
func BenchmarkHundredLiveStreams(b *testing.B) {
	for range b.N {
		b.StopTimer()
		s := newSiteB(b)
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		streams := make([]<-chan string, 100)
		for i := range streams {
			streams[i] = s.stream("alice", "/live/rooms/lab", "")
		}
		time.Sleep(200 * time.Millisecond)
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/1024/100, "heap_KiB/stream")
		b.ReportMetric(float64(runtime.NumGoroutine()-g0)/100, "goroutines/stream")
		b.StartTimer()
		start := time.Now()
		s.write("_shared", "x", "1")
		for _, ev := range streams {
			select {
			case <-ev:
			case <-time.After(5 * time.Second):
				b.Fatal("a stream missed the write")
			}
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "ms_to_all_100")
	}
}

func newSiteB(b *testing.B) *site { return newSiteTB(b, web.Options{MaxStreams: 200}, "alice") }
