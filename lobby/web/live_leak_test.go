package web_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/lobby/web"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate/ctxtest"
)

// A live page holds nothing per update on its request's context: it stays
// open for hours on a busy room. Each render's reads were admitted to the
// room's expression budget on the stream's own context, whose release ran
// only when the page closed: one registration per update kept meanwhile
// (the soak of issue 32 saw 9,700 goroutines started at once when four
// pages closed after ten minutes, and the resident set grow).
func TestLiveStreamHoldsNothingPerUpdate(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	wb, err := web.New(web.Options{Lobby: s.lob, Substrate: s.svc, SignedIn: func(r *http.Request) (string, string, bool) {
		c, err := r.Cookie("test_person")
		if err != nil {
			return "", "", false
		}
		return "user_" + c.Value, c.Value, true
	}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	wb.Routes(mux)
	var held atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r.WithContext(ctxtest.NewCounting(r.Context(), &held)))
	}))
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/live/rooms/lab", nil)
	req.AddCookie(&http.Cookie{Name: "test_person", Value: "alice"})
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("live stream: %d", res.StatusCode)
	}
	updates := make(chan struct{}, 64)
	go func() {
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "event: change") {
				updates <- struct{}{}
			}
		}
	}()
	// The first section is read before the first write: the stream, which
	// said no seq, takes the room as it reads it for what the page shows.
	pgtest.Eventually(t, 30*time.Second, func() bool { started, _ := web.LiveSettled(wb); return started >= 1 }, "the live stream's first section")
	const n = 20
	for i := range n {
		s.write("_shared", "x", strings.Repeat("1", i+1))
		select {
		case <-updates:
		case <-time.After(10 * time.Second):
			t.Fatalf("no update %d within 10 s", i)
		}
	}
	// The last render may still be finishing after its event was sent.
	pgtest.Eventually(t, 5*time.Second, func() bool { return held.Load() <= 1 },
		"the stream's context to hold at most 1 registration after %d updates (none per update); it holds %d", n, func() any { return held.Load() })
	if h := held.Load(); h > 1 {
		t.Fatalf("after %d updates the stream's context holds %d registrations, want at most 1 (none per update)", n, h)
	}
}
