package rest_test

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/syncsubstrate/sync/substrate/rest"
)

// Many goroutines doing read-modify-write with if_version on one key end
// with exactly the right value; every lost race is a 409 version_conflict.
func TestCASUnderConcurrency(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("cas", nil)
	const workers, each = 8, 15
	toks := make([]string, workers)
	for i := range toks {
		toks[i] = e.join(rm, fmt.Sprintf("w%d", i), "_shared")
	}
	e.do("PUT", "/rooms/cas/state", rm.token, map[string]any{"scope": "_shared", "key": "n", "value": 0, "if_version": 0}).must(t, 200)
	var wg sync.WaitGroup
	var mu sync.Mutex
	conflicts := 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(tok string) {
			defer wg.Done()
			for done := 0; done < each; {
				r := e.do("GET", "/rooms/cas/state?scope=_shared&key=n", tok, nil)
				if r.status != 200 {
					t.Errorf("read: %d %s", r.status, r.raw)
					return
				}
				n := int(r.body["value"].(float64))
				w := e.do("PUT", "/rooms/cas/state", tok, map[string]any{"scope": "_shared", "key": "n", "value": n + 1, "if_version": r.num("version")})
				switch {
				case w.status == 200:
					done++
				case w.status == 409 && w.str("error") == "version_conflict" && w.body["current_version"] != nil:
					mu.Lock()
					conflicts++
					mu.Unlock()
				default:
					t.Errorf("write: %d %s", w.status, w.raw)
					return
				}
			}
		}(toks[w])
	}
	wg.Wait()
	r := e.do("GET", "/rooms/cas/state?scope=_shared&key=n", rm.token, nil).must(t, 200)
	if got := int(r.body["value"].(float64)); got != workers*each {
		t.Fatalf("counter = %d, want %d", got, workers*each)
	}
	if v := r.num("version"); v != workers*each+1 {
		t.Fatalf("version = %d, want %d (one per successful write)", v, workers*each+1)
	}
	t.Logf("%d conflicts resolved by retry", conflicts)
}

// Parallel appends get unique sort keys; together with the _audit entries
// (one per mutation) they cover the room's sequence 1..seq with no gap.
func TestParallelAppendsAreGapFree(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("log", nil)
	const workers, each = 8, 20
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				r := e.do("PUT", "/rooms/log/state", rm.token, map[string]any{"scope": "_messages", "append": true, "value": map[string]any{"w": w, "i": i}})
				if r.status != 200 {
					t.Errorf("append: %d %s", r.status, r.raw)
					return
				}
			}
		}(w)
	}
	// A batch with two appends takes two numbers plus its audit entry.
	e.do("PUT", "/rooms/log/state/batch", rm.token, map[string]any{"writes": []any{
		map[string]any{"scope": "_messages", "append": true, "value": "x"},
		map[string]any{"scope": "_events", "append": true, "value": "y"},
	}}).must(t, 200)
	wg.Wait()

	seen := map[int64]string{}
	collect := func(scope string) int {
		n := 0
		after := int64(0)
		for {
			r := e.do("GET", fmt.Sprintf("/rooms/log/state?scope=%s&after=%d&limit=50", scope, after), rm.token, nil).must(t, 200)
			entries := r.body["entries"].([]any)
			for _, it := range entries {
				m := it.(map[string]any)
				sk := int64(m["sort_key"].(float64))
				if prev, dup := seen[sk]; dup {
					t.Fatalf("sort_key %d used twice (%s and %s)", sk, prev, scope)
				}
				if m["key"] != strconv.FormatInt(sk, 10) {
					t.Fatalf("append entry key %v, want its sort_key %d", m["key"], sk)
				}
				if sk <= after {
					t.Fatalf("log page out of order: %d after %d", sk, after)
				}
				seen[sk] = scope
				after = sk
				n++
			}
			if r.body["more"] != true {
				return n
			}
		}
	}
	if n := collect("_messages"); n != workers*each+1 {
		t.Fatalf("%d messages, want %d", n, workers*each+1)
	}
	collect("_events")
	collect("_audit")
	seq := e.seq(rm)
	keys := make([]int64, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	if int64(len(keys)) != seq || keys[0] != 1 || keys[len(keys)-1] != seq {
		t.Fatalf("sort keys %d..%d (%d of them), room seq %d: not gap-free", keys[0], keys[len(keys)-1], len(keys), seq)
	}
}

