package web_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/lobby/web"
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
	time.Sleep(200 * time.Millisecond) // the first sections are read
	reads0, renders0 := web.LiveCounts(s.wb)
	const writes = 5
	for i := range writes {
		s.write("_shared", "x", fmt.Sprint(i))
		want := "id: " + s.seq() + "\n"
		for k, ev := range streams {
			deadline := time.After(10 * time.Second)
		follow:
			for {
				select {
				case e := <-ev:
					if strings.HasPrefix(e, want) {
						break follow
					}
				case <-deadline:
					t.Fatalf("stream %d missed write %d", k, i)
				}
			}
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
	}
	for i := range 30 {
		s.write("_shared", "x", fmt.Sprint(i))
	}
	time.Sleep(300 * time.Millisecond)
	// Three readers (alice twice): two authorities (the owners share
	// one), three sections.
	if feeds, held := web.LiveFeeds(s.wb); feeds != 1 || held > 5 {
		t.Fatalf("after 30 writes: %d feeds holding %d renders, want 1 holding at most 5", feeds, held)
	}
	settles := func(what string, wantFeeds, wantHeld int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			feeds, held := web.LiveFeeds(s.wb)
			if feeds == wantFeeds && held <= wantHeld {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d feeds holding %d renders, want %d holding at most %d", what, feeds, held, wantFeeds, wantHeld)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// bob's stream closes: his read (the observer's) and section go.
	cancels[1]()
	settles("bob's stream closed", 1, 3)
	for _, cancel := range cancels {
		cancel()
	}
	settles("every stream closed", 0, 0)
}
