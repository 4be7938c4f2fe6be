package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/reviewroom"
)

// reviewRoomGolden pins the long session on the review room.
const reviewRoomGolden = "testdata/reviewroom_session.golden"

// reviewFixture is the review room (substrate/reviewroom: 10 agents, 500
// tasks, 1,000 messages) served by an MCP test server, with people who
// own it and so may embody agents in it.
type reviewFixture struct {
	srv  *server
	room *reviewroom.Room
	// people are the sessions by username, each consented to the room at
	// admin.
	people map[string]*sdk.ClientSession
}

// newReviewFixture builds the review room and makes each of the people
// an owner of it (as a person claims a room with its token), connected
// with the room consented. The room is built on a service of its own
// without an expression budget (its 2,000 calls in a few seconds spend a
// room's); the server's service, which every call of the test goes
// through, keeps the default limits.
func newReviewFixture(t *testing.T, people ...string) *reviewFixture {
	t.Helper()
	db := pgtest.New(t)
	srv := startServer(t, db)
	build := substrate.New(db, substrate.Options{Features: testFeatures, Limits: substrate.Limits{RoomCostPerSecond: -1}})
	room, err := reviewroom.Build(context.Background(), build, reviewroom.Options{})
	build.Close()
	if err != nil {
		t.Fatal(err)
	}
	f := &reviewFixture{srv: srv, room: room, people: map[string]*sdk.ClientSession{}}
	for _, name := range people {
		p := owner(t, srv, name, room.ID, room.Token)
		f.people[name] = connectWithToken(t, srv, mintToken(t, srv, p, map[string]string{room.ID: "admin"})["access_token"].(string))
	}
	return f
}

// sessionCall is one call of the recorded session: what was asked, what
// came back, and what it cost the model.
type sessionCall struct {
	user, tool string
	args       map[string]any
	isErr      bool
	structured map[string]any // the error's fields for an error
	text       string
	// textBytes and jsonBytes are the result as text content and as
	// structuredContent JSON (none for an error: text only); the tokens
	// are approxTokens of each.
	textBytes, textTokens, jsonBytes, jsonTokens int
}

type recorder struct {
	t     *testing.T
	f     *reviewFixture
	calls []*sessionCall
}

// call makes a call as user and records it.
func (r *recorder) call(user, tool string, args map[string]any) *sessionCall {
	r.t.Helper()
	c := r.do(user, tool, args)
	r.calls = append(r.calls, c)
	return c
}

// do makes a call without recording it (safe off the test's goroutine:
// no t.Fatal).
func (r *recorder) do(user, tool string, args map[string]any) *sessionCall {
	c := &sessionCall{user: user, tool: tool, args: args}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := r.f.people[user].CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		c.isErr, c.text = true, "protocol error: "+err.Error()
		return c
	}
	c.isErr, c.text = res.IsError, resultText(res)
	c.textBytes, c.textTokens = len(c.text), approxTokens(c.text)
	if res.StructuredContent != nil {
		raw, _ := json.Marshal(res.StructuredContent)
		c.jsonBytes, c.jsonTokens = len(raw), approxTokens(string(raw))
		_ = json.Unmarshal(raw, &c.structured)
	}
	return c
}

// ok fails the test unless the call succeeded.
func (c *sessionCall) ok(t *testing.T) map[string]any {
	t.Helper()
	if c.isErr {
		t.Fatalf("%s %s %v failed: %s", c.user, c.tool, c.args, c.text)
	}
	return c.structured
}

// refused fails the test unless the call was refused with code; it
// returns the error's fields.
func (c *sessionCall) refused(t *testing.T, code string) map[string]any {
	t.Helper()
	if !c.isErr || strings.HasPrefix(c.text, "protocol error") {
		t.Fatalf("%s %s %v was not refused: %s", c.user, c.tool, c.args, c.text)
	}
	e := errorFields(t, c.text)
	if e["error"] != code {
		t.Fatalf("%s %s %v refused with %v, want %s: %s", c.user, c.tool, c.args, e["error"], code, c.text)
	}
	c.structured = e
	return e
}

// waitUntilWaiting returns once agent is waiting in the room (its status,
// which a wait sets before it blocks).
func (f *reviewFixture) waitUntilWaiting(t *testing.T, agent string) {
	t.Helper()
	pgtest.Eventually(t, 20*time.Second, func() bool {
		var status string
		_ = f.srv.db.QueryRow(context.Background(), `SELECT status FROM agents WHERE room_id = $1 AND id = $2`, f.room.ID, agent).Scan(&status)
		return status == "waiting"
	}, "%s to start waiting", agent)
}

