package rest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/rest"
)

// newEnvSvc is newEnvWith that also hands back the service and database,
// for tests that run the janitor or reach past the API.
func newEnvSvc(t *testing.T, lim substrate.Limits) (*env, *substrate.Service, *store.DB) {
	t.Helper()
	db := pgtest.New(t)
	svc := substrate.New(db, substrate.Options{Features: testFeatures, Limits: lim, Wait: substrate.WaitOptions{Recheck: time.Minute}})
	t.Cleanup(svc.Close)
	srv := httptest.NewServer(rest.Handler(svc, rest.Options{RatePerSecond: -1}))
	t.Cleanup(srv.Close)
	return &env{t: t, srv: srv, svc: svc}, svc, db
}

// trajectoryLines reads GET …/trajectory?query as JSON Lines.
func (e *env) trajectoryLines(rm room, query string) []map[string]any {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL+"/rooms/"+rm.id+"/trajectory?"+query, nil)
	req.Header.Set("Authorization", "Bearer "+rm.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/x-ndjson" {
		e.t.Fatalf("trajectory: status %d, content type %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	var out []map[string]any
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			e.t.Fatalf("trajectory line %q: %v", sc.Text(), err)
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// comparable is a state read (or a replay) with what depends on the time
// of reading left out: a timer's ms_left.
func comparable(t *testing.T, r resp) map[string]any {
	t.Helper()
	out := map[string]any{"seq": r.body["seq"], "more": r.body["more"]}
	entries, _ := r.body["entries"].([]any)
	for _, x := range entries {
		if tm, ok := x.(map[string]any)["timer"].(map[string]any); ok {
			delete(tm, "ms_left")
		}
	}
	out["entries"] = entries
	return out
}

// The trajectory of a room that saw every kind of write: replay at each
// recorded seq equals the state read back then, the trajectory's deltas
// chain, and a key's history lists each of its versions.
func TestTrajectoryReplayAndHistory(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("traj", nil)
	aTok := e.join(rm, "a")
	bTok := e.join(rm, "b", "_shared", "_messages")

	states := map[int64]map[string]any{} // seq → the room token's state read then
	record := func() {
		r := e.do("GET", "/rooms/traj/state", rm.token, nil).must(t, 200)
		states[r.num("seq")] = comparable(t, r)
	}
	record()
	put := func(tok string, body map[string]any) {
		e.do("PUT", "/rooms/traj/state", tok, body).must(t, 200)
		record()
	}
	put(rm.token, map[string]any{"scope": "_shared", "key": "k", "value": map[string]any{"a": 1}})
	put(aTok, map[string]any{"scope": "a", "key": "secret", "value": "mine"})
	put(rm.token, map[string]any{"scope": "_shared", "key": "k", "merge": map[string]any{"b": []any{1, 2}}})
	put(rm.token, map[string]any{"scope": "_shared", "key": "turns", "increment": 1})
	e.do("PUT", "/rooms/traj/state/batch", bTok, map[string]any{"writes": []any{
		map[string]any{"scope": "_shared", "key": "turns", "increment": 2},
		map[string]any{"scope": "b", "key": "note", "value": nil},
		map[string]any{"scope": "_shared", "key": "turns", "increment": 3},
		map[string]any{"scope": "_messages", "append": true, "value": map[string]any{"body": "appended"}},
	}}).must(t, 200)
	record()
	e.do("PUT", "/rooms/traj/actions", aTok, map[string]any{
		"id": "move", "params": map[string]any{"to": map[string]any{"type": "string"}},
		"writes": []any{
			map[string]any{"key": "board", "merge": map[string]any{"${self}": "${params.to}"}},
			map[string]any{"key": "turns", "increment": 1},
			map[string]any{"scope": "${self}", "key": "last", "value": "${params.to}"},
		},
		"result": `state._shared.turns`,
	}).must(t, 201)
	record()
	e.do("PUT", "/rooms/traj/views", aTok, map[string]any{"id": "turns", "expr": `state._shared.turns`}).must(t, 201)
	record()
	moved := e.invoke(rm, bTok, "move", map[string]any{"to": "e4"}).must(t, 200)
	record()
	e.invoke(rm, aTok, "move", map[string]any{"to": "d5"}).must(t, 200)
	record()
	e.invoke(rm, aTok, "move", map[string]any{"to": 7}).must(t, 400) // refused: audited, changes nothing
	record()
	e.invoke(rm, aTok, "_send_message", map[string]any{"body": "hello", "to": "b"}).must(t, 200)
	record()
	// Timers: one entry lives until the next write to _shared.turns, one
	// for 300 ms, one for a minute.
	put(rm.token, map[string]any{"scope": "_shared", "key": "ticking", "value": 1, "timer": map[string]any{"ticks": 1, "tick_on": "_shared.turns"}})
	put(rm.token, map[string]any{"scope": "_shared", "key": "flash", "value": 2, "timer": map[string]any{"ms": 300}})
	put(rm.token, map[string]any{"scope": "_shared", "key": "minute", "value": 3, "timer": map[string]any{"ms": 60000}})
	time.Sleep(400 * time.Millisecond) // Stays: flash's 300 ms timer ends on the real clock, recorded as such
	put(rm.token, map[string]any{"scope": "_shared", "key": "turns", "increment": 10})
	e.do("DELETE", "/rooms/traj/state?scope=_shared&key=k", rm.token, nil).must(t, 200)
	record()
	put(rm.token, map[string]any{"scope": "_shared", "key": "k", "value": "again"})
	e.do("DELETE", "/rooms/traj/actions/move", aTok, nil).must(t, 200)
	record()

	latest := e.seq(rm)
	if _, ok := states[latest]; !ok {
		t.Fatalf("no state recorded at the latest seq %d", latest)
	}
	if got := path(states[latest], "entries"); !strings.Contains(fmt.Sprint(got), "minute") || strings.Contains(fmt.Sprint(got), "flash") || strings.Contains(fmt.Sprint(got), "ticking") {
		t.Fatalf("timers did not act as the test expects: %v", got)
	}
	// Replay at each recorded seq equals the state read then.
	for seq, want := range states {
		r := e.do("GET", fmt.Sprintf("/rooms/traj/replay?seq=%d", seq), rm.token, nil).must(t, 200)
		if got := comparable(t, r); !reflect.DeepEqual(got, want) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			t.Errorf("replay at %d:\n got %s\nwant %s", seq, g, w)
		}
	}

	// The trajectory: one line per audit entry, in seq order, whose
	// deltas chain (each key's before is its previous after).
	lines := e.trajectoryLines(rm, "")
	if len(lines) < len(states) || lines[0]["seq"] != float64(1) || lines[0]["action"] != "_room_create" {
		t.Fatalf("%d lines, first %v", len(lines), lines[0])
	}
	after := map[string]any{}
	var prev float64
	sawResult, sawRefusal := false, false
	for _, l := range lines {
		seq := l["seq"].(float64)
		if seq <= prev {
			t.Fatalf("seq %v after %v", seq, prev)
		}
		prev = seq
		if l["action"] == "move" && l["ok"] == true && l["seq"] == float64(moved.num("seq")) {
			sawResult = l["result"] == float64(7) && path(l, "params", "to") == "e4" && l["by"] == "b"
		}
		if l["action"] == "move" && l["ok"] == false {
			sawRefusal = len(l["delta"].([]any)) == 0 && l["error"] == "invalid_param"
		}
		for _, x := range l["delta"].([]any) {
			d := x.(map[string]any)
			k := fmt.Sprint(d["scope"], "/", d["key"])
			if d["sort_key"] != nil {
				if d["before"] != nil || d["after"] == nil {
					t.Errorf("append delta %v", d)
				}
				continue
			}
			if was, ok := after[k]; ok && k != "_shared/ticking" && k != "_shared/flash" && !reflect.DeepEqual(d["before"], was) {
				t.Errorf("seq %v: %s before %v, previous after %v", seq, k, d["before"], was)
			}
			after[k] = d["after"]
		}
	}
	if !sawResult || !sawRefusal {
		t.Errorf("trajectory lacks the move's result (%v) or the refused move (%v)", sawResult, sawRefusal)
	}
	// Paging.
	page := e.trajectoryLines(rm, "after=3&limit=2")
	if len(page) != 2 || page[0]["seq"].(float64) <= 3 {
		t.Fatalf("page after=3&limit=2: %v", page)
	}

	// History: each version of _shared.turns, newest first: 18, 8, 7, 6,
	// 1 (the batch incremented it twice in one mutation: one version).
	h := e.do("GET", "/rooms/traj/history?scope=_shared&key=turns", aTok, nil).must(t, 200)
	var values []any
	for _, x := range h.body["versions"].([]any) {
		values = append(values, x.(map[string]any)["value"])
	}
	if fmt.Sprint(values) != "[18 8 7 6 1]" {
		t.Fatalf("history of turns: %v (%s)", values, h.raw)
	}
	// Across a deletion, and paged.
	h = e.do("GET", "/rooms/traj/history?scope=_shared&key=k&limit=2", aTok, nil).must(t, 200)
	vs := h.body["versions"].([]any)
	if len(vs) != 2 || path(vs[0].(map[string]any), "value") != "again" || vs[1].(map[string]any)["deleted"] != true || h.num("next_before") == 0 {
		t.Fatalf("history of k: %s", h.raw)
	}
	h = e.do("GET", fmt.Sprintf("/rooms/traj/history?scope=_shared&key=k&before=%d", h.num("next_before")), aTok, nil).must(t, 200)
	if got := fmt.Sprint(h.body["versions"]); !strings.Contains(got, "b:[1 2]") || len(h.body["versions"].([]any)) != 2 {
		t.Fatalf("older history of k: %s", h.raw)
	}
	// An agent reads its own private key's history.
	h = e.do("GET", "/rooms/traj/history?scope=self&key=secret", aTok, nil).must(t, 200)
	if len(h.body["versions"].([]any)) != 1 {
		t.Fatalf("own history: %s", h.raw)
	}
	e.do("GET", "/rooms/traj/history?scope=_shared&key=never", aTok, nil).must(t, 404)
}

// Retention moves old audit entries to state_archive: the trajectory and
// the replay read them there. History that is gone is refused, not
// replayed wrongly.
func TestTrajectoryReadsArchive(t *testing.T) {
	e, svc, db := newEnvSvc(t, substrate.Limits{KeepLogEntries: 5})
	rm := e.room("arch", nil)
	for i := range 12 {
		e.do("PUT", "/rooms/arch/state", rm.token, map[string]any{"scope": "_shared", "key": fmt.Sprint("k", i%4), "increment": i}).must(t, 200)
	}
	ctx := context.Background()
	if n, err := svc.RetainLogs(ctx); err != nil || n == 0 {
		t.Fatalf("retention moved %d (%v)", n, err)
	}
	live := comparable(t, e.do("GET", "/rooms/arch/state", rm.token, nil).must(t, 200))
	latest := e.seq(rm)
	got := comparable(t, e.do("GET", fmt.Sprintf("/rooms/arch/replay?seq=%d", latest), rm.token, nil).must(t, 200))
	if !reflect.DeepEqual(got, live) {
		t.Fatalf("replay after archiving:\n got %v\nwant %v", got, live)
	}
	if lines := e.trajectoryLines(rm, ""); len(lines) != 13 || lines[0]["seq"] != float64(1) {
		t.Fatalf("trajectory after archiving: %d lines", len(lines))
	}
	h := e.do("GET", "/rooms/arch/history?scope=_shared&key=k1", rm.token, nil).must(t, 200)
	if fmt.Sprint(path(h.body, "versions")) == "" || len(h.body["versions"].([]any)) != 3 {
		t.Fatalf("history across the archive: %s", h.raw)
	}
	// Discard the oldest archived entries: the replay refuses.
	if _, err := db.Exec(ctx, `DELETE FROM state_archive WHERE room_id = 'arch' AND scope = '_audit' AND sort_key BETWEEN 3 AND 4`); err != nil {
		t.Fatal(err)
	}
	r := e.do("GET", fmt.Sprintf("/rooms/arch/replay?seq=%d", latest), rm.token, nil).must(t, 409)
	if r.str("error") != "history_incomplete" || r.str("hint") == "" {
		t.Fatalf("replay over a gap: %s", r.raw)
	}
	e.do("GET", "/rooms/arch/replay?seq=2", rm.token, nil).must(t, 200)
}

// A value over the delta cap is recorded by size and hash; the replay
// names it.
func TestTrajectoryCapsLargeValues(t *testing.T) {
	e := newEnvWith(t, rest.Options{}, substrate.Limits{MaxValueBytes: 64 << 10})
	rm := e.room("big", nil)
	big := strings.Repeat("x", substrate.DeltaValueCap+100)
	e.do("PUT", "/rooms/big/state", rm.token, map[string]any{"scope": "_shared", "key": "big", "value": big}).must(t, 200)
	e.do("PUT", "/rooms/big/state", rm.token, map[string]any{"scope": "_shared", "key": "big", "value": "small"}).must(t, 200)
	lines := e.trajectoryLines(rm, "")
	first := lines[1]["delta"].([]any)[0].(map[string]any)
	second := lines[2]["delta"].([]any)[0].(map[string]any)
	marker, _ := first["after"].(map[string]any)
	if marker["_truncated"] != true || marker["bytes"] != float64(len(big)+2) || len(fmt.Sprint(marker["sha256"])) != 64 {
		t.Fatalf("large after recorded as %.200v", first["after"])
	}
	if !reflect.DeepEqual(second["before"], first["after"]) || second["after"] != "small" {
		t.Fatalf("large before recorded as %v", second["before"])
	}
	r := e.do("GET", fmt.Sprintf("/rooms/big/replay?seq=%d", int64(lines[1]["seq"].(float64))), rm.token, nil).must(t, 200)
	if fmt.Sprint(r.body["truncated"]) != "[_shared.big]" {
		t.Fatalf("replay of a truncated value: %s", r.raw)
	}
}

// A client that stops reading a long trajectory stalls only its own
// stream: the server reads the log a page at a time and holds no database
// connection while it writes, so even with a pool of one connection other
// requests go on.
func TestTrajectoryStreamHoldsNoConnection(t *testing.T) {
	db := pgtest.NewPool(t, 1)
	svc := substrate.New(db, substrate.Options{Features: testFeatures, Limits: substrate.Limits{MaxValueBytes: 64 << 10}, Wait: substrate.WaitOptions{Recheck: time.Minute}})
	t.Cleanup(svc.Close)
	srv := httptest.NewServer(rest.Handler(svc, rest.Options{RatePerSecond: -1}))
	t.Cleanup(srv.Close)
	e := &env{t: t, srv: srv}
	rm := e.room("slow", nil)
	big := strings.Repeat("y", 15<<10) // each delta holds a before and an after: ~30 KiB a line
	const writes = 300
	for i := range writes {
		e.do("PUT", "/rooms/slow/state", rm.token, map[string]any{"scope": "_shared", "key": fmt.Sprint("k", i%3), "value": fmt.Sprint(big, i)}).must(t, 200)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	req, _ := http.NewRequest("GET", srv.URL+"/rooms/slow/trajectory?limit=10000", nil)
	req.Header.Set("Authorization", "Bearer "+rm.token)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReaderSize(res.Body, 1<<20)
	if _, err := br.ReadBytes('\n'); err != nil {
		t.Fatal(err)
	}
	// ~9 MiB are queued behind a reader that has stopped: the handler is
	// blocked writing. A write still gets the pool's only connection.
	done := make(chan resp, 1)
	go func() {
		done <- e.do("PUT", "/rooms/slow/state", rm.token, map[string]any{"scope": "_shared", "key": "during", "value": 1})
	}()
	select {
	case r := <-done:
		if r.status != 200 {
			t.Fatalf("write beside a stalled stream: %d %s", r.status, r.raw)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write waited for a stalled trajectory stream: the stream holds a database connection")
	}
	lines := 1
	for {
		if _, err := br.ReadBytes('\n'); err != nil {
			break
		}
		lines++
	}
	if lines < writes+1 {
		t.Fatalf("stream ended after %d lines, want at least %d", lines, writes+1)
	}
}
