package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// loadRoom is one room of TestCitusWorkerKilledMidLoad and what its
// clients saw.
type loadRoom struct {
	id, token string
	worker    *pgtest.Worker
	mu        sync.Mutex
	acked     []string
	// ok counts 200s, unavailable 503s with the unavailable code; bad
	// holds any other answer (a 500, a hang, another code).
	ok, unavailable atomic.Int64
	bad             []string
	// slowest is the longest a 503 took; hint one 503's hint.
	slowest time.Duration
	hint    string
}

// invokeLoop invokes "record" in r with fresh ids until stop is closed,
// recording each answer. A request that takes past the client's timeout
// is a hang.
func (r *loadRoom) invokeLoop(base string, client int, stop <-chan struct{}) {
	hc := &http.Client{Timeout: 30 * time.Second}
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		id := fmt.Sprintf("c%d-%d", client, i)
		req, _ := http.NewRequest("POST", base+"/rooms/"+r.id+"/actions/record/invoke", strings.NewReader(`{"params":{"id":"`+id+`"}}`))
		req.Header.Set("Authorization", "Bearer "+r.token)
		began := time.Now()
		res, err := hc.Do(req)
		if err != nil {
			r.note(fmt.Sprintf("%s after %v: %v", id, time.Since(began).Round(time.Millisecond), err))
			continue
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var out struct{ Error, Hint string }
		_ = json.Unmarshal(body, &out)
		switch {
		case res.StatusCode == 200:
			r.mu.Lock()
			r.acked = append(r.acked, id)
			r.mu.Unlock()
			r.ok.Add(1)
		case res.StatusCode == 503 && out.Error == "unavailable" && out.Hint != "" && res.Header.Get("Retry-After") != "":
			r.unavailable.Add(1)
			r.mu.Lock()
			r.slowest = max(r.slowest, time.Since(began))
			r.hint = out.Hint
			r.mu.Unlock()
			time.Sleep(50 * time.Millisecond) // as a client honouring Retry-After would, briefly
		default:
			r.note(fmt.Sprintf("%s: %d %s", id, res.StatusCode, body))
		}
	}
}

func (r *loadRoom) note(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bad = append(r.bad, s)
}