// A long session of two people on the review room, through the MCP tools
// as a model makes them: looking around, reading a version and writing
// with it, waits woken by a directed message and by a reply, replies and
// acknowledgements, a loom session, and the mistakes of issue 43 (a
// widening restrict_scope, reply_to a seq that is not a message, a stale
// if_version, a view that must not move, a link to a missing document, a
// bare branch). Each call's tool, arguments, result shape and size (bytes
// and approximate tokens of the text and of the structuredContent JSON)
// are pinned in testdata/reviewroom_session.golden (-update rewrites it;
// sizes may drift by a few percent with the times in them); the
// behaviour is asserted here.
func TestReviewRoomSession(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the review room: 2,000 calls")
	}
	f := newReviewFixture(t, "alice", "bob")
	r := &recorder{t: t, f: f}

	r.call("alice", "sync_lobby", nil).ok(t)
	alice := r.call("alice", "sync_embody", map[string]any{"room": "review"}).ok(t)["agent"].(string)
	def := r.call("alice", "sync_read_context", nil).ok(t)
	if def["versions"] != nil {
		t.Errorf("the default read shows versions: %v", def["versions"])
	}
	// Item 4: the default read says what is open, with a sample of it.
	if open, _ := get(def, "state", "_shared", "_summary", "open_shown").(float64); open == 0 {
		t.Errorf("the default read shows no open task: %v", get(def, "state", "_shared", "_summary"))
	}
	r.call("alice", "sync_read_context", map[string]any{"only": "messages", "messages_limit": 10}).ok(t)
	bob := r.call("bob", "sync_embody", map[string]any{"room": "review"}).ok(t)["agent"].(string)
	r.call("bob", "sync_read_context", map[string]any{"only": "views"}).ok(t)
	r.call("bob", "sync_search", map[string]any{"q": "release_date", "kind": "negotiation", "limit": 5}).ok(t)

	// A wait woken by a message to the waiter comes with it first,
	// whatever the backlog: bob has read none of the room's 1,000
	// messages (item 2).
	woke := make(chan *sessionCall, 1)
	go func() {
		woke <- r.do("bob", "sync_wait", map[string]any{"condition": "messages.directed_unread > 0", "timeout_ms": 30000})
	}()
	f.waitUntilWaiting(t, bob)
	ask := r.call("alice", "sync_send_message", map[string]any{"body": "Can you review task_400? builder and tester both claimed it.", "to": bob, "ack": true}).ok(t)
	askSeq := ask["seq"].(float64)
	w := <-woke
	r.calls = append(r.calls, w)
	w.ok(t)
	if w.structured["triggered"] != true {
		t.Fatalf("the wait did not wake on the directed message: %s", w.text)
	}
	if n, _ := get(w.structured, "context", "messages", "unread").(float64); n < reviewroom.Messages {
		t.Errorf("bob's wake-up counts %v unread, want a backlog of at least %d", n, reviewroom.Messages)
	}
	recent, _ := get(w.structured, "context", "messages", "recent").([]any)
	if len(recent) == 0 || recent[0].(map[string]any)["seq"] != askSeq {
		t.Fatalf("the wake-up does not list the message to bob first (seq %v): %v", askSeq, recent)
	}

	// Alice waits for the answer in the thread; bob acknowledges and
	// replies.
	go func() { woke <- r.do("alice", "sync_wait", map[string]any{"thread": askSeq, "timeout_ms": 30000}) }()
	f.waitUntilWaiting(t, alice)
	r.call("bob", "sync_invoke_action", map[string]any{"action": "_ack", "params": map[string]any{"seq": askSeq}}).ok(t)
	reply := r.call("bob", "sync_send_message", map[string]any{"body": "On it: I keep builder's claim and ask tester to take task_401.", "reply_to": askSeq}).ok(t)
	if reply["thread"] != askSeq {
		t.Fatalf("the reply is not in the thread of %v: %v", askSeq, reply)
	}
	w = <-woke
	r.calls = append(r.calls, w)
	if w.ok(t)["triggered"] != true {
		t.Fatalf("alice's wait on the thread did not wake on the reply: %s", w.text)
	}
	// Acknowledged and seen, the message never wakes bob again.
	again := r.call("bob", "sync_wait", map[string]any{"condition": "messages.directed_unread > 0", "timeout_ms": 1500}).ok(t)
	if again["triggered"] == true {
		t.Fatalf("the acknowledged message woke bob again: %v", again)
	}
	r.call("alice", "sync_read_context", map[string]any{"thread": askSeq}).ok(t)

	// Mistake (item 3): reply_to a seq that is no message; the refusal
	// names the nearest.
	bad := r.call("alice", "sync_send_message", map[string]any{"body": "Thanks", "reply_to": reply["seq"].(float64) + 1}).refused(t, "invalid_param")
	if fmt.Sprint(bad["did_you_mean"]) != fmt.Sprint(reply["seq"]) {
		t.Errorf("reply_to past the last message: did_you_mean %v, want %v", bad["did_you_mean"], reply["seq"])
	}

	// Mistake (item 1): a widening restrict_scope is refused and the scope
	// stays.
	before := r.call("alice", "sync_lobby", nil).ok(t)
	wide := r.call("alice", "sync_restrict_scope", map[string]any{"scope": "rooms:*:admin"}).refused(t, "scope_denied")
	if wide["scope"] != "rooms:review:admin create_rooms" {
		t.Errorf("the refusal does not say the current scope: %v", wide)
	}
	after := r.call("alice", "sync_lobby", nil).ok(t)
	access := func(lobby map[string]any) string {
		var out []string
		for _, r := range asList(lobby["rooms"]) {
			out = append(out, fmt.Sprint(get(r.(map[string]any), "room"), "=", get(r.(map[string]any), "access")))
		}
		return strings.Join(out, " ")
	}
	if access(before) != access(after) || access(after) != "review=admin" {
		t.Fatalf("the refused restrict changed the rooms: before %s, after %s", access(before), access(after))
	}

	// A guarded write (item 7): the version comes from the read the help
	// names, and a stale one is refused with that read.
	r.call("alice", "sync_register_action", map[string]any{"id": "retitle", "description": "Rename a task, if nobody changed it since you read it",
		"params": map[string]any{"task": map[string]any{"type": "string", "required": true}, "title": map[string]any{"type": "string", "required": true},
			"version": map[string]any{"type": "integer", "required": true}},
		"writes": []any{map[string]any{"scope": "_shared", "key": "${params.task}", "merge": map[string]any{"title": "${params.title}"}, "if_version": "${params.version}"}}}).ok(t)
	r.call("alice", "sync_help", map[string]any{"key": "if_version"}).ok(t)
	page := r.call("alice", "sync_read_context", map[string]any{"only": "state._shared", "prefix": "task_40"}).ok(t)
	v, ok := get(page, "versions", "_shared", "task_400").(float64)
	if !ok {
		t.Fatalf("the read of _shared shows no version of task_400: %v", page["versions"])
	}
	r.call("alice", "sync_invoke_action", map[string]any{"action": "retitle", "params": map[string]any{"task": "task_400", "title": "Settle the claim on task 400", "version": v}}).ok(t)
	stale := r.call("alice", "sync_invoke_action", map[string]any{"action": "retitle", "params": map[string]any{"task": "task_400", "title": "Again", "version": v}}).refused(t, "version_conflict")
	if !strings.HasPrefix(fmt.Sprint(stale["next"]), `sync_read_context {"only":"state._shared"`) {
		t.Errorf("the version conflict does not name the read of the version: %v", stale["next"])
	}

	// The loom (item 5): viewing never moves, bad references are refused
	// and nothing of the batch is lost.
	r.call("alice", "sync_loom", map[string]any{"commands": `→ new tree "review notes" "What the review of task_400 found"`}).ok(t)
	r.call("alice", "sync_loom", map[string]any{"commands": "→ add \"builder claimed first\"\n→ add \"tester claimed three steps later\""}).ok(t)
	r.call("alice", "sync_loom", map[string]any{"commands": "→ switch to 2\n→ view 1"}).ok(t)
	added := r.call("alice", "sync_loom", map[string]any{"commands": `→ add "keep builder's claim"`}).ok(t)
	if !strings.Contains(fmt.Sprint(added["results"]), "(child of 2,") {
		t.Errorf("the add after switch to 2; view 1 did not land under 2: %v", added["results"])
	}
	r.call("alice", "sync_loom", map[string]any{"commands": "→ view 99"}).refused(t, "not_found")
	r.call("alice", "sync_loom", map[string]any{"commands": `→ link 2 to doc:"missing"`}).refused(t, "not_found")
	r.call("alice", "sync_loom", map[string]any{"commands": "→ branch from"}).refused(t, "invalid_field")
	failed := r.call("alice", "sync_loom", map[string]any{"commands": "→ add \"tester takes task_401\"\n→ view 98\n→ add \"never\""}).refused(t, "not_found")
	if failed["failed_line"] != "2" {
		t.Errorf("the batch does not say which line failed: %v", failed)
	}
	r.call("bob", "sync_loom", map[string]any{"commands": "→ tree summary"}).ok(t)

	// Bob catches up: the delta since his last read.
	r.call("bob", "sync_wait", map[string]any{"condition": "true", "timeout_ms": 1000}).ok(t)
	r.call("bob", "sync_read_context", map[string]any{"only": "messages", "messages_limit": 5}).ok(t)

	checkReviewGolden(t, r.calls)
	var total, totalJSON, largest int
	var largestCall string
	for i, c := range r.calls {
		total += c.textTokens
		totalJSON += c.jsonTokens
		if n := max(c.textTokens, c.jsonTokens); n > largest {
			largest, largestCall = n, fmt.Sprintf("%d %s %s", i+1, c.user, c.tool)
		}
	}
	t.Logf("%d calls: ~%d tokens as text, ~%d as JSON; the largest ~%d tokens (%s)", len(r.calls), total, totalJSON, largest, largestCall)
}