func TestWriteSemantics(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("sem", nil)
	aTok := e.join(rm, "a")
	put := func(tok string, body map[string]any) resp { return e.do("PUT", "/rooms/sem/state", tok, body) }

	// Versions start at 1 and grow by one per write.
	r := put(aTok, map[string]any{"scope": "self", "key": "hp", "value": 80}).must(t, 200)
	if r.num("version") != 1 || r.str("scope") != "a" || r.str("writer") != "a" {
		t.Fatalf("first write %s", r.raw)
	}
	r = put(aTok, map[string]any{"scope": "a", "key": "hp", "value": 70}).must(t, 200)
	if r.num("version") != 2 {
		t.Fatalf("second write version %d", r.num("version"))
	}
	// if_version 0 means "must not exist".
	r = put(aTok, map[string]any{"scope": "a", "key": "hp", "value": 1, "if_version": 0}).must(t, 409)
	if r.str("error") != "version_conflict" || r.num("current_version") != 2 || r.str("hint") == "" {
		t.Fatalf("conflict body %s", r.raw)
	}

	// merge: shallow, inserts when absent, refuses non-objects.
	put(rm.token, map[string]any{"scope": "_shared", "key": "task", "merge": map[string]any{"title": "t", "meta": map[string]any{"x": 1}}}).must(t, 200)
	r = put(rm.token, map[string]any{"scope": "_shared", "key": "task", "merge": map[string]any{"claimed_by": "a", "meta": map[string]any{"y": 2}}}).must(t, 200)
	if got := r.body["value"].(map[string]any); got["title"] != "t" || got["claimed_by"] != "a" || fmt.Sprint(got["meta"]) != "map[y:2]" || r.num("version") != 2 {
		t.Fatalf("merge result %s", r.raw)
	}
	r = put(aTok, map[string]any{"scope": "a", "key": "hp", "merge": map[string]any{"x": 1}}).must(t, 409)
	if r.str("error") != "not_mergeable" {
		t.Fatalf("merge into number: %s", r.raw)
	}

	// append entries: no overwrite, merge allowed.
	r = put(rm.token, map[string]any{"scope": "_messages", "append": true, "value": map[string]any{"body": "hi"}}).must(t, 200)
	key := r.str("key")
	if r.body["sort_key"] == nil {
		t.Fatalf("append without sort_key: %s", r.raw)
	}
	r = put(rm.token, map[string]any{"scope": "_messages", "key": key, "value": "overwrite"}).must(t, 409)
	if r.str("error") != "append_only" {
		t.Fatalf("overwrite of append entry: %s", r.raw)
	}
	r = put(rm.token, map[string]any{"scope": "_messages", "key": key, "merge": map[string]any{"claimed_by": "a"}}).must(t, 200)
	if r.body["sort_key"] == nil || r.body["value"].(map[string]any)["body"] != "hi" {
		t.Fatalf("merge into append entry lost its sort_key or fields: %s", r.raw)
	}

	// Delete, then the key is gone; deleting again is a 404.
	e.do("DELETE", "/rooms/sem/state?scope=a&key=hp&if_version=2", aTok, nil).must(t, 200)
	e.do("GET", "/rooms/sem/state?scope=a&key=hp", aTok, nil).must(t, 404)
	e.do("DELETE", "/rooms/sem/state?scope=a&key=hp", aTok, nil).must(t, 404)
	// A re-created key starts over at version 1.
	if r := put(aTok, map[string]any{"scope": "a", "key": "hp", "value": 5, "if_version": 0}).must(t, 200); r.num("version") != 1 {
		t.Fatalf("re-created key version %d", r.num("version"))
	}
}

