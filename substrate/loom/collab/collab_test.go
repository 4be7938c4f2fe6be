package collab_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/substrate/loom"
	"github.com/syncsubstrate/sync/substrate/loom/collab"
)

const root = "The house stood empty at the end of the lane."
const second = "She hadn't visited since her mother's death."

// The prompt is assembled in seed 002's order, command lines never reach
// the conversation, and results are shown once, then named as faded.
func TestCollaboratorAssemblyOrderAndFading(t *testing.T) {
	e := newEnv(t, loom.Options{}, "alice", "claude")
	e.run(e.admin, `→ new tree "story" "`+root+`"
→ permit alice human loom_write
→ permit claude loom_write`)
	e.run(e.ag["alice"], `→ add from:1 "`+second+`"
→ yield`)
	chat := newChat(t, answers("I want to look at the root first.\n→ view 1", "Now the second node.\n→ view 2",
		"The door could be open. → not a command mid-line\n→ add \"The door was open.\"", "Your turn, Alice."))
	r := e.start(collab.Config{Agent: "claude", ChatURL: chat.srv.URL})
	r.waiting(t)
	reqs := chat.requests()
	if len(reqs) != 4 {
		t.Fatalf("%d calls, want 4", len(reqs))
	}
	// Order: system (base prompt, loom addendum, collaborator's rhythm),
	// then memory, ambient, the branch, the current turn.
	first := reqs[0]
	if first.Messages[0].Role != "system" || len(first.Messages) != 2 {
		t.Fatalf("first call's messages: %+v", first.Messages)
	}
	inOrder(t, first.Messages[0].Content, "thoughtful writing collaborator", "You are working in a loom (seed 002)", "You are claude, a collaborator",
		"Your permissions: loom_aware, loom_write, doc_read")
	inOrder(t, first.last(), "⟨memory⟩", "⟨node:2 depth:1", `⟨branch 1 of tree 1 "story": 2 nodes`, root+" ︱ "+second,
		"You have joined as claude", "⟨budget: call 1 of 50")
	// Call 2: the results of call 1's command, once, with its marker.
	has(t, reqs[1].last(), "→ view 1\n#1 · _room", "⟨r1: shown once")
	// Call 3: call 1's result faded, named; call 2's shown.
	has(t, reqs[2].last(), "⟨r1 faded: view 1", "→ view 2\n#2 ← 1 · alice")
	for i, rq := range reqs {
		for _, m := range rq.Messages[1 : len(rq.Messages)-1] {
			// The conversation (all but the current turn) holds no
			// command line and no result.
			if strings.Contains(m.Content, "→ view") || strings.Contains(m.Content, "#1 · _room") || strings.Contains(m.Content, "→ add") {
				t.Fatalf("call %d: a command or result in the conversation:\n%s", i+1, m.Content)
			}
		}
	}
	// The model's words are kept (without its command lines), as the
	// assistant's turns.
	last := reqs[3]
	roles := ""
	for _, m := range last.Messages {
		roles += m.Role[:1]
	}
	if roles != "suauauau" {
		t.Fatalf("roles %q: %s", roles, last.all())
	}
	has(t, last.all(), "I want to look at the root first.", "Now the second node.", "The door could be open. → not a command mid-line")
	// The add ran, through the loom, as claude, on the branch it follows.
	res := e.run(e.admin, "→ view 3")
	has(t, res.Text, "#3 ← 2 · claude› · branch 1", "The door was open.")
	// Its turn is over: the branch is free.
	e.run(e.ag["alice"], "→ add from:3 \"She went in.\"\n→ yield")
	r.calls(t, chat, 5)
	reqs = chat.requests()
	has(t, reqs[len(reqs)-1].last(), "New on your branch since you last looked (at its end above): #4 by alice.")
	if strings.Contains(reqs[len(reqs)-1].last(), "#3 by") {
		t.Fatal("its own node was announced as news")
	}
	// Calls and tokens are in the room: the record and the trace.
	r.stop()
	rec := r.wait(t)
	if rec.Calls != 5 || rec.PromptTokens == 0 || rec.State != "stopped" {
		t.Fatalf("record %+v", rec)
	}
	usage, err := loom.Of(e.svc).CollaboratorUsage(context.Background(), e.ag["alice"], e.room)
	if err != nil || len(usage) != 1 || usage[0].Calls != 5 || usage[0].Tokens() != rec.Tokens() {
		t.Fatalf("usage %+v %v", usage, err)
	}
	tr := strings.Join(e.trace("claude"), "\n")
	inOrder(t, tr, "collaborating with model instruct on tree 1 branch 1", "call 1:", "view 1", "call 5:", "stopped: interrupted")
}

