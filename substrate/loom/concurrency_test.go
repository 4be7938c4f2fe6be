package loom_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// Many models on a 2-connection pool, each result summarised by the
// generator: the generator is called with no connection held (three calls
// must be in flight at once, which two held connections would forbid), and
// every model's memory and markers stay its own.
func TestLoomForModelConcurrentTinyPool(t *testing.T) {
	var mu sync.Mutex
	inflight, most := 0, 0
	release := make(chan struct{})
	gen := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inflight++
		most = max(most, inflight)
		if inflight == 3 {
			close(release)
		}
		mu.Unlock()
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		mu.Lock()
		inflight--
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"text":" a short summary"}]}`))
	}))
	defer gen.Close()
	svc := substrate.New(pgtest.NewPool(t, 2), substrate.Options{Features: testFeatures})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "loom"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	l := loom.Attach(svc, loom.Options{GeneratorURL: gen.URL})
	long := strings.Repeat("The rain kept falling on the roof of the old house. ", 80)
	if _, err := l.Run(ctx, admin, "loom", `→ new tree "t" "`+long+`"`); err != nil {
		t.Fatal(err)
	}
	const n = 8
	agents := make([]*substrate.Principal, n)
	for i := range agents {
		id := fmt.Sprintf("m%d", i)
		j, err := svc.Join(ctx, admin, "loom", substrate.JoinRequest{ID: id, Name: id})
		if err != nil {
			t.Fatal(err)
		}
		agents[i], _ = svc.Authenticate(ctx, j.Token)
		if _, err := l.Run(ctx, admin, "loom", "→ permit "+id+" loom_write"); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for i, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.ForModel(ctx, a, "loom", "→ view 1"); err != nil {
				errc <- err
				return
			}
			if _, err := l.ForModel(ctx, a, "loom", fmt.Sprintf("→ branch from 1 \"line of m%d\"\n→ pin 1", i)); err != nil {
				errc <- err
				return
			}
			res, err := l.ForModel(ctx, a, "loom", "→ memory")
			if err != nil {
				errc <- err
				return
			}
			own := fmt.Sprintf(`branch from 1 "line of m%d"`, i)
			if !strings.Contains(res.Text, "⟨r3: shown once") || !strings.Contains(res.Text, own) ||
				!strings.Contains(res.Text, "pin 1: The rain") || strings.Count(res.Text, `"line of m`) != 2 {
				errc <- fmt.Errorf("m%d's result:\n%s", i, res.Text)
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if most < 3 {
		t.Fatalf("at most %d generator calls in flight: a connection is held while the generator runs", most)
	}
}