// A batch applies all of its writes or none: one failing write leaves
// every other key, and the room's seq, untouched.
func TestBatchIsAllOrNothing(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("batch", nil)
	e.do("PUT", "/rooms/batch/state", rm.token, map[string]any{"scope": "_shared", "key": "a", "value": 1}).must(t, 200)
	before := e.seq(rm)
	r := e.do("PUT", "/rooms/batch/state/batch", rm.token, map[string]any{"writes": []any{
		map[string]any{"scope": "_shared", "key": "a", "value": 2},
		map[string]any{"scope": "_shared", "key": "b", "value": 2},
		map[string]any{"scope": "_messages", "append": true, "value": "m"},
		map[string]any{"scope": "_shared", "key": "a", "value": 3, "if_version": 1}, // a is at 2 by now
	}}).must(t, 409)
	if r.num("write") != 3 || r.str("error") != "version_conflict" {
		t.Fatalf("batch error does not name the failing write: %s", r.raw)
	}
	if e.seq(rm) != before {
		t.Fatal("failed batch moved the room's seq")
	}
	if got := e.do("GET", "/rooms/batch/state?scope=_shared&key=a", rm.token, nil).must(t, 200).body["value"]; got != float64(1) {
		t.Fatalf("a = %v after failed batch", got)
	}
	e.do("GET", "/rooms/batch/state?scope=_shared&key=b", rm.token, nil).must(t, 404)

	// Later writes see earlier ones of the same batch.
	r = e.do("PUT", "/rooms/batch/state/batch", rm.token, map[string]any{"writes": []any{
		map[string]any{"scope": "_shared", "key": "a", "value": 2, "if_version": 1},
		map[string]any{"scope": "_shared", "key": "a", "merge": map[string]any{"x": 1}, "if_version": 2},
		map[string]any{"scope": "_shared", "key": "c", "delete": true, "if_version": 0},
	}})
	if r.status != 409 { // c does not exist: delete of a missing key
		t.Fatalf("delete of a missing key in a batch: %s", r.raw)
	}
	r = e.do("PUT", "/rooms/batch/state/batch", rm.token, map[string]any{"writes": []any{
		map[string]any{"scope": "_shared", "key": "a", "value": map[string]any{"v": 2}, "if_version": 1},
		map[string]any{"scope": "_shared", "key": "a", "merge": map[string]any{"x": 1}, "if_version": 2},
	}}).must(t, 200)
	entries := r.body["entries"].([]any)
	if len(entries) != 1 || fmt.Sprint(entries[0].(map[string]any)["value"]) != "map[v:2 x:1]" || entries[0].(map[string]any)["version"] != float64(3) {
		t.Fatalf("chained batch result %s", r.raw)
	}
}

// Every mutation leaves an _audit entry naming who wrote what.
func TestAuditRecordsWrites(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("aud", nil)
	aTok := e.join(rm, "a")
	w := e.do("PUT", "/rooms/aud/state", aTok, map[string]any{"scope": "a", "key": "k", "value": "v"}).must(t, 200)
	r := e.do("GET", fmt.Sprintf("/rooms/aud/state?scope=_audit&key=%d", w.num("seq")), rm.token, nil).must(t, 200)
	v := r.body["value"].(map[string]any)
	if v["kind"] != "state_write" || v["by"] != "a" || !strings.Contains(fmt.Sprint(v["writes"]), "key:k") {
		t.Fatalf("audit entry %s", r.raw)
	}
}

func TestJoinRules(t *testing.T) {
	e := newEnv(t, rest.Options{})
	closed := e.room("closed", nil)
	open := e.room("open", map[string]any{"open_join": true})

	// Closed room: no token → 401, agent token → 403.
	e.do("POST", "/rooms/closed/agents", "", map[string]any{"id": "x", "name": "X"}).must(t, 401)
	aTok := e.join(closed, "a")
	e.do("POST", "/rooms/closed/agents", aTok, map[string]any{"id": "x", "name": "X"}).must(t, 403)

	// Open room: anyone joins with a new id, but cannot take over an
	// existing agent.
	r := e.do("POST", "/rooms/open/agents", "", map[string]any{"id": "x", "name": "X"}).must(t, 201)
	xTok := r.str("token")
	e.do("POST", "/rooms/open/agents", "", map[string]any{"id": "x", "name": "Impostor"}).must(t, 409)

	// Re-join with the agent's own token rotates it.
	r = e.do("POST", "/rooms/open/agents", xTok, map[string]any{"id": "x", "name": "X2"}).must(t, 200)
	if r.body["created"] != false || r.str("name") != "X2" {
		t.Fatalf("rejoin %s", r.raw)
	}
	e.do("GET", "/rooms/open/agents", xTok, nil).must(t, 401)
	e.do("GET", "/rooms/open/agents", r.str("token"), nil).must(t, 200)
	// Re-join with the room token works too.
	e.do("POST", "/rooms/open/agents", open.token, map[string]any{"id": "x", "name": "X3"}).must(t, 200)

	// An id whose scope already holds data cannot be taken by a newcomer.
	e.do("PUT", "/rooms/open/state", open.token, map[string]any{"scope": "vault", "key": "gold", "value": 100}).must(t, 200)
	r = e.do("POST", "/rooms/open/agents", "", map[string]any{"id": "vault", "name": "thief"}).must(t, 409)
	if r.str("error") != "scope_in_use" {
		t.Fatalf("joining as a used scope: %s", r.raw)
	}
}

