package collab_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/loom"
	"github.com/syncsubstrate/sync/substrate/loom/collab"
)

// Attacks that must fail: a collaborator is its agent, no more. Its model
// is not trusted: whatever it answers runs as the agent would over MCP,
// within the agent's loom permissions and the branches' turns, and an
// answer beyond the limits runs not at all.

// A model whose agent may only look cannot write, grant itself
// permissions or stop another collaborator; a branch another holds is
// refused to it.
func TestAttackCollaboratorOnlyItsAgentsPermissions(t *testing.T) {
	e := newEnv(t, loom.Options{}, "alice", "claude")
	e.run(e.admin, `→ new tree "t" "`+root+`"
→ permit alice human loom_write`)
	// claude: the defaults (loom_aware, doc_read).
	// One forbidden line per answer: the lines after a failed one do not
	// run.
	chat := newChat(t, answers("→ add \"forged\"", "→ permit claude all", "→ edit 1 \"rewritten\"", "→ write doc:\"notes\" append \"x\"", "→ stop alice", "I cannot, then."))
	r := e.start(collab.Config{Agent: "claude", ChatURL: chat.srv.URL})
	r.calls(t, chat, 6)
	var told []string
	for _, req := range chat.requests() {
		told = append(told, req.last())
	}
	has(t, strings.Join(told, "\n"), "✗ permission denied: loom_write not enabled", "✗ permission denied: only room authority sets loom permissions",
		"✗ permission denied: doc_write not enabled")
	res := e.run(e.admin, "→ tree summary\n→ permit claude")
	has(t, res.Text, "1 nodes", "✓ claude (model): loom_aware, doc_read")
	r.stop()
	r.wait(t)

	// A branch whose turn alice holds: the collaborator (now a writer)
	// follows branch 1 and writes on alice's branch 1.2 by name.
	e.run(e.admin, "→ permit claude loom_write")
	e.run(e.ag["alice"], `→ add from:1 "main line"
→ yield
→ branch from 1 "alice's own line"`) // node 3, branch 1.2, alice's turn
	chat2 := newChat(t, answers("→ add from:3 \"on alice's branch\"\n→ continue from 3", "Fine."))
	r = e.start(collab.Config{Agent: "claude", ChatURL: chat2.srv.URL, Branch: "1"})
	r.calls(t, chat2, 2)
	has(t, chat2.requests()[1].last(), "✗ branch 1.2 is alice's turn until")
	if res := e.run(e.admin, "→ list 3 continuations"); !strings.Contains(res.Text, "no continuations") {
		t.Fatalf("a node on alice's branch:\n%s", res.Text)
	}
}

