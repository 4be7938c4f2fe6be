package web_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"syscall"
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
		s.liveSettled()
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

// BenchmarkLiveStreamsOneRoom follows one room with 20 live streams and
// reports what one write costs the process: CPU (server and client share
// the process; PostgreSQL runs apart), database pool acquisitions, and the
// time until all 20 streams hold the write, and how many times the room
// was read and its section rendered for them (livefeed.go). "tabs" is one person's 20
// tabs (one view of the room); "people" is 5 tabs each of two owners, an
// observer and a view link (four views, three authorities):
//
//	go test ./lobby/web -run '^$' -bench LiveStreamsOneRoom -benchtime 20x
func BenchmarkLiveStreamsOneRoom(b *testing.B) {
	for _, c := range []struct {
		name    string
		viewers []string // person, or "" for the view link
	}{
		{"tabs", []string{"alice"}},
		{"people", []string{"alice", "carol", "bob", ""}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := newSiteTB(b, web.Options{MaxStreams: 64}, "alice", "bob", "carol")
			ctx := context.Background()
			if err := s.lob.AddMember(ctx, "user_carol", "lab", "owner", "", ""); err != nil {
				b.Fatal(err)
			}
			if err := s.lob.AddMember(ctx, "user_bob", "lab", "observer", "", ""); err != nil {
				b.Fatal(err)
			}
			s.write("_shared", "x", "0")
			seq := s.seq()
			var streams []<-chan string
			for i := range 20 {
				who := c.viewers[i%len(c.viewers)]
				path := "/live/rooms/lab?seq=" + seq
				if who == "" {
					path += "&view=" + s.room.ViewToken
				}
				streams = append(streams, s.stream(who, path, ""))
			}
			s.liveSettled() // first renders done
			var r0, r1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
			a0 := s.db.Status().Acquires
			reads0, renders0 := web.LiveCounts(s.wb)
			start := time.Now()
			b.ResetTimer()
			for i := range b.N {
				s.write("_shared", "x", strconv.Itoa(i+1))
				seq := s.seq()
				for k, ev := range streams {
					nextAt(b, ev, seq, fmt.Sprintf("stream %d, write %d", k, i))
				}
			}
			b.StopTimer()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
			cpu := time.Duration(r1.Utime.Nano()+r1.Stime.Nano()-r0.Utime.Nano()-r0.Stime.Nano()) * time.Nanosecond
			n := float64(b.N)
			b.ReportMetric(float64(cpu.Microseconds())/1000/n, "cpu_ms/write")
			b.ReportMetric(float64(s.db.Status().Acquires-a0)/n, "acquires/write")
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000/n, "ms/write")
			reads, renders := web.LiveCounts(s.wb)
			b.ReportMetric(float64(reads-reads0)/n, "reads/write")
			b.ReportMetric(float64(renders-renders0)/n, "renders/write")
		})
	}
}

// BenchmarkRoomPageTeamRoom renders the real-size room's page
// (lobby/teamroom) for its owner, as a browser asks for it, and reports
// its size:
//
//	go test ./lobby/web -run '^$' -bench RoomPageTeamRoom -benchtime 20x
func BenchmarkRoomPageTeamRoom(b *testing.B) {
	s, room := newTeamSite(b, web.Options{})
	var size int
	b.ResetTimer()
	for range b.N {
		code, _, page := s.get("maya", "/rooms/"+room.ID)
		if code != 200 {
			b.Fatalf("the room page: %d", code)
		}
		size = len(page)
	}
	b.ReportMetric(float64(size)/1024, "page_KiB")
}