func TestPresence(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("pres", nil)
	aTok := e.join(rm, "a")
	r := e.do("POST", "/rooms/pres/agents/a/heartbeat", aTok, map[string]any{"status": "busy"}).must(t, 200)
	if r.str("status") != "busy" {
		t.Fatalf("heartbeat %s", r.raw)
	}
	e.do("POST", "/rooms/pres/agents/a/heartbeat", aTok, map[string]any{"status": "asleep"}).must(t, 400)
	r = e.do("PATCH", "/rooms/pres/agents/a", rm.token, map[string]any{"role": "scribe", "grants": []string{"_shared", "_shared"}}).must(t, 200)
	if r.str("role") != "scribe" || fmt.Sprint(r.body["grants"]) != "[_shared]" {
		t.Fatalf("patch %s", r.raw)
	}
	e.do("PATCH", "/rooms/pres/agents/a", rm.token, map[string]any{"grants": []string{"_agents"}}).must(t, 400)
	e.do("PATCH", "/rooms/pres/agents/nobody", rm.token, map[string]any{"role": "x"}).must(t, 404)
	list := e.do("GET", "/rooms/pres/agents", rm.view, nil).must(t, 200).body["agents"].([]any)
	if len(list) != 1 {
		t.Fatalf("agents %v", list)
	}
	ag := list[0].(map[string]any)
	for _, f := range []string{"name", "role", "status", "last_heartbeat", "waiting_on"} {
		if _, ok := ag[f]; !ok {
			t.Errorf("presence lacks %s", f)
		}
	}
	if _, leaked := ag["token"]; leaked {
		t.Fatal("presence shows a token")
	}
}