// kill -9 of a Citus worker while clients invoke in rooms on both
// workers, against a real syncd: the rooms on the other worker keep
// working (and a wait on a second process is woken across processes
// meanwhile), calls to the dead worker's rooms are answered at once with
// a clear 503 (never a 500, never a hang; a wait there too), and once
// the worker is back its rooms work again, with every invocation
// acknowledged before, during or after the kill in state, none
// half-applied.
func TestCitusWorkerKilledMidLoad(t *testing.T) {
	if !pgtest.Citus() {
		t.Skip("needs a Citus cluster: " + pgtest.CitusEnv + "=2")
	}
	dbURL := pgtest.URL(t)
	base, _ := startChildProc(t, dbURL)

	// Two rooms on each worker.
	workers := pgtest.Workers(t)
	if len(workers) < 2 {
		t.Fatalf("%d workers, want 2", len(workers))
	}
	per := map[int]int{}
	var rooms []*loadRoom
	for i := 0; len(rooms) < 4; i++ {
		id := fmt.Sprintf("load-%d", i)
		w := pgtest.WorkerOf(t, dbURL, id)
		if w.Index > 1 || per[w.Index] == 2 {
			continue
		}
		per[w.Index]++
		rooms = append(rooms, &loadRoom{id: id, token: recordRoom(t, base, id), worker: w})
	}
	dead, alive := workers[0], workers[1]
	// A second process serves waits: woken across processes through the
	// coordinator's notifications (the re-check is a minute off).
	waits := startChild(t, dbURL, "-wait-recheck", "60s")
	var onDead, onAlive *loadRoom
	for _, r := range rooms {
		if r.worker.Index == dead.Index {
			onDead = r
		} else {
			onAlive = r
		}
	}
	waiter := map[*loadRoom]string{}
	for _, r := range []*loadRoom{onDead, onAlive} {
		code, ag := call(t, "POST", base+"/rooms/"+r.id+"/agents", r.token, `{"id":"waiter","name":"W"}`)
		if code != 201 {
			t.Fatalf("agent in %s: %d %v", r.id, code, ag)
		}
		waiter[r] = ag["token"].(string)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, r := range rooms {
		for c := range 2 {
			wg.Go(func() { r.invokeLoop(base, c, stop) })
		}
	}
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer halt()
	defer func() {
		if t.Failed() {
			for _, r := range rooms {
				r.mu.Lock()
				t.Logf("room %s on %v: %d ok, %d unavailable, %d other answers: %.3q", r.id, r.worker, r.ok.Load(), r.unavailable.Load(), len(r.bad), r.bad)
				r.mu.Unlock()
			}
		}
	}()
	sum := func(f func(*loadRoom) int64, on *pgtest.Worker) int64 {
		var n int64
		for _, r := range rooms {
			if r.worker.Index == on.Index {
				n += f(r)
			}
		}
		return n
	}
	oks := func(r *loadRoom) int64 { return r.ok.Load() }
	unavailable := func(r *loadRoom) int64 { return r.unavailable.Load() }
	pgtest.Eventually(t, 60*time.Second, func() bool { return sum(oks, dead) >= 20 && sum(oks, alive) >= 20 }, "20 invocations acknowledged on each worker")

	dead.Kill(t)
	killed := time.Now()
	aliveAtKill := sum(oks, alive)
	pgtest.Eventually(t, 60*time.Second, func() bool { return sum(unavailable, dead) >= 10 }, "the dead worker's rooms to answer 503")
	// Past the first answers (those in flight at the kill), the other
	// worker's rooms go on.
	aliveMid := sum(oks, alive)
	pgtest.Eventually(t, 60*time.Second, func() bool { return sum(oks, alive) >= aliveMid+20 }, "the live worker's rooms to keep working")
	// A wait on the other process for a room on the live worker is
	// woken by an invocation on this one; a wait in a room on the dead
	// worker is answered (503, or its timeout), not held.
	type answer struct {
		code int
		body map[string]any
		took time.Duration
	}
	wait := func(r *loadRoom, timeout int, key string) <-chan answer {
		got := make(chan answer, 1)
		go func() {
			began := time.Now()
			code, body := call(t, "GET", fmt.Sprintf("%s/rooms/%s/wait?timeout=%d&condition=%s", waits, r.id, timeout,
				url.QueryEscape(`"`+key+`" in state._shared`)), waiter[r], "")
			got <- answer{code, body, time.Since(began)}
		}()
		return got
	}
	deadWait := wait(onDead, 3000, "r-never")
	liveWait := wait(onAlive, 30000, "r-wake")
	parked(t, waits, onAlive.id, onAlive.token, "waiter", time.Now().Add(20*time.Second))
	sent := time.Now()
	if code, out := call(t, "POST", base+"/rooms/"+onAlive.id+"/actions/record/invoke", onAlive.token, `{"params":{"id":"wake"}}`); code != 200 {
		t.Fatalf("invoke to wake the waiter: %d %v", code, out)
	}
	select {
	case a := <-liveWait:
		if a.code != 200 || a.body["triggered"] != true || time.Since(sent) > 5*time.Second {
			t.Errorf("wait in %s on the other process, the worker of %s dead: %d %v, %v after the invocation", onAlive.id, onDead.id, a.code, a.body, time.Since(sent))
		}
	case <-time.After(25 * time.Second):
		t.Errorf("the waiter in %s on the other process was not woken while %v was down", onAlive.id, dead)
	}
	select {
	case a := <-deadWait:
		if a.code != 503 && (a.code != 200 || a.body["triggered"] == true) {
			t.Errorf("wait in %s on the dead worker: %d %v", onDead.id, a.code, a.body)
		}
		t.Logf("wait in %s on the dead worker: %d after %v", onDead.id, a.code, a.took.Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Errorf("a wait in %s on the dead worker was held past its 3 s timeout", onDead.id)
	}
	// Readiness says which worker is down, and stays 200: this process
	// serves the other worker's rooms.
	if code, rz := call(t, "GET", base+"/readyz", "", ""); code != 200 || !strings.Contains(fmt.Sprint(rz["workers"]), fmt.Sprintf(":%d", dead.Port)) ||
		!strings.HasPrefix(fmt.Sprint(rz["status"]), "degraded") {
		t.Errorf("/readyz with %v down: %d %v", dead, code, rz)
	}
	// Down a while: the dead worker's rooms go on answering 503 without
	// waiting for it.
	time.Sleep(time.Until(killed.Add(3 * time.Second)))
	t.Logf("while %v was down (%v): %d acknowledged on %v, %d answered 503 on the dead one",
		dead, time.Since(killed).Round(time.Millisecond), sum(oks, alive)-aliveAtKill, alive, sum(unavailable, dead))

	deadAtRestart := sum(oks, dead)
	dead.Restart(t)
	pgtest.Eventually(t, 90*time.Second, func() bool { return sum(oks, dead) >= deadAtRestart+20 }, "the dead worker's rooms to work again once it is back")
	if code, rz := call(t, "GET", base+"/readyz", "", ""); code != 200 || rz["status"] != "ready" || fmt.Sprint(rz["workers"]) != "map[up:2]" {
		t.Errorf("/readyz with both workers back: %d %v", code, rz)
	}
	halt()

	for _, r := range rooms {
		r.mu.Lock()
		bad, slowest, hint := r.bad, r.slowest, r.hint
		r.mu.Unlock()
		if slowest > 10*time.Second {
			t.Errorf("room %s on %v: a 503 took %v", r.id, r.worker, slowest)
		}
		if hint != "" {
			t.Logf("room %s: slowest 503 %v, hint %q", r.id, slowest.Round(time.Millisecond), hint)
		}
		for i, b := range bad {
			if i == 5 {
				t.Errorf("room %s: %d more", r.id, len(bad)-5)
				break
			}
			t.Errorf("room %s on %v: %s", r.id, r.worker, b)
		}
		checkRecorded(t, dbURL, r.id, r.acked)
		if code, out := call(t, "POST", base+"/rooms/"+r.id+"/actions/record/invoke", r.token, `{"params":{"id":"after"}}`); code != 200 {
			t.Errorf("room %s after the worker came back: %d %v", r.id, code, out)
		}
	}
}
