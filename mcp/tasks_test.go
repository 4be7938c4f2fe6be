package mcp_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/mcp"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// The tasks extension (io.modelcontextprotocol/tasks, protocol revision
// 2026-07-28) as a client speaks it, on the wire: each request carries its
// capabilities in _meta, and tasks/* name the task in Mcp-Name.

var rpcID atomic.Int64

// rpc posts one JSON-RPC request of the 2026-07-28 revision and returns its
// result or its error object. tasks: whether the request declares the tasks
// extension.
func rpc(t testing.TB, base, token, method string, params map[string]any, tasks bool) (result, rpcErr map[string]any) {
	t.Helper()
	caps := map[string]any{}
	if tasks {
		caps["extensions"] = map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}
	}
	if params == nil {
		params = map[string]any{}
	}
	params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientInfo": map[string]any{"name": "tasks-test", "version": "1"}, "io.modelcontextprotocol/clientCapabilities": caps}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": rpcID.Add(1), "method": method, "params": params})
	req, _ := http.NewRequest("POST", base+"/mcp", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	switch {
	case method == "tools/call":
		req.Header.Set("Mcp-Name", params["name"].(string))
	case strings.HasPrefix(method, "tasks/"):
		req.Header.Set("Mcp-Name", params["taskId"].(string))
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out struct {
		Result map[string]any `json:"result"`
		Error  map[string]any `json:"error"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: %d %s", method, res.StatusCode, raw)
	}
	return out.Result, out.Error
}

func waitCall(t testing.TB, base, token string, args map[string]any, tasks bool) (map[string]any, map[string]any) {
	t.Helper()
	return rpc(t, base, token, "tools/call", map[string]any{"name": "sync_wait", "arguments": args}, tasks)
}

func taskGet(t *testing.T, base, token, id string) (map[string]any, map[string]any) {
	t.Helper()
	return rpc(t, base, token, "tasks/get", map[string]any{"taskId": id}, true)
}

// taskEnd polls tasks/get until the task leaves working.
func taskEnd(t *testing.T, base, token, id string) map[string]any {
	t.Helper()
	var got map[string]any
	pgtest.Eventually(t, 20*time.Second, func() bool {
		res, e := taskGet(t, base, token, id)
		if e != nil {
			t.Fatalf("tasks/get: %v", e)
		}
		got = res
		return res["status"] != "working"
	}, "task %s to end", id)
	return got
}

// tasksRoom is alice in room lab, embodied, with the standard library's
// set action, and her access token.
func tasksRoom(t testing.TB, srv *server, name string) string {
	t.Helper()
	_, token := tasksPerson(t, srv, name)
	return token
}

// tasksPerson is tasksRoom with the person, for another grant of theirs.
func tasksPerson(t testing.TB, srv *server, name string) (*person, string) {
	t.Helper()
	p := signup(t, srv, name)
	token := mintToken(t, srv, p, nil)["access_token"].(string)
	cs := connectWithToken(t, srv, token)
	mustTool(t, cs, "sync_create_room", map[string]any{"room": "lab-" + name})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "lab-" + name})
	lib := mustTool(t, cs, "sync_help", map[string]any{"key": "standard_library"})
	for _, d := range asList(lib["content"]) {
		if def := d.(map[string]any); def["id"] == "set" {
			mustTool(t, cs, "sync_register_action", def)
		}
	}
	return p, token
}

func setKey(t testing.TB, base, token, key string) {
	t.Helper()
	res, e := rpc(t, base, token, "tools/call", map[string]any{"name": "sync_invoke_action",
		"arguments": map[string]any{"action": "set", "params": map[string]any{"key": key, "value": true}}}, false)
	if e != nil || res["isError"] == true {
		t.Fatalf("set %s: %v %v", key, e, res)
	}
}

// A declaring client's sync_wait answers at once with a task; tasks/get
// says working until a write satisfies it, then completed with the result
// a blocking wait returns. A client that declares nothing waits blocking,
// as before.
func TestTaskWaitEndsWithTheBlockingResult(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	token := tasksRoom(t, srv, "alice")

	disc, e := rpc(t, srv.base, token, "server/discover", nil, true)
	if e != nil {
		t.Fatal(e)
	}
	if ext := get(disc, "capabilities", "extensions", "io.modelcontextprotocol/tasks"); ext == nil {
		t.Errorf("server/discover does not announce the tasks extension: %v", disc["capabilities"])
	}

	began := time.Now()
	created, e := waitCall(t, srv.base, token, map[string]any{"condition": "has(state._shared.go)", "timeout_ms": 30000}, true)
	if e != nil {
		t.Fatal(e)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the task took %v to be answered", took)
	}
	id, _ := created["taskId"].(string)
	if created["resultType"] != "task" || created["status"] != "working" || len(id) < 20 || created["pollIntervalMs"] == nil || created["createdAt"] == nil {
		t.Fatalf("want a CreateTaskResult, got %v", created)
	}
	if got, e := taskGet(t, srv.base, token, id); e != nil || got["status"] != "working" || got["resultType"] != "complete" || got["result"] != nil {
		t.Fatalf("tasks/get before the write: %v %v", got, e)
	}
	setKey(t, srv.base, token, "go")
	end := taskEnd(t, srv.base, token, id)
	if end["status"] != "completed" {
		t.Fatalf("task ended %v", end)
	}
	res, _ := end["result"].(map[string]any)
	sc, _ := res["structuredContent"].(map[string]any)
	if sc["triggered"] != true || res["isError"] == true || len(asList(res["content"])) != 1 {
		t.Fatalf("the task's result is not a triggered wait's: %v", res)
	}

	// The same wait without the extension: the blocking call's result,
	// with the same fields.
	blocking, e := waitCall(t, srv.base, token, map[string]any{"condition": "has(state._shared.go)", "timeout_ms": 30000}, false)
	if e != nil || blocking["resultType"] == "task" || blocking["taskId"] != nil {
		t.Fatalf("a client without tasks got %v %v", blocking, e)
	}
	bsc, _ := blocking["structuredContent"].(map[string]any)
	for k := range bsc {
		if _, ok := sc[k]; !ok && k != "delta" && k != "changes" {
			t.Errorf("the blocking wait has %q, the task's result does not: %v / %v", k, bsc, sc)
		}
	}
	if bsc["triggered"] != true {
		t.Errorf("blocking wait: %v", bsc)
	}
}

// A wait that times out completes with the timeout's result; a bad
// condition completes with the error result a blocking call answers.
func TestTaskWaitTimeoutAndError(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	token := tasksRoom(t, srv, "alice")
	created, _ := waitCall(t, srv.base, token, map[string]any{"condition": "has(state._shared.never)", "timeout_ms": 300}, true)
	end := taskEnd(t, srv.base, token, created["taskId"].(string))
	sc, _ := get(end, "result", "structuredContent").(map[string]any)
	if end["status"] != "completed" || sc["timeout"] != true || sc["triggered"] != false {
		t.Fatalf("timed-out task: %v", end)
	}
	created, _ = waitCall(t, srv.base, token, map[string]any{"condition": "state._shared.(((", "timeout_ms": 300}, true)
	end = taskEnd(t, srv.base, token, created["taskId"].(string))
	if end["status"] != "completed" || get(end, "result", "isError") != true || !strings.Contains(resultTextOf(end["result"]), "cel_error") {
		t.Fatalf("bad condition: %v", end)
	}
}

func resultTextOf(res any) string {
	m, _ := res.(map[string]any)
	var parts []string
	for _, c := range asList(m["content"]) {
		if s, ok := c.(map[string]any)["text"].(string); ok {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "\n")
}

// tasks/cancel ends a working task cancelled, and a later write does not
// complete it.
func TestTaskCancel(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	token := tasksRoom(t, srv, "alice")
	created, _ := waitCall(t, srv.base, token, map[string]any{"condition": "has(state._shared.go)", "timeout_ms": 30000}, true)
	id := created["taskId"].(string)
	ack, e := rpc(t, srv.base, token, "tasks/cancel", map[string]any{"taskId": id}, true)
	if e != nil || ack["resultType"] != "complete" {
		t.Fatalf("tasks/cancel: %v %v", ack, e)
	}
	setKey(t, srv.base, token, "go")
	got, e := taskGet(t, srv.base, token, id)
	if e != nil || got["status"] != "cancelled" || got["result"] != nil {
		t.Fatalf("after the cancel: %v %v", got, e)
	}
	// Cancelling an ended task is acknowledged and changes nothing.
	if _, e := rpc(t, srv.base, token, "tasks/cancel", map[string]any{"taskId": id}, true); e != nil {
		t.Fatalf("second cancel: %v", e)
	}
}

// One grant may hold MaxOpenTasks working tasks; the next call is refused
// with a clear error, and a cancel makes room again.
func TestTaskLimitPerGrant(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	token := tasksRoom(t, srv, "alice")
	var ids []string
	for i := range mcp.MaxOpenTasks {
		created, e := waitCall(t, srv.base, token, map[string]any{"condition": "has(state._shared.go)", "timeout_ms": 30000}, true)
		if e != nil || created["resultType"] != "task" {
			t.Fatalf("task %d: %v %v", i, created, e)
		}
		ids = append(ids, created["taskId"].(string))
	}
	over, e := waitCall(t, srv.base, token, map[string]any{"condition": "has(state._shared.go)", "timeout_ms": 30000}, true)
	if e != nil || over["isError"] != true || !strings.Contains(resultTextOf(over), "rate_limited") || !strings.Contains(resultTextOf(over), "tasks/cancel") {
		t.Fatalf("past the limit: %v %v", over, e)
	}
	if _, e := rpc(t, srv.base, token, "tasks/cancel", map[string]any{"taskId": ids[0]}, true); e != nil {
		t.Fatal(e)
	}
	if again, _ := waitCall(t, srv.base, token, map[string]any{"condition": "has(state._shared.go)", "timeout_ms": 30000}, true); again["resultType"] != "task" {
		t.Fatalf("after a cancel: %v", again)
	}
	// The other waits end with the write, as the blocking ones would.
	setKey(t, srv.base, token, "go")
	for _, id := range ids[1:] {
		if end := taskEnd(t, srv.base, token, id); end["status"] != "completed" {
			t.Fatalf("task %s: %v", id, end)
		}
	}
}

// A room holds at most MaxRoomTasks working tasks of all grants; past it
// the call is refused with room_busy.
func TestTaskLimitPerRoom(t *testing.T) {
	defer mcp.SetMaxRoomTasks(2)()
	srv := startServer(t, pgtest.New(t))
	token := tasksRoom(t, srv, "alice")
	other := mintToken(t, srv, signup(t, srv, "bob"), nil)["access_token"].(string)
	for range 2 {
		if created, e := waitCall(t, srv.base, token, map[string]any{"condition": "has(state._shared.go)", "timeout_ms": 30000}, true); e != nil || created["resultType"] != "task" {
			t.Fatalf("%v %v", created, e)
		}
	}
	over, e := waitCall(t, srv.base, token, map[string]any{"condition": "has(state._shared.go)", "timeout_ms": 30000}, true)
	if e != nil || over["isError"] != true || !strings.Contains(resultTextOf(over), "room_busy") {
		t.Fatalf("past the room's bound: %v %v", over, e)
	}
	// Another room is not held by it.
	cs := connectWithToken(t, srv, other)
	mustTool(t, cs, "sync_create_room", map[string]any{"room": "elsewhere"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "elsewhere"})
	if created, _ := waitCall(t, srv.base, other, map[string]any{"condition": "has(state._shared.go)", "timeout_ms": 300}, true); created["resultType"] != "task" {
		t.Fatalf("another room: %v", created)
	}
}

// The room's bound holds when many grants start waits at once: creations
// in a room take turns (a lock per grant let six grants pass a bound of
// three together).
func TestTaskLimitPerRoomUnderConcurrency(t *testing.T) {
	defer mcp.SetMaxRoomTasks(3)()
	srv := startServer(t, pgtest.New(t))
	first := tasksRoom(t, srv, "alice")
	owner := connectWithToken(t, srv, first)
	tokens := []string{first}
	for i := range 5 {
		name := fmt.Sprintf("member%d", i)
		p := signup(t, srv, name)
		mustTool(t, owner, "sync_share_room", map[string]any{"room": "lab-alice", "username": name})
		tok := mintToken(t, srv, p, map[string]string{"lab-alice": "write"})["access_token"].(string)
		mustTool(t, connectWithToken(t, srv, tok), "sync_embody", map[string]any{"room": "lab-alice"})
		tokens = append(tokens, tok)
	}
	for round := range 20 {
		// Each round from an empty room: the last round's tasks cancelled.
		if _, err := srv.db.Exec(context.Background(), `UPDATE mcp_tasks SET status = 'cancelled' WHERE status = 'working'`); err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, tok := range tokens {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				waitCall(t, srv.base, tok, map[string]any{"condition": "has(state._shared.never)", "timeout_ms": 30000}, true)
			}()
		}
		close(start)
		wg.Wait()
		var n int
		_ = srv.db.QueryRow(context.Background(), `SELECT count(*) FROM mcp_tasks WHERE room_id = 'lab-alice' AND status = 'working'`).Scan(&n)
		if n > 3 {
			t.Fatalf("round %d: %d tasks working in the room, past its bound of 3", round, n)
		}
	}
}

// A task taken over by another process ends when it would have in the
// first: with no timeout_ms at the default timeout, and with one past
// the maximum at the maximum (the call capped it at its start), counted
// from its start, not a whole timeout after the takeover.
func TestTaskTakenOverKeepsTheDefaultTimeout(t *testing.T) {
	for _, c := range []struct {
		name string
		args map[string]any
		ago  string // how long before the takeover it started: a second before its end
	}{
		{"default", map[string]any{}, "24 seconds"},
		{"past the maximum", map[string]any{"timeout_ms": 60000}, "44 seconds"},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := pgtest.New(t)
			down, shutdown := context.WithCancel(context.Background())
			defer shutdown()
			a := startServerOpts(t, db, serverOpts{shutdown: down})
			b := startServerOpts(t, db, serverOpts{publicURL: a.base})
			token := tasksRoom(t, a, "alice")
			c.args["condition"] = "has(state._shared.go)"
			created, _ := waitCall(t, a.base, token, c.args, true)
			id := created["taskId"].(string)
			shutdown()
			pgtest.Eventually(t, 10*time.Second, func() bool {
				var free bool
				_ = db.QueryRow(context.Background(), `SELECT bool_and(lease_until <= now()) FROM mcp_tasks`).Scan(&free)
				return free
			}, "the stopped wait to give its lease up")
			if _, err := db.Exec(context.Background(), `UPDATE mcp_tasks SET created_at = now() - $1::interval`, c.ago); err != nil {
				t.Fatal(err)
			}
			taken := time.Now()
			// Within 10 s: a wait given a whole timeout again would run 16 s
			// or more.
			var end map[string]any
			pgtest.Eventually(t, 10*time.Second, func() bool {
				end, _ = taskGet(t, b.base, token, id)
				return end["status"] != "working"
			}, "the taken-over task to end")
			if end["status"] != "completed" || get(end, "result", "structuredContent", "timeout") != true {
				t.Fatalf("taken over: %v", end)
			}
			t.Logf("the taken-over wait timed out %v after the takeover", time.Since(taken).Round(time.Millisecond))
		})
	}
}

// The process running a wait renews its lease, so a poll to another
// process does not run it twice; a cancel answered by another process
// stops the wait at the next renewal.
func TestTaskLeaseRenewedAndCancelHeardElsewhere(t *testing.T) {
	defer mcp.SetTaskLease(900 * time.Millisecond)()
	db := pgtest.New(t)
	a := startServer(t, db)
	b := startServerOpts(t, db, serverOpts{publicURL: a.base})
	token := tasksRoom(t, a, "alice")
	created, _ := waitCall(t, a.base, token, map[string]any{"condition": "has(state._shared.go)", "timeout_ms": 30000}, true)
	id := created["taskId"].(string)
	lease := func() (at time.Time) {
		_ = db.QueryRow(context.Background(), `SELECT lease_until FROM mcp_tasks`).Scan(&at)
		return at
	}
	first := lease()
	pgtest.Eventually(t, 10*time.Second, func() bool { return lease().After(first) }, "the lease to be renewed")
	// Polled through b while a's lease holds: b does not take it over,
	// and the wait a runs is the one that ends.
	if got, e := taskGet(t, b.base, token, id); e != nil || got["status"] != "working" {
		t.Fatalf("poll through b: %v %v", got, e)
	}
	if ack, e := rpc(t, b.base, token, "tasks/cancel", map[string]any{"taskId": id}, true); e != nil || ack["resultType"] != "complete" {
		t.Fatalf("cancel through b: %v %v", ack, e)
	}
	// a stops its wait at its next renewal: the agent is no longer waiting.
	pgtest.Eventually(t, 10*time.Second, func() bool {
		var waiting bool
		_ = db.QueryRow(context.Background(), `SELECT bool_or(waiting_on IS NOT NULL) FROM agents`).Scan(&waiting)
		return !waiting
	}, "the wait a runs to stop after the cancel through b")
	if got, _ := taskGet(t, a.base, token, id); got["status"] != "cancelled" {
		t.Fatalf("after the cancel: %v", got)
	}
}

// A task outlives the process that ran it: that process's shutdown stops
// its wait and gives its lease up, and a poll to another process sharing
// the database runs the wait there, to the same end.
func TestTaskSurvivesItsProcess(t *testing.T) {
	db := pgtest.New(t)
	down, shutdown := context.WithCancel(context.Background())
	defer shutdown()
	a := startServerOpts(t, db, serverOpts{shutdown: down})
	// Another process of the same deployment: the same public URL.
	b := startServerOpts(t, db, serverOpts{publicURL: a.base})
	token := tasksRoom(t, a, "alice")
	created, _ := waitCall(t, a.base, token, map[string]any{"condition": "has(state._shared.go)", "timeout_ms": 30000}, true)
	id := created["taskId"].(string)
	shutdown()
	// The lease is given up once the stopped wait has returned.
	pgtest.Eventually(t, 10*time.Second, func() bool {
		var free bool
		_ = db.QueryRow(context.Background(), `SELECT bool_and(lease_until <= now()) FROM mcp_tasks`).Scan(&free)
		return free
	}, "the stopped wait to give its lease up")
	if got, e := taskGet(t, b.base, token, id); e != nil || got["status"] != "working" {
		t.Fatalf("the other process: %v %v", got, e)
	}
	setKey(t, b.base, token, "go")
	end := taskEnd(t, b.base, token, id)
	if end["status"] != "completed" || get(end, "result", "structuredContent", "triggered") != true {
		t.Fatalf("taken over: %v", end)
	}
}

func hashOf(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// A thousand tasks waiting on one room all complete, triggered, after the
// one write that satisfies them (issue 48): each is a parked wait like a
// blocking call's, woken by the same commit, and their results are stored
// together. How fast is BenchmarkTaskThousandComplete's to say (a timed
// assertion here failed CI on a loaded machine: 3 s to the first result,
// 8 s to the last, where a quiet one takes under 1 s).
func TestTaskThousandCompleteTogether(t *testing.T) {
	if testing.Short() {
		t.Skip("a thousand tasks")
	}
	defer mcp.SetMaxOpenTasks(1000)()
	srv := startServer(t, pgtest.New(t))
	first, last := thousandTasks(t, srv, tasksRoom(t, srv, "alice"), "go")
	t.Logf("1,000 tasks: the first stored %v after the write, the last %v after it", first, last)
	var done int
	_ = srv.db.QueryRow(context.Background(), `SELECT count(*) FROM mcp_tasks WHERE status = 'completed' AND (result->'structuredContent'->>'triggered')::bool`).Scan(&done)
	if done != 1000 {
		t.Errorf("%d tasks completed triggered, want 1000", done)
	}
}

// From the write to the first result stored is the substrate's part, the
// same for blocking waits (a thousand blocking sync_waits, measured
// beside it: first 0.8 s, last 1.4 s on PostgreSQL); from the first to
// the last is what the tasks add.
func BenchmarkTaskThousandComplete(b *testing.B) {
	defer mcp.SetMaxOpenTasks(1000)()
	srv := startServer(b, pgtest.New(b))
	token := tasksRoom(b, srv, "alice")
	var first, last time.Duration
	for i := range b.N {
		f, l := thousandTasks(b, srv, token, fmt.Sprintf("go%d", i))
		first, last = first+f, last+l
	}
	b.ReportMetric(float64(first.Milliseconds())/float64(b.N), "first-ms")
	b.ReportMetric(float64(last.Milliseconds())/float64(b.N), "last-ms")
}

// thousandTasks starts a thousand tasks waiting for the key, writes it,
// and says when the first and the last result were stored after the write.
func thousandTasks(tb testing.TB, srv *server, token, key string) (first, last time.Duration) {
	tb.Helper()
	for i := range 1000 {
		created, e := waitCall(tb, srv.base, token, map[string]any{"condition": "has(state._shared." + key + ")", "timeout_ms": 45000}, true)
		if e != nil || created["resultType"] != "task" {
			tb.Fatalf("task %d: %v %v", i, created, e)
		}
	}
	working := func() (n int) {
		_ = srv.db.QueryRow(context.Background(), `SELECT count(*) FROM mcp_tasks WHERE status = 'working'`).Scan(&n)
		return n
	}
	if n := working(); n != 1000 {
		tb.Fatalf("%d tasks working, want 1000", n)
	}
	wrote := time.Now()
	setKey(tb, srv.base, token, key)
	pgtest.Eventually(tb, 60*time.Second, func() bool {
		n := working()
		if n < 1000 && first == 0 {
			first = time.Since(wrote)
		}
		return n == 0
	}, "the thousand tasks to complete")
	return first, time.Since(wrote)
}