// Direct writes take expr: true (value or merge computed by CEL with the
// writer's read authority) and enabled (the entry's visibility gate), as
// action writes do (seed 001: both universal).
func TestDirectWriteExprAndEnabled(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("dx", nil)
	a := e.join(rm, "a")
	b := e.join(rm, "b")
	e.do("PUT", "/rooms/dx/state/batch", rm.token, map[string]any{"writes": []any{
		map[string]any{"scope": "_shared", "key": "x", "value": 2},
		map[string]any{"scope": "_shared", "key": "y", "value": 3},
	}}).must(t, 200)
	e.do("PUT", "/rooms/dx/state", a, map[string]any{"scope": "a", "key": "secret", "value": 40}).must(t, 200)

	// The seed's example: the CEL result becomes the value, or the merge.
	r := e.do("PUT", "/rooms/dx/state", a, map[string]any{"scope": "a", "key": "sum", "value": "state._shared.x * state._shared.y + state.self.secret", "expr": true}).must(t, 200)
	if fmt.Sprint(r.body["value"]) != "46" {
		t.Fatalf("expr value: %s", r.raw)
	}
	e.do("PUT", "/rooms/dx/state", a, map[string]any{"scope": "a", "key": "card", "value": map[string]any{"kept": true}}).must(t, 200)
	e.do("PUT", "/rooms/dx/state", a, map[string]any{"scope": "a", "key": "card", "merge": `{"n": state._shared.x + 1}`, "expr": true}).must(t, 200)
	card := e.do("GET", "/rooms/dx/state?scope=a&key=card", a, nil).must(t, 200)
	if got := card.body["value"]; fmt.Sprint(got) != "map[kept:true n:3]" {
		t.Fatalf("expr merge: %v", got)
	}

	// Authority: the expression reads what the writer reads, no more.
	r = e.do("PUT", "/rooms/dx/state", b, map[string]any{"scope": "b", "key": "stolen", "value": "state.a.secret", "expr": true})
	if r.status != 400 || r.str("error") != "cel_error" {
		t.Fatalf("b read a's private scope through expr: %d %s", r.status, r.raw)
	}
	// Bad input: not a string, not CEL, merge not a map. Nothing is written.
	for _, w := range []map[string]any{
		{"scope": "_shared", "key": "z", "value": 5, "expr": true},
		{"scope": "_shared", "key": "z", "value": "1 +", "expr": true},
		{"scope": "_shared", "key": "z", "merge": "1 + 1", "expr": true},
	} {
		if r := e.do("PUT", "/rooms/dx/state", rm.token, w); r.status != 400 {
			t.Fatalf("%v: %d %s", w, r.status, r.raw)
		}
	}
	if r := e.do("GET", "/rooms/dx/state?scope=_shared&key=z", rm.token, nil); r.status != 404 {
		t.Fatalf("a refused write wrote: %d %s", r.status, r.raw)
	}

	// A write's response carries the entry's timer.
	r = e.do("PUT", "/rooms/dx/state", rm.token, map[string]any{"scope": "_shared", "key": "soon", "value": 1, "timer": map[string]any{"ms": 600000}}).must(t, 200)
	if path(r.body, "timer", "expires_at") == nil && path(r.body, "timer") == nil {
		t.Fatalf("write response without the entry's timer: %s", r.raw)
	}

	// enabled on a direct write hides the entry while false.
	e.do("PUT", "/rooms/dx/state", rm.token, map[string]any{"scope": "_shared", "key": "reveal", "value": "the answer", "enabled": "state._shared.x > 10"}).must(t, 200)
	if got := path(e.ctx(rm, b, "only=state").body, "state", "_shared", "reveal"); got != nil {
		t.Fatalf("entry shown while its enabled is false: %v", got)
	}
	e.do("PUT", "/rooms/dx/state", rm.token, map[string]any{"scope": "_shared", "key": "x", "value": 11}).must(t, 200)
	if got := path(e.ctx(rm, b, "only=state").body, "state", "_shared", "reveal"); got != "the answer" {
		t.Fatalf("entry hidden once its enabled holds: %v", got)
	}
}

// GET /state honours entry-level enabled as the context read does (seed
// 001: enabled gates visibility, on every entry): a disabled entry is
// absent from scope reads, whole-room reads, key reads (404) and log pages,
// for every reader, until its expression holds for that reader.
func TestStateReadHonoursEntryEnabled(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("gr", nil)
	a := e.join(rm, "a")
	e.do("PUT", "/rooms/gr/state/batch", rm.token, map[string]any{"writes": []any{
		map[string]any{"scope": "_shared", "key": "phase", "value": "setup"},
		map[string]any{"scope": "_shared", "key": "answer", "value": 42, "enabled": `state._shared.phase == "reveal"`},
		map[string]any{"scope": "_messages", "append": true, "value": map[string]any{"text": "spoiler"}, "enabled": `state._shared.phase == "reveal"`},
		map[string]any{"scope": "_messages", "append": true, "value": map[string]any{"text": "hello"}},
	}}).must(t, 200)
	keys := func(tok, q string) string {
		r := e.do("GET", "/rooms/gr/state"+q, tok, nil).must(t, 200)
		var out []string
		for _, x := range r.body["entries"].([]any) {
			en := x.(map[string]any)
			out = append(out, fmt.Sprint(en["scope"], "/", en["key"], "=", en["value"]))
		}
		return strings.Join(out, " ")
	}
	for _, tok := range []string{a, rm.token} {
		if got := keys(tok, "?scope=_shared"); strings.Contains(got, "answer") {
			t.Fatalf("scope read shows a disabled entry: %s", got)
		}
		if got := keys(tok, ""); strings.Contains(got, "answer") {
			t.Fatalf("room read shows a disabled entry: %s", got)
		}
		if got := keys(tok, "?scope=_messages"); strings.Contains(got, "spoiler") || !strings.Contains(got, "hello") {
			t.Fatalf("log page: %s", got)
		}
		if r := e.do("GET", "/rooms/gr/state?scope=_shared&key=answer", tok, nil); r.status != 404 {
			t.Fatalf("key read of a disabled entry: %d %s", r.status, r.raw)
		}
	}
	e.do("PUT", "/rooms/gr/state", rm.token, map[string]any{"scope": "_shared", "key": "phase", "value": "reveal"}).must(t, 200)
	if got := keys(a, "?scope=_shared"); !strings.Contains(got, "answer=42") {
		t.Fatalf("enabled entry not shown: %s", got)
	}
	if got := keys(a, "?scope=_messages"); !strings.Contains(got, "spoiler") {
		t.Fatalf("enabled log entry not shown: %s", got)
	}
	e.do("GET", "/rooms/gr/state?scope=_shared&key=answer", a, nil).must(t, 200)
}