// Over ContextTokens the branch's beginning is summarised and earlier
// exchanges are left out, each with a notice; the memory block prunes as
// ForModel's does.
func TestCollaboratorPrunes(t *testing.T) {
	e := newEnv(t, loom.Options{MemoryTokens: 80}, "alice", "claude")
	var b strings.Builder
	b.WriteString(`→ new tree "long" "` + root + `"` + "\n→ permit claude loom_write\n→ permit alice human loom_write\n")
	for i := 2; i <= 40; i++ {
		fmt.Fprintf(&b, "→ add from:%d \"Paragraph %d. The rain kept falling on the roof of the old house, and nobody came.\"\n", i-1, i)
	}
	b.WriteString("→ yield")
	e.run(e.admin, b.String())
	var n atomic.Int32
	chat := newChat(t, func(r chatReq) string {
		k := n.Add(1)
		if k < 12 {
			return fmt.Sprintf("Thought %d about the rain, at some length so that it costs tokens in the history of this conversation.\n→ pin %d\n→ stash \"s%d\" \"%s\"", k, k, k, strings.Repeat("words ", 30))
		}
		return "Enough."
	})
	r := e.start(collab.Config{Agent: "claude", ChatURL: chat.srv.URL, ContextTokens: 600, TurnCalls: 20})
	r.waiting(t)
	reqs := chat.requests()
	lastReq := reqs[len(reqs)-1].all()
	has(t, lastReq, "⟨pruned to fit 400 tokens: the branch's first", "extractive summary", "→ view branch:1 as:prose full reads them",
		"⟨pruned: ", "earlier exchanges of yours left out", "pruned to fit 80 tokens:", "Paragraph 40.")
	if strings.Contains(lastReq, "Thought 1 about") {
		t.Fatal("the oldest exchange is still there")
	}
	for _, rq := range reqs {
		if tk := loom.Tokens(rq.all()); tk > 4000 {
			t.Fatalf("a call of ~%d tokens", tk)
		}
	}
}

