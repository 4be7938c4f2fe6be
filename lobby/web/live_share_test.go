package web_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/lobby/web"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// Live streams that would render the same section share one render of
// each change: twelve tabs of one person and six of a view link (two
// views of the room) on a two-connection pool cost two reads and two
// renders per write, not eighteen; and every stream still gets every
// write.
func TestLiveStreamsRenderOncePerView(t *testing.T) {
	s := newSite(t, web.Options{MaxStreams: 64}, "alice")
	seq := s.seq()
	var streams []<-chan string
	for i := range 18 {
		path, who := "/live/rooms/lab?seq="+seq, "alice"
		if i%3 == 0 {
			path, who = path+"&view="+s.room.ViewToken, ""
		}
		streams = append(streams, s.stream(who, path, ""))
	}
	s.liveSettled() // the first sections are read
	reads0, renders0 := web.LiveCounts(s.wb)
	const writes = 5
	for i := range writes {
		s.write("_shared", "x", fmt.Sprint(i))
		seq := s.seq()
		for k, ev := range streams {
			nextAt(t, ev, seq, fmt.Sprintf("stream %d, write %d", k, i))
		}
	}
	reads, renders := web.LiveCounts(s.wb)
	if r, n := reads-reads0, renders-renders0; r > 2*writes || n > 2*writes {
		t.Fatalf("%d writes to a room two views follow cost %d reads and %d renders: want at most %d each", writes, r, n, 2*writes)
	}
}

// A feed holds renders for the streams open now, not per seq: a reader's
// go with their last stream, and the feed with the room's last.
func TestLiveFeedMemoryBounded(t *testing.T) {
	s := newSite(t, web.Options{MaxStreams: 64}, "alice", "bob", "carol")
	s.share("bob", "observer")
	s.share("carol", "owner")
	var cancels []context.CancelFunc
	for _, who := range []string{"alice", "bob", "carol", "alice"} {
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", s.srv.URL+"/live/rooms/lab", nil)
		req.AddCookie(&http.Cookie{Name: "test_person", Value: who})
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		s.opened++
	}
	for i := range 30 {
		s.write("_shared", "x", fmt.Sprint(i))
	}
	s.liveSettled()
	// Three readers (alice twice): two authorities (the owners share
	// one), three sections.
	if feeds, held := web.LiveFeeds(s.wb); feeds != 1 || held > 5 {
		t.Fatalf("after 30 writes: %d feeds holding %d renders, want 1 holding at most 5", feeds, held)
	}
	settles := func(what string, wantFeeds, wantHeld int) {
		t.Helper()
		pgtest.Eventually(t, 5*time.Second, func() bool {
			feeds, held := web.LiveFeeds(s.wb)
			return feeds == wantFeeds && held <= wantHeld
		}, "%s: %d feeds holding at most %d renders (%v feeds, renders)", what, wantFeeds, wantHeld, func() any { f, h := web.LiveFeeds(s.wb); return []int{f, h} })
	}
	// bob's stream closes: his read (the observer's) and section go.
	cancels[1]()
	settles("bob's stream closed", 1, 3)
	for _, cancel := range cancels {
		cancel()
	}
	settles("every stream closed", 0, 0)
}

// Streams come and go while the room changes, on a two-connection pool:
// a feed is made, shared and ended concurrently (the race detector
// watches), every stream that stays hears the last write, and nothing is
// left once all have gone.
func TestLiveFeedChurn(t *testing.T) {
	s := newSite(t, web.Options{MaxStreams: 64}, "alice", "bob")
	s.share("bob", "observer")
	open := func(ctx context.Context, i int) (*http.Response, error) {
		path, who := "/live/rooms/lab", []string{"alice", "bob", ""}[i%3]
		if who == "" {
			path += "?view=" + s.room.ViewToken
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", s.srv.URL+path, nil)
		req.AddCookie(&http.Cookie{Name: "test_person", Value: who})
		return http.DefaultClient.Do(req)
	}
	stop := make(chan struct{})
	var writer, churn sync.WaitGroup
	var writes atomic.Int64
	writer.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s.write("_shared", "churn", fmt.Sprint(i))
			writes.Add(1)
			time.Sleep(15 * time.Millisecond) // pacing: a write every 15 ms, a busy room, not a wait
		}
	})
	for g := range 12 {
		churn.Go(func() {
			for round := range 4 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(20+10*((g+round)%5))*time.Millisecond)
				if res, err := open(ctx, g+round); err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
				cancel()
			}
		})
	}
	// Those that stay.
	var stay []<-chan string
	for i := range 6 {
		who, path := []string{"alice", "bob", ""}[i%3], "/live/rooms/lab"
		if who == "" {
			path += "?view=" + s.room.ViewToken
		}
		stay = append(stay, s.stream(who, path, ""))
	}
	// The room changes while those stay and the others come and go.
	from := writes.Load()
	churn.Wait()
	pgtest.Eventually(t, 20*time.Second, func() bool { return writes.Load() >= from+20 }, "20 writes while the streams stay")
	close(stop)
	writer.Wait()
	s.write("_shared", "last", `"done"`)
	seq := s.seq()
	for k, ev := range stay {
		if e := nextAt(t, ev, seq, fmt.Sprintf("stream %d, the last write", k)); !strings.Contains(e, "last") {
			t.Errorf("stream %d: the last write's event does not name it: %s", k, e)
		}
	}
	if feeds, _ := web.LiveFeeds(s.wb); feeds != 1 {
		t.Fatalf("%d feeds for one room", feeds)
	}
}