// checkReviewGolden compares the session with the golden: each call's
// line (user, tool, arguments, result shape) exactly, its sizes within a
// few percent (times and durations in a result vary in length).
func checkReviewGolden(t *testing.T, calls []*sessionCall) {
	t.Helper()
	var b strings.Builder
	b.WriteString("# The long session on the review room (TestReviewRoomSession): per call, who, the tool,\n" +
		"# its arguments, then the sizes of its result (text content and structuredContent JSON,\n" +
		"# bytes and approxTokens; an error is text only) and its shape (keys; [n] a list of n;\n" +
		"# {n keys} a larger object; s, n, b: string, number, bool). Agent ids and seqs are the same every run.\n")
	var tt, jt, tb, jb int
	for i, c := range calls {
		args, _ := json.Marshal(normalise(c.args))
		if c.args == nil {
			args = []byte("{}")
		}
		fmt.Fprintf(&b, "\n%d %s %s %s\n", i+1, c.user, c.tool, args)
		kind := "result"
		if c.isErr {
			kind = "error " + fmt.Sprint(c.structured["error"])
		}
		fmt.Fprintf(&b, "  %s: text %d B ~%d tok; json %d B ~%d tok\n", kind, c.textBytes, c.textTokens, c.jsonBytes, c.jsonTokens)
		if !c.isErr {
			fmt.Fprintf(&b, "  shape: %s\n", shape(normalise(c.structured), 0))
		}
		tt, jt, tb, jb = tt+c.textTokens, jt+c.jsonTokens, tb+c.textBytes, jb+c.jsonBytes
	}
	fmt.Fprintf(&b, "\ntotal: %d calls; text %d B ~%d tok; json %d B ~%d tok\n", len(calls), tb, tt, jb, jt)
	got := b.String()
	if updating() {
		if err := os.WriteFile(reviewRoomGolden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	raw, err := os.ReadFile(reviewRoomGolden)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	want := strings.Split(string(raw), "\n")
	have := strings.Split(got, "\n")
	if len(want) != len(have) {
		t.Fatalf("the session has %d golden lines, the golden %d (review, then -update):\n%s", len(have), len(want), got)
	}
	for i := range have {
		if !sameSizes(want[i], have[i]) {
			t.Errorf("golden line %d changed (review, then -update):\n--- pinned %s\n--- now    %s", i+1, want[i], have[i])
		}
	}
}

// sameSizes compares two golden lines: their words exactly, except
// numbers followed by B or preceded by ~, which may differ by 3 % (or 40).
func sameSizes(a, b string) bool {
	wa, wb := strings.Fields(a), strings.Fields(b)
	if len(wa) != len(wb) {
		return false
	}
	for i := range wa {
		if wa[i] == wb[i] {
			continue
		}
		size := i+1 < len(wa) && wa[i+1] == "B" || strings.HasPrefix(wa[i], "~")
		x, errA := strconv.Atoi(strings.TrimPrefix(wa[i], "~"))
		y, errB := strconv.Atoi(strings.TrimPrefix(wb[i], "~"))
		if !size || errA != nil || errB != nil {
			return false
		}
		if d := max(x-y, y-x); d > max(40, x*3/100) {
			return false
		}
	}
	return true
}

// shape is v's structure in one line: an object's keys (sorted) with
// their shapes down to depth 3, a larger object or a deeper one as its
// key count, a list as its length and its first item's shape.
func shape(v any, depth int) string {
	switch x := v.(type) {
	case map[string]any:
		if len(x) > 12 || depth >= 3 {
			return fmt.Sprintf("{%d keys}", len(x))
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + ": " + shape(x[k], depth+1)
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case []any:
		if len(x) == 0 {
			return "[0]"
		}
		return fmt.Sprintf("[%d × %s]", len(x), shape(x[0], depth+1))
	case string:
		return "s"
	case float64:
		return "n"
	case bool:
		return "b"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}