// The context envelope has seed 001's shape down to its last field:
// "self": "agent-a", "params": {} — params are empty on a read and are the
// invocation's params when an action's expressions see that context.
func TestContextEnvelopeCarriesParams(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("pe", nil)
	a := e.join(rm, "agent-a")
	env := e.ctx(rm, a, "")
	if env.body["self"] != "agent-a" {
		t.Fatalf("self: %s", env.raw)
	}
	if p, ok := env.body["params"].(map[string]any); !ok || len(p) != 0 {
		t.Fatalf(`envelope lacks "params": {}: %s`, env.raw)
	}
	e.do("PUT", "/rooms/pe/actions", rm.token, map[string]any{"id": "echo", "params": map[string]any{"item": map[string]any{"type": "string"}},
		"writes": []any{map[string]any{"scope": "_shared", "key": "last", "value": "${params.item}"}}, "result": `params.item + "!"`}).must(t, 201)
	if r := e.invoke(rm, a, "echo", map[string]any{"item": "sword"}).must(t, 200); r.body["result"] != "sword!" {
		t.Fatalf("the invocation's context lacks its params: %s", r.raw)
	}
}

// enabled is universal (seed 001 §State schema): agents carry it too, set
// on join or by PATCH with the room token. While false for a reader, the
// agent is absent from that reader's context (section and CEL agents) and
// GET /agents; once it holds, it is there.
func TestAgentEnabled(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("ae", nil)
	a := e.join(rm, "agent-a")
	j := e.do("POST", "/rooms/ae/agents", rm.token, map[string]any{"id": "ghost", "name": "Ghost", "enabled": `state._shared.phase == "night"`}).must(t, 201)
	if j.body["enabled"] != `state._shared.phase == "night"` {
		t.Fatalf("join response lacks enabled: %s", j.raw)
	}
	listed := func(tok string) bool {
		r := e.do("GET", "/rooms/ae/agents", tok, nil).must(t, 200)
		return strings.Contains(r.raw, `"ghost"`)
	}
	inCtx := func(tok string) bool {
		return path(e.ctx(rm, tok, "").body, "agents", "ghost") != nil
	}
	inCEL := func(tok string) any {
		return e.do("POST", "/rooms/ae/eval", tok, map[string]any{"expr": `"ghost" in agents`}).must(t, 200).body["value"]
	}
	for _, tok := range []string{a, rm.token} {
		if listed(tok) || inCtx(tok) || inCEL(tok) != false {
			t.Fatalf("a disabled agent is shown")
		}
	}
	e.do("PUT", "/rooms/ae/state", rm.token, map[string]any{"scope": "_shared", "key": "phase", "value": "night"}).must(t, 200)
	if !listed(a) || !inCtx(a) || inCEL(a) != true {
		t.Fatalf("an enabled agent is hidden")
	}
	// PATCH changes and clears it; bad CEL is a 400 naming the field.
	e.do("PATCH", "/rooms/ae/agents/ghost", rm.token, map[string]any{"enabled": "false"}).must(t, 200)
	if listed(a) {
		t.Fatal("PATCH enabled false did not hide the agent")
	}
	if r := e.do("PATCH", "/rooms/ae/agents/ghost", rm.token, map[string]any{"enabled": "1 +"}); r.status != 400 {
		t.Fatalf("bad enabled: %d %s", r.status, r.raw)
	}
	e.do("PATCH", "/rooms/ae/agents/ghost", rm.token, map[string]any{"enabled": ""}).must(t, 200)
	if !listed(a) {
		t.Fatal(`PATCH enabled "" did not clear the gate`)
	}
}