// An answer over 1 MiB is refused unread (a 10 MB one is not buffered); an
// answer over the character or command limits is refused whole, and the
// model is told; commands naming other rooms run in the collaborator's
// own room only, and read nothing of the other.
func TestAttackCollaboratorHugeOrMaliciousAnswers(t *testing.T) {
	e := newEnv(t, loom.Options{}, "claude")
	ctx := context.Background()
	e.run(e.admin, `→ new tree "t" "`+root+`"
→ permit claude loom_write`)
	sec, err := e.svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	secAdmin, _ := e.svc.Authenticate(ctx, sec.Token)
	if _, err := loom.Of(e.svc).Run(ctx, secAdmin, "secret", `→ new tree "SECRET-TREE" "SECRET-ROOT"`+"\n"+`→ write doc:"plans" append "SECRET-DOC"`); err != nil {
		t.Fatal(err)
	}
	before, _ := e.svc.GetRoom(ctx, secAdmin, "secret")

	// The first call is answered raw (below); answers gives the others.
	chat := newChat(t, answers(strings.Repeat("→ view 1\n", 30), "→ add \""+strings.Repeat("x", 40_000)+"\"",
		"→ view 1 room:secret\n→ jump tree:1 node:1 room:secret\n→ read doc:\"plans\" room:secret\n→ add \"pwned\" room:secret\n→ new tree \"x\" room:secret", "Done."))
	var rawDone atomic.Bool
	chat.raw = func(w http.ResponseWriter, r chatReq) bool {
		if rawDone.Swap(true) {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"message":{"content":"`))
		chunk := bytes.Repeat([]byte("→ add \\\"a\\\"\\n"), 1000)
		for n := 0; n < 10<<20; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return true
			}
		}
		_, _ = w.Write([]byte(`"}}]}`))
		return true
	}
	r := e.start(collab.Config{Agent: "claude", ChatURL: chat.srv.URL, TurnCalls: 20})
	r.calls(t, chat, 5)
	reqs := chat.requests()
	has(t, reqs[1].last(), "your last answer was over 1 MiB and was refused: nothing in it ran")
	has(t, reqs[2].last(), "was refused: at most 32000 characters and 24 commands an answer; nothing in it ran")
	has(t, reqs[3].last(), "was refused: at most 32000 characters")
	cur := reqs[4].last()
	has(t, cur, "✗ commands act in the room they are sent to; room:secret is not an option")
	for _, rq := range reqs {
		if strings.Contains(rq.all(), "SECRET") {
			t.Fatalf("the other room's content reached the model:\n%s", rq.all())
		}
	}
	after, _ := e.svc.GetRoom(ctx, secAdmin, "secret")
	if after.Seq != before.Seq {
		t.Fatalf("the other room changed: seq %d → %d", before.Seq, after.Seq)
	}
	if res := e.run(e.admin, "→ tree summary"); !strings.Contains(res.Text, "2 nodes") && !strings.Contains(res.Text, "1 nodes") {
		t.Fatalf("%s", res.Text)
	}
	// Nothing of the refused answers ran: no node "a", no 40,000 x's.
	res := e.run(e.admin, "→ list 1 continuations")
	if strings.Contains(res.Text, "xxxxxxxx") || strings.Contains(res.Text, "(branch 1, claude›) a") {
		t.Fatalf("a refused answer ran:\n%s", res.Text)
	}
	r.stop()
	r.wait(t)
}