// Two collaborators on one branch take turns: neither writes while the
// other holds the branch, and the nodes alternate.
func TestCollaboratorsTakeTurns(t *testing.T) {
	e := newEnv(t, loom.Options{}, "alice", "ann", "ben")
	e.run(e.admin, `→ new tree "duet" "`+root+`"
→ permit ann loom_write
→ permit ben loom_write`)
	answer := func(name string) func(r chatReq) string {
		var k atomic.Int32
		return func(r chatReq) string {
			cur := r.last()
			if strings.Contains(cur, "You have joined") || strings.Contains(cur, "New on your branch") {
				return fmt.Sprintf("→ add \"%s %d\"", name, k.Add(1))
			}
			return "Over to you."
		}
	}
	annChat, benChat := newChat(t, answer("ann")), newChat(t, answer("ben"))
	// ModelTurns above the budget: this test is about turns, not the
	// guard against two models answering each other (TestAttackCollaboratorsDoNotPingPong).
	a := e.start(collab.Config{Agent: "ann", ChatURL: annChat.srv.URL, MaxCalls: 8, ModelTurns: 20})
	b := e.start(collab.Config{Agent: "ben", ChatURL: benChat.srv.URL, MaxCalls: 8, ModelTurns: 20})
	ra, rb := a.wait(t), b.wait(t)
	if !strings.Contains(ra.Reason, "budget spent: 8 of 8 calls") || !strings.Contains(rb.Reason, "8 of 8 calls") {
		t.Fatalf("reasons %q %q", ra.Reason, rb.Reason)
	}
	res := e.run(e.admin, "→ view branch:1 as:nodes full")
	var by []string
	for _, l := range strings.Split(res.Text, "\n") {
		if strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "#1 ") {
			by = append(by, strings.Fields(l)[4])
		}
	}
	if len(by) < 4 {
		t.Fatalf("only %d nodes on the branch: %v\n%s", len(by), by, res.Text)
	}
	for i := 1; i < len(by); i++ {
		if by[i] == by[i-1] {
			t.Fatalf("%s wrote twice in a row: %v", by[i], by)
		}
	}
	// Every node is on branch 1: nobody was pushed onto a branch of its
	// own by a write while the other held the turn.
	if strings.Contains(res.Text, "branch 1.") || strings.Contains(res.Text, "branch 2.") {
		t.Fatalf("a write left the branch:\n%s", res.Text)
	}
}

// A model that always answers a command is stopped by each budget, which
// says so in the room.
func TestCollaboratorBudgetsStopRunaway(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  collab.Config
		want string
	}{
		{"calls", collab.Config{MaxCalls: 5}, "stopped: budget spent: 5 of 5 calls"},
		{"tokens", collab.Config{MaxTokens: 6000}, "tokens"},
		{"time", collab.Config{MaxTime: 1500 * time.Millisecond, MaxCalls: 1 << 20, MaxTokens: 1 << 40}, "stopped: budget spent: 1.5s of wall time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, loom.Options{}, "claude")
			e.run(e.admin, `→ new tree "t" "`+root+`"
→ permit claude loom_write`)
			chat := newChat(t, func(r chatReq) string { return "→ view 1\n→ add \"again\"" })
			cfg := tc.cfg
			cfg.Agent, cfg.ChatURL, cfg.TurnCalls = "claude", chat.srv.URL, 1000
			start := time.Now()
			rec := e.start(cfg).wait(t)
			if !strings.Contains(rec.Reason, tc.want) || rec.State != "stopped" {
				t.Fatalf("reason %q, want %q", rec.Reason, tc.want)
			}
			if tc.name == "tokens" {
				if rec.Tokens() > 6000 {
					t.Fatalf("spent %d tokens over a budget of 6000", rec.Tokens())
				}
				// The last call's answer was given only what the budget
				// had left.
				reqs := chat.requests()
				if last := reqs[len(reqs)-1]; last.MaxTokens >= 1024 || last.MaxTokens < 16 {
					t.Fatalf("the last call asked max_tokens %d", last.MaxTokens)
				}
			}
			if time.Since(start) > 20*time.Second {
				t.Fatal("took too long")
			}
			tr := e.trace("claude")
			if !strings.Contains(tr[len(tr)-1], tc.want) {
				t.Fatalf("the trace's last line %q", tr[len(tr)-1])
			}
			usage, _ := loom.Of(e.svc).CollaboratorUsage(context.Background(), e.admin, e.room)
			if len(usage) != 1 || usage[0].State != "stopped" || !strings.Contains(usage[0].Reason, tc.want) {
				t.Fatalf("usage %+v", usage)
			}
		})
	}
}

