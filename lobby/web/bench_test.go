package web_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/lobby/teamroom"
	"github.com/syncsubstrate/sync/lobby/web"
	"github.com/syncsubstrate/sync/substrate"
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

// BenchmarkWriteToPageRealSize measures, in one sitting, how long a write
// takes to reach an open room page's live stream (the write, the read and
// render for the page, the diff, the event) on the real-size room of
// issue 42 (lobby/teamroom) beside a room of one key, and how big the
// page's first load is (the HTML; its script and stylesheet are the same
// for every room):
//
//	go test ./lobby/web -run '^$' -bench WriteToPageRealSize -benchtime 30x
func BenchmarkWriteToPageRealSize(b *testing.B) {
	for _, c := range []struct{ name, room, person string }{{"one-key", "lab", "alice"}, {"launch", "launch", "maya"}} {
		b.Run(c.name, func(b *testing.B) {
			s := newSiteTB(b, web.Options{}, "alice", "maya", "raj")
			ctx := context.Background()
			if c.room == "launch" {
				if _, err := teamroom.Build(ctx, s.svc, s.lob, teamroom.Options{}); err != nil {
					b.Fatal(err)
				}
			}
			admin := substrate.RoomPrincipal(c.room)
			write := func(v string) string {
				if _, err := s.svc.WriteState(ctx, admin, c.room, []substrate.Write{{Scope: "_shared", Key: "x", Value: []byte(v)}}, false); err != nil {
					b.Fatal(err)
				}
				r, err := s.svc.GetRoom(ctx, admin, c.room)
				if err != nil {
					b.Fatal(err)
				}
				return strconv.FormatInt(r.Seq, 10)
			}
			seq := write("0")
			_, _, page := s.get(c.person, "/rooms/"+c.room)
			events := s.stream(c.person, "/live/rooms/"+c.room+"?seq="+seq, "")
			s.liveSettled()
			var took []time.Duration
			var bytes int
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				seq := write(strconv.Itoa(i + 1))
				// The id is "<seq>" or, when a timer is due, "<seq>-<ms>".
				var ev string
				for !strings.HasPrefix(ev, "id: "+seq+"\n") && !strings.HasPrefix(ev, "id: "+seq+"-") {
					ev = next(b, events, 10*time.Second)
				}
				took = append(took, time.Since(start))
				bytes += len(ev)
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50_ms")
			b.ReportMetric(float64(took[len(took)*9/10].Microseconds())/1000, "p90_ms")
			b.ReportMetric(float64(bytes)/float64(b.N)/1024, "event_KiB")
			b.ReportMetric(float64(len(page))/1024, "page_KiB")
		})
	}
}

// BenchmarkRoomPageDeepValue renders the room page of a room holding
// issue 41's value (some 40 KB nested 9,900 levels, stored before values'
// nesting was bounded) beside ordinary entries, as its owner: one load at
// a time ("one"), and six at once ("six", reporting the process's peak
// RSS and the page time of an unrelated room loaded meanwhile):
//
//	go test ./lobby/web -run '^$' -bench RoomPageDeepValue -benchmem -benchtime 5x
func BenchmarkRoomPageDeepValue(b *testing.B) {
	s := newSiteB(b)
	for i := range 20 {
		s.write("_shared", fmt.Sprint("k", i), fmt.Sprintf(`{"n": %d, "s": "ordinary"}`, i))
	}
	s.legacyValue("_shared", "deep", deepJSON(9900))
	if code, _, page := s.get("alice", "/rooms/lab"); code != 200 || !strings.Contains(page, "deep") {
		b.Fatalf("%d: %.300s", code, page)
	}
	b.Run("one", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.get("alice", "/rooms/lab")
		}
	})
	b.Run("six", func(b *testing.B) {
		// The unrelated room: alice's own, with ordinary entries only.
		other, err := s.svc.CreateRoom(context.Background(), substrate.CreateRoomRequest{ID: "calm"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.lob.ClaimRoom(context.Background(), "user_alice", "calm", other.Token, false); err != nil {
			b.Fatal(err)
		}
		// site.get gives up after 5 s, which six loads of the deep value
		// took before pages formatted within their budget.
		client := &http.Client{Timeout: 5 * time.Minute}
		load := func(path string) {
			req, _ := http.NewRequest("GET", s.srv.URL+path, nil)
			req.Header.Set("Accept", "text/html")
			req.AddCookie(&http.Cookie{Name: "test_person", Value: "alice"})
			res, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		b.ReportAllocs()
		var calm []time.Duration
		for b.Loop() {
			var wg sync.WaitGroup
			for range 6 {
				wg.Go(func() { load("/rooms/lab") })
			}
			start := time.Now()
			load("/rooms/calm")
			calm = append(calm, time.Since(start))
			wg.Wait()
		}
		slices.Sort(calm)
		b.ReportMetric(float64(calm[len(calm)/2].Microseconds())/1000, "calm_p50_ms")
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		b.ReportMetric(float64(ru.Maxrss)/1024, "peak_rss_MB")
	})
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