// The chat key is sent to the endpoint and appears nowhere else: not in
// the logs, the trace, the record, the room's state or views.
func TestAttackCollaboratorKeyNeverShown(t *testing.T) {
	const key = "sk-TOPSECRET-4242"
	e := newEnv(t, loom.Options{}, "claude")
	e.run(e.admin, `→ new tree "t" "`+root+`"
→ permit claude loom_write`)
	var mu sync.Mutex
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var k atomic.Int32
	chat := newChat(t, func(r chatReq) string { return "→ view 1" })
	chat.raw = func(w http.ResponseWriter, r chatReq) bool {
		if k.Add(1) <= 2 {
			http.Error(w, "invalid key "+key, http.StatusUnauthorized) // an endpoint echoing the key
			return true
		}
		return false
	}
	rec := e.start(collab.Config{Agent: "claude", ChatURL: chat.srv.URL + "/v1", ChatKey: key, MaxCalls: 4, Log: log}).wait(t)
	if rec.Calls != 4 {
		t.Fatalf("%+v", rec)
	}
	chat.mu.Lock()
	auth := chat.auth[0]
	chat.mu.Unlock()
	if auth != "Bearer "+key {
		t.Fatalf("the endpoint got %q", auth)
	}
	// A view over the loom's state, as a room would register it.
	ctx := context.Background()
	if _, err := e.svc.RegisterView(ctx, e.admin, e.room, substrate.ViewDef{ID: "collaborators", Expr: `state._loom.filter(k, k.startsWith("collab:")).map(k, state._loom[k])`}); err != nil {
		t.Fatal(err)
	}
	envl, err := e.svc.Context(ctx, e.admin, e.room, substrate.ContextRequest{})
	if err != nil {
		t.Fatal(err)
	}
	all, _ := json.Marshal(envl)
	state, _ := e.svc.ReadState(ctx, e.admin, e.room, substrate.ReadQuery{})
	st, _ := json.Marshal(state)
	tr, _ := e.svc.ReadState(ctx, e.admin, e.room, substrate.ReadQuery{Scope: "claude", Limit: 500})
	trj, _ := json.Marshal(tr)
	audit, _ := e.svc.AuditPage(ctx, e.admin, e.room, 0, 0, 1000)
	aj, _ := json.Marshal(audit)
	mu.Lock()
	lg := logs.String()
	mu.Unlock()
	for name, text := range map[string]string{"logs": lg, "context and views": string(all), "state": string(st), "trace": string(trj), "audit": string(aj)} {
		if strings.Contains(text, key) || strings.Contains(text, "TOPSECRET") {
			t.Fatalf("the chat key is in the %s:\n%s", name, text)
		}
	}
	has(t, string(all), `"calls":4`) // the view shows the spend
	has(t, lg, "401 Unauthorized")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Taking loom_aware away from a running collaborator stops it at the next
// change, and its record says why.
func TestAttackCollaboratorStopsWhenDenied(t *testing.T) {
	e := newEnv(t, loom.Options{}, "claude")
	e.run(e.admin, `→ new tree "t" "`+root+`"
→ permit claude loom_write`)
	chat := newChat(t, func(r chatReq) string { return "Waiting." })
	r := e.start(collab.Config{Agent: "claude", ChatURL: chat.srv.URL})
	r.waiting(t)
	e.run(e.admin, "→ deny claude loom_aware")
	<-r.done
	if r.err == nil || !strings.Contains(r.err.Error(), "loom_aware not enabled") {
		t.Fatalf("err %v", r.err)
	}
	usage, _ := loom.Of(e.svc).CollaboratorUsage(context.Background(), e.admin, e.room)
	if len(usage) != 1 || usage[0].State != "stopped" || !strings.Contains(usage[0].Reason, "loom_aware not enabled") {
		t.Fatalf("%+v", usage)
	}
}

// → stop while a call is in flight: the answer that comes back after the
// stop runs nothing (a person stops a collaborator because of what it is
// doing; what it was about to do is not done after all).
func TestAttackCollaboratorStopDiscardsTheAnswerInFlight(t *testing.T) {
	e := newEnv(t, loom.Options{}, "claude")
	e.run(e.admin, `→ new tree "t" "`+root+`"
→ permit claude loom_write`)
	inflight, release := make(chan struct{}), make(chan struct{})
	var k atomic.Int32
	chat := newChat(t, func(r chatReq) string {
		if k.Add(1) == 1 {
			close(inflight)
			<-release
			return "→ add \"written after the stop\"\n→ write doc:\"notes\" append \"after the stop\""
		}
		return "Done."
	})
	r := e.start(collab.Config{Agent: "claude", ChatURL: chat.srv.URL})
	select {
	case <-inflight:
	case <-time.After(30 * time.Second):
		t.Fatal("no call")
	}
	has(t, e.run(e.admin, "→ stop claude").Text, "✓ asked collaborator claude to stop")
	close(release)
	rec := r.wait(t)
	if !strings.Contains(rec.Reason, "asked by") {
		t.Fatalf("%+v", rec)
	}
	if res := e.run(e.admin, "→ list 1 continuations"); strings.Contains(res.Text, "after the stop") {
		t.Fatalf("the answer in flight ran after → stop:\n%s", res.Text)
	}
	if _, err := loom.Of(e.svc).Run(context.Background(), e.admin, e.room, `→ read doc:"notes"`); err == nil {
		t.Fatal("the answer in flight wrote a doc after → stop")
	}
	if len(chat.requests()) != 1 {
		t.Fatalf("%d calls after the stop", len(chat.requests())-1)
	}
}

// The chat key goes to the configured endpoint only: an endpoint that
// redirects (to another port of the same host, where Go's client would
// forward the Authorization header) is refused, and the other server
// never sees the key.
func TestAttackCollaboratorKeyNotForwardedOnRedirect(t *testing.T) {
	const key = "sk-REDIRECTED-777"
	e := newEnv(t, loom.Options{}, "claude")
	e.run(e.admin, `→ new tree "t" "`+root+`"
→ permit claude loom_write`)
	other := newChat(t, func(r chatReq) string { return "Hello from elsewhere." })
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.srv.URL+"/v1/chat/completions", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirect.Close)
	r := e.start(collab.Config{Agent: "claude", ChatURL: redirect.URL, ChatKey: key, MaxCalls: 3})
	select {
	case <-other.got:
	case <-r.done:
	case <-time.After(30 * time.Second):
	}
	other.mu.Lock()
	auth := append([]string(nil), other.auth...)
	other.mu.Unlock()
	for _, a := range auth {
		if strings.Contains(a, key) {
			t.Fatalf("the key reached the server redirected to (%d requests)", len(auth))
		}
	}
	r.stop()
	rec := r.wait(t)
	if rec.Calls == 0 || !strings.Contains(rec.Reason, "failed") {
		t.Fatalf("%+v", rec)
	}
	tr := strings.Join(e.trace("claude"), "\n")
	has(t, tr, "redirect")
}