// → stop (room authority, a person with loom_write, or the model itself)
// and cancelling the context stop a collaborator, which says who did.
func TestCollaboratorStopsWhenTold(t *testing.T) {
	e := newEnv(t, loom.Options{}, "alice", "bob", "claude")
	e.run(e.admin, `→ new tree "t" "`+root+`"
→ permit claude loom_write
→ permit alice human loom_write`)
	chat := newChat(t, func(r chatReq) string { return "Waiting for you." })
	r := e.start(collab.Config{Agent: "claude", ChatURL: chat.srv.URL})
	r.waiting(t)
	// Bob, a model without loom_write, may not stop it.
	if _, err := loom.Of(e.svc).Run(context.Background(), e.ag["bob"], e.room, "→ stop claude"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("bob stopped claude: %v", err)
	}
	e.run(e.ag["alice"], "→ stop claude")
	rec := r.wait(t)
	if rec.Reason != "stopped: asked by alice" {
		t.Fatalf("reason %q", rec.Reason)
	}
	// A new run starts afresh; the model may stop itself.
	chat2 := newChat(t, func(r chatReq) string { return "I am done here.\n→ stop" })
	rec = e.start(collab.Config{Agent: "claude", ChatURL: chat2.srv.URL}).wait(t)
	if rec.Reason != "stopped: asked by claude" || rec.Calls != 1 {
		t.Fatalf("%+v", rec)
	}
	// Cancelled (SIGINT/SIGTERM in syncd collaborate).
	r = e.start(collab.Config{Agent: "claude", ChatURL: chat.srv.URL})
	r.waiting(t)
	r.stop()
	if rec = r.wait(t); rec.Reason != "stopped: interrupted (signal or shutdown)" {
		t.Fatalf("reason %q", rec.Reason)
	}
	if _, err := loom.Of(e.svc).Run(context.Background(), e.admin, e.room, "→ stop claude"); err == nil || !strings.Contains(err.Error(), "not a running collaborator") {
		t.Fatalf("stopping a stopped collaborator: %v", err)
	}
}

// Many collaborators in one room, each on its own branch, with a person
// writing on every branch meanwhile, on the test pool of two connections:
// nobody holds a connection while waiting or calling its model, so all
// of them finish their budgets.
func TestCollaboratorsManyOnTinyPool(t *testing.T) {
	const n = 6
	var agents []string
	for i := 1; i <= n; i++ {
		agents = append(agents, fmt.Sprintf("c%d", i))
	}
	e := newEnv(t, loom.Options{}, append(agents, "alice")...)
	var b strings.Builder
	b.WriteString(`→ new tree "many" "` + root + `"` + "\n→ permit alice human loom_write\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "→ add from:1 \"start %d\"\n→ permit c%d loom_write\n", i, i)
	}
	b.WriteString("→ yield")
	e.run(e.admin, b.String())
	chat := newChat(t, func(r chatReq) string {
		if cur := r.last(); strings.Contains(cur, "You have joined") || strings.Contains(cur, "New on your branch") {
			return "→ add \"more\""
		}
		return "Over to you."
	})
	var rs []*running
	for i := 1; i <= n; i++ {
		branch := "1"
		if i > 1 {
			branch = fmt.Sprintf("1.%d", i)
		}
		rs = append(rs, e.start(collab.Config{Agent: agents[i-1], ChatURL: chat.srv.URL, Branch: branch, MaxCalls: 4}))
	}
	// alice writes on every branch, round after round, until all are
	// done (a write refused because a collaborator holds the branch is
	// tried again next round).
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			for i := 1; i <= n; i++ {
				select {
				case <-quit:
					return
				default:
				}
				branch := "1"
				if i > 1 {
					branch = fmt.Sprintf("1.%d", i)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, _ = loom.Of(e.svc).Run(ctx, e.ag["alice"], e.room, "→ switch to branch "+branch+"\n→ add \"alice was here\"\n→ yield")
				cancel()
			}
			time.Sleep(50 * time.Millisecond) // pacing: alice writes a round every 50 ms, not a wait
		}
	}()
	defer func() { close(quit); <-done }()
	for _, r := range rs {
		rec := r.wait(t)
		if rec.Calls != 4 || !strings.Contains(rec.Reason, "4 of 4 calls") {
			t.Fatalf("%+v", rec)
		}
	}
}