// Notifications that are not a change on its branch (heartbeats, state
// writes, another tree, someone moving about) never lead to a model
// call: a room busy with other things spends none of the budget. (Seen
// failing with the head check removed: a call per notification.)
func TestAttackCollaboratorNoCallWithoutAChangeOnItsBranch(t *testing.T) {
	e := newEnv(t, loom.Options{}, "alice", "claude")
	ctx := context.Background()
	e.run(e.admin, `→ new tree "t" "`+root+`"
→ new tree "other" "elsewhere"
→ permit claude loom_write
→ permit alice human loom_write`)
	chat := newChat(t, func(r chatReq) string { return "I wait for you." })
	r := e.start(collab.Config{Agent: "claude", ChatURL: chat.srv.URL, Tree: 1})
	r.calls(t, chat, 1)
	for i := 0; i < 20; i++ {
		if _, err := e.svc.Heartbeat(ctx, e.ag["alice"], e.room, "alice", "busy"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.WriteState(ctx, e.admin, e.room, []substrate.Write{{Scope: "board", Key: "k", Value: json.RawMessage(`{"n":` + strconv.Itoa(i) + `}`)}}, false); err != nil {
			t.Fatal(err)
		}
	}
	e.run(e.ag["alice"], "→ jump tree:2 node:1\n→ add \"on the other tree\"\n→ yield\n→ jump tree:1 node:1")
	// Every notification has been seen once the collaborator waits after
	// the last one. Stays: nothing marks the last of the notifications
	// the writes above cause, and what this checks is that none of them
	// leads to a call; the drained waits then leave r.waiting below to
	// the write after.
	time.Sleep(500 * time.Millisecond)
	for len(r.waits) > 0 {
		<-r.waits
	}
	if _, err := e.svc.WriteState(ctx, e.admin, e.room, []substrate.Write{{Scope: "board", Key: "last", Value: json.RawMessage(`1`)}}, false); err != nil {
		t.Fatal(err)
	}
	r.waiting(t)
	if n := len(chat.requests()); n != 1 {
		t.Fatalf("%d model calls without a change on the branch", n-1)
	}
	e.run(e.ag["alice"], "→ add from:1 \"A real change.\"\n→ yield")
	r.calls(t, chat, 2)
	r.stop()
	r.wait(t)
	if n := len(chat.requests()); n != 2 {
		t.Fatalf("%d calls for one change", n)
	}
}

// Heartbeats and status changes in the room (which commit nothing) do not
// even wake a waiting collaborator: a room of busy agents costs it no
// reads. (Seen failing with Watch: a wake and a read per heartbeat.)
func TestAttackCollaboratorNotWokenByHeartbeats(t *testing.T) {
	e := newEnv(t, loom.Options{}, "alice", "claude")
	ctx := context.Background()
	e.run(e.admin, `→ new tree "t" "`+root+`"
→ permit claude loom_write`)
	chat := newChat(t, func(r chatReq) string { return "I wait." })
	r := e.start(collab.Config{Agent: "claude", ChatURL: chat.srv.URL})
	r.calls(t, chat, 1)
	// Stays (here and below): what this checks is an absence, that
	// heartbeats wake nothing; the time lets a wake-up that should not
	// happen show itself.
	time.Sleep(300 * time.Millisecond)
	for len(r.waits) > 0 {
		<-r.waits
	}
	for i := 0; i < 20; i++ {
		status := []string{"busy", "active"}[i%2]
		if _, err := e.svc.Heartbeat(ctx, e.ag["alice"], e.room, "alice", status); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // pacing: a heartbeat every 10 ms, as a busy room
	}
	time.Sleep(500 * time.Millisecond)
	if n := len(r.waits); n != 0 {
		t.Fatalf("woken %d times by 20 heartbeats", n)
	}
}

// Why the chat endpoint failed (its address, what the network said) is
// for room authority, in the trace; the record every loom_aware reader
// sees says only that it failed.
func TestAttackCollaboratorEndpointErrorsStayInTheTrace(t *testing.T) {
	e := newEnv(t, loom.Options{}, "claude")
	e.run(e.admin, `→ new tree "t" "`+root+`"
→ permit claude loom_write`)
	dead := httptest.NewServer(http.NotFoundHandler())
	addr := strings.TrimPrefix(dead.URL, "http://")
	dead.Close()
	rec := e.start(collab.Config{Agent: "claude", ChatURL: dead.URL}).wait(t)
	if !strings.Contains(rec.Reason, "the chat endpoint failed 3 times in a row") || strings.Contains(rec.Reason, addr) {
		t.Fatalf("the record says %q", rec.Reason)
	}
	usage, err := loom.Of(e.svc).CollaboratorUsage(context.Background(), e.ag["claude"], e.room)
	if err != nil || len(usage) != 1 || strings.Contains(usage[0].Reason, addr) {
		t.Fatalf("%v %+v", err, usage)
	}
	has(t, strings.Join(e.trace("claude"), "\n"), addr)
}

// A node its own agent writes from elsewhere (another session of the same
// agent) or a continuation it asked for that someone fulfils later is not
// news: no model call follows it, only someone else's node does. (Seen
// failing without the check: a call with nothing new per such node.)
func TestAttackCollaboratorOwnNodesCallNothing(t *testing.T) {
	e := newEnv(t, loom.Options{}, "alice", "claude")
	e.run(e.admin, `→ new tree "t" "`+root+`"
→ permit claude loom_write loom_generate
→ permit alice human loom_write`)
	chat := newChat(t, answers("→ continue from 1", "I wait."))
	r := e.start(collab.Config{Agent: "claude", ChatURL: chat.srv.URL})
	r.calls(t, chat, 2)
	// No generator: the continuation is a request (g1), fulfilled by
	// alice for claude; then claude's agent writes from another session.
	e.run(e.ag["alice"], "→ fulfil g1 \"The door was open.\"\n→ yield")
	r.waiting(t)
	e.run(e.ag["claude"], "→ add from:2 \"a note from claude's other session\"\n→ yield")
	r.waiting(t)
	// Stays: an absence (no call for its own nodes) is what this checks.
	time.Sleep(300 * time.Millisecond)
	if n := len(chat.requests()); n != 2 {
		t.Fatalf("%d calls for its own nodes", n-2)
	}
	e.run(e.ag["alice"], "→ add from:3 \"Alice writes.\"\n→ yield")
	r.calls(t, chat, 3)
	has(t, chat.requests()[2].last(), "by alice")
}

// genStub is a completions endpoint that counts the texts it generates
// and reports usage (prompt 100, 200 a text).
type genStub struct {
	srv          *httptest.Server
	calls, texts atomic.Int32
}

func newGen(t *testing.T) *genStub {
	g := &genStub{}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			N int `json:"n"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		g.calls.Add(1)
		g.texts.Add(int32(req.N))
		var ch []map[string]string
		for i := 0; i < req.N; i++ {
			ch = append(ch, map[string]string{"text": " and then more happened."})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": ch, "usage": map[string]int{"prompt_tokens": 100, "completion_tokens": 200 * req.N}})
	}))
	t.Cleanup(g.srv.Close)
	return g
}

// A model that asks the base model for as much as an answer may hold
// (24 × → continue n:4, call after call) gets what the collaborator's
// budget of continuations leaves, no more; every generation is counted in
// its record, its tokens in the token budget, and the refused ones say
// why.
func TestAttackCollaboratorBaseModelSpendIsCounted(t *testing.T) {
	gen := newGen(t)
	e := newEnv(t, loom.Options{GeneratorURL: gen.srv.URL}, "alice", "claude")
	e.run(e.admin, `→ new tree "t" "`+root+`"
→ permit claude loom_write loom_generate`)
	greedy := strings.Repeat("→ continue n:4\n", 24)
	chat := newChat(t, func(r chatReq) string { return greedy })
	r := e.start(collab.Config{Agent: "claude", ChatURL: chat.srv.URL, MaxCalls: 3, MaxGenerations: 10})
	rec := r.wait(t)
	if n := gen.texts.Load(); n > 10 {
		t.Fatalf("the base model generated %d texts for a budget of 10 (%d calls)", n, gen.calls.Load())
	}
	if int32(rec.Generations) != gen.texts.Load() || int32(rec.GenCalls) != gen.calls.Load() || rec.GenTokens != int64(100*rec.GenCalls+200*rec.Generations) {
		t.Fatalf("record %d calls %d texts %d tokens; the generator had %d calls %d texts", rec.GenCalls, rec.Generations, rec.GenTokens, gen.calls.Load(), gen.texts.Load())
	}
	if rec.Tokens() != rec.PromptTokens+rec.CompletionTokens+rec.GenTokens {
		t.Fatalf("tokens %d", rec.Tokens())
	}
	reqs := chat.requests()
	has(t, reqs[1].all(), "the base model was not called", "your budget has 2 left")
	usage, _ := loom.Of(e.svc).CollaboratorUsage(context.Background(), e.ag["alice"], e.room)
	if len(usage) != 1 || usage[0].Generations != rec.Generations || usage[0].MaxGenerations != 10 {
		t.Fatalf("%+v", usage)
	}
}

// The base model's tokens count against the token budget before a call
// is made: a continuation that could pass it is refused, so the record
// never shows more than the budget.
func TestAttackCollaboratorBaseModelTokensWithinBudget(t *testing.T) {
	gen := newGen(t)
	e := newEnv(t, loom.Options{GeneratorURL: gen.srv.URL}, "claude")
	e.run(e.admin, `→ new tree "t" "`+root+`"
→ permit claude loom_write loom_generate`)
	chat := newChat(t, func(r chatReq) string { return strings.Repeat("→ continue n:4\n", 24) })
	r := e.start(collab.Config{Agent: "claude", ChatURL: chat.srv.URL, MaxCalls: 2, MaxTokens: 6000, MaxGenerations: 1000})
	rec := r.wait(t)
	if rec.Tokens() > 6000 || rec.GenCalls == 0 {
		t.Fatalf("spent %d tokens of 6000 (%d base-model calls, %d tokens)", rec.Tokens(), rec.GenCalls, rec.GenTokens)
	}
	if gen.calls.Load() != int32(rec.GenCalls) {
		t.Fatalf("generator %d calls, record %d", gen.calls.Load(), rec.GenCalls)
	}
}

// A collaborator killed without a word (kill -9: nothing records its
// stop) shows as gone once its lease lapses, and → stop says so; one
// that lives renews its lease while it waits.
func TestAttackCollaboratorKilledShowsGone(t *testing.T) {
	e := newEnv(t, loom.Options{}, "alice", "claude", "ann")
	e.run(e.admin, `→ new tree "t" "`+root+`"
→ permit claude loom_write
→ permit alice human loom_write`)
	ctx := context.Background()
	// What a killed collaborator leaves: its last update, then nothing.
	if _, err := loom.Of(e.svc).CollabUpdate(ctx, e.ag["ann"], e.room, loom.CollabRecord{State: "starting", Lease: 300 * time.Millisecond}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := loom.Of(e.svc).CollabUpdate(ctx, e.ag["ann"], e.room, loom.CollabRecord{State: "waiting", Lease: 300 * time.Millisecond}, ""); err != nil {
		t.Fatal(err)
	}
	chat := newChat(t, func(r chatReq) string { return "Waiting." })
	// The live one's lease is long enough to outlast a renewal delayed on
	// a loaded machine (a renewal is a write of the room, every third of
	// the lease: with 300 ms, a room lock or a database held 200 ms made
	// it lapse), and the test waits past it, so it shows alive only by
	// renewing.
	const lease = 1500 * time.Millisecond
	r := e.start(collab.Config{Agent: "claude", ChatURL: chat.srv.URL, Lease: lease})
	r.waiting(t)
	// Stays: the lease running out on the real clock is what this checks
	// the collaborator outlives by renewing.
	time.Sleep(lease + 500*time.Millisecond)
	usage, err := loom.Of(e.svc).CollaboratorUsage(ctx, e.ag["alice"], e.room)
	if err != nil || len(usage) != 2 {
		t.Fatalf("%v %+v", err, usage)
	}
	byAgent := map[string]loom.CollabRecord{}
	for _, u := range usage {
		byAgent[u.Agent] = u
	}
	if a := byAgent["ann"]; a.State != "gone" || !strings.Contains(a.Reason, "no heartbeat since") {
		t.Fatalf("the killed collaborator shows %q %q", a.State, a.Reason)
	}
	if c := byAgent["claude"]; c.State != "waiting" {
		t.Fatalf("the live collaborator shows %q %q (alive until %s)", c.State, c.Reason, c.AliveUntil)
	}
	_, err = loom.Of(e.svc).Run(ctx, e.ag["alice"], e.room, "→ stop ann")
	if err == nil || !strings.Contains(err.Error(), "not a running collaborator: gone") {
		t.Fatalf("stop of a gone collaborator: %v", err)
	}
	e.run(e.ag["alice"], "→ stop claude")
	if rec := r.wait(t); rec.State != "stopped" || !rec.AliveUntil.IsZero() {
		t.Fatalf("%+v", rec)
	}
}

// Two collaborators on one branch answer each other ModelTurns times in
// a row, then wait for a person: a person's node resumes them.
func TestAttackCollaboratorsDoNotPingPong(t *testing.T) {
	e := newEnv(t, loom.Options{}, "alice", "ann", "ben")
	e.run(e.admin, `→ new tree "duet" "`+root+`"
→ permit ann loom_write
→ permit ben loom_write
→ permit alice human loom_write`)
	answer := func(name string) func(r chatReq) string {
		var k atomic.Int32
		return func(r chatReq) string {
			cur := r.last()
			if strings.Contains(cur, "You have joined") || strings.Contains(cur, "New on your branch") {
				return fmt.Sprintf("→ add \"%s %d\"\n→ yield", name, k.Add(1))
			}
			return "Over to you."
		}
	}
	annChat, benChat := newChat(t, answer("ann")), newChat(t, answer("ben"))
	a := e.start(collab.Config{Agent: "ann", ChatURL: annChat.srv.URL, ModelTurns: 2})
	b := e.start(collab.Config{Agent: "ben", ChatURL: benChat.srv.URL, ModelTurns: 2})
	quiet := func() int {
		// Quiet: no call for a second while both wait. Stays: quiet is
		// an absence, seen only over time.
		for n := -1; ; {
			time.Sleep(time.Second)
			m := len(annChat.requests()) + len(benChat.requests())
			if m == n {
				return m
			}
			if m > 40 {
				t.Fatalf("%d calls: the collaborators answer each other on and on", m)
			}
			n = m
		}
	}
	// The pause is what the trace says, so wait for that line first: a
	// quiet second alone may only be a loaded machine between two turns.
	const paused = "not answering: 2 turns in a row answered only model-written nodes"
	for deadline := time.Now().Add(30 * time.Second); ; {
		if strings.Contains(strings.Join(e.trace("ann"), "\n")+strings.Join(e.trace("ben"), "\n"), paused) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no collaborator paused in 30s; traces:\n%s\n%s", strings.Join(e.trace("ann"), "\n"), strings.Join(e.trace("ben"), "\n"))
		}
		if len(annChat.requests())+len(benChat.requests()) > 40 {
			t.Fatal("the collaborators answer each other on and on")
		}
		time.Sleep(20 * time.Millisecond) // polls the trace: the pause writes no other signal
	}
	first := quiet()
	// Each: its first look, then 2 turns answering the other model.
	if first > 6 {
		t.Fatalf("%d calls before they paused", first)
	}
	g, err := loom.Of(e.svc).Glance(context.Background(), e.ag["alice"], e.room, 1, "1")
	if err != nil {
		t.Fatal(err)
	}
	e.run(e.ag["alice"], fmt.Sprintf("→ add from:%d \"A person writes.\"\n→ yield", g.Head.ID))
	for deadline := time.Now().Add(30 * time.Second); len(annChat.requests())+len(benChat.requests()) == first; {
		if time.Now().After(deadline) {
			t.Fatal("a person's node did not resume the collaborators in 30s")
		}
		time.Sleep(20 * time.Millisecond) // polls the stubs' call counts
	}
	second := quiet()
	if second <= first || second-first > 6 {
		t.Fatalf("calls %d after the person's node (%d before)", second, first)
	}
	a.stop()
	b.stop()
}
