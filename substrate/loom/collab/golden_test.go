package collab_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/syncsubstrate/sync/substrate/loom"
	"github.com/syncsubstrate/sync/substrate/loom/collab"
)

var update = flag.Bool("update", false, "rewrite the conversation goldens in testdata/")

// session is the ordered record of a three-party session.
type session struct {
	mu    sync.Mutex
	files []txtar.File
	n     map[string]int
}

func (s *session) add(name, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[string]int{}
	}
	s.n[name]++
	s.files = append(s.files, txtar.File{Name: fmt.Sprintf("%s %d", name, s.n[name]), Data: []byte(normalise(text) + "\n")})
}

var (
	clock    = regexp.MustCompile(`\b\d\d:\d\d:\d\dZ?\b`)
	leaseFor = regexp.MustCompile(`for (\d+m)?\d+s\b`)
	elapsed  = regexp.MustCompile(`· \d+(\.\d+)?(ms|s|m\d+s) of 30m0s⟩`)
)

func normalise(s string) string {
	s = clock.ReplaceAllString(s, "<time>")
	s = leaseFor.ReplaceAllString(s, "for <duration>")
	return elapsed.ReplaceAllString(s, "· <elapsed> of 30m0s⟩")
}

// A whole three-party session (seed 002): alice, a person, writes; claude,
// the instruct collaborator, runs itself against a chat endpoint; the
// base model writes what → continue asks of it. The golden shows every
// prompt each model received and every answer, in order:
//
//	go test ./substrate/loom/collab -run TestThreePartySession -update
func TestThreePartySession(t *testing.T) {
	const file = "testdata/three-party.txtar"
	s := &session{}
	replies := []string{
		"The sentence wants the house to answer her. Let the base model try.\n→ continue n:1",
		"#3 gives the windows a will; I will mark it for Alice.\n→ annotate 3 \"the house watches her: keep\"",
		"Alice, your turn: what did she carry?",
		"A key: the door will matter.\n→ think\nThe key implies a locked door; the base model could open it.\n←\n→ continue n:1",
		"The lock answering her is right. I will wait for Alice.",
	}
	// turn keeps a person's operation and its result together in the
	// golden: a model call that the operation's writes wake waits until
	// the result is recorded (the models' calls otherwise interleave with
	// it by timing alone). No operation here makes a model call itself.
	var turn sync.Mutex
	var chatMu sync.Mutex
	calls := 0
	chat := newChat(t, func(r chatReq) string {
		turn.Lock()
		defer turn.Unlock()
		chatMu.Lock()
		defer chatMu.Unlock()
		var b strings.Builder
		for i, m := range r.Messages {
			if i == 0 && calls > 0 {
				b.WriteString("[system] (as in prompt 1)\n")
				continue
			}
			b.WriteString("[" + m.Role + "]\n" + m.Content + "\n")
		}
		s.add("claude prompt", strings.TrimSpace(b.String()))
		reply := replies[min(calls, len(replies)-1)]
		calls++
		s.add("claude reply", reply)
		return reply
	})
	base := []string{" and the windows seemed to watch her approach.", " The lock turned as if it had been waiting for her."}
	gens := 0
	gen := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Prompt string `json:"prompt"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		turn.Lock()
		defer turn.Unlock()
		s.add("base model prompt", req.Prompt)
		a := base[min(gens, len(base)-1)]
		gens++
		s.add("base model reply", a)
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": []map[string]string{{"text": a}}})
	}))
	t.Cleanup(gen.Close)
	e := newEnv(t, loom.Options{GeneratorURL: gen.URL, GeneratorModel: "base"}, "alice", "claude")
	op := func(who, cmds string) {
		p := e.admin
		if who != "_room" {
			p = e.ag[who]
		}
		turn.Lock()
		defer turn.Unlock()
		s.add(who+" →", cmds)
		res, err := loom.Of(e.svc).Run(context.Background(), p, e.room, cmds)
		if err != nil {
			t.Fatalf("%s: %v", cmds, err)
		}
		s.add("result", res.Text)
	}
	op("_room", `→ new tree "lane" "The house stood empty at the end of the lane."
→ permit alice human loom_write loom_generate
→ permit claude loom_write loom_generate`)
	op("alice", `→ add from:1 "She hadn't visited since her mother's death,"
→ yield`)
	r := e.start(collab.Config{Agent: "claude", ChatURL: chat.srv.URL})
	r.calls(t, chat, 3)
	op("alice", `→ view branch:1 as:prose
→ list 3 annotations
→ add from:3 "She carried only the key."
→ yield`)
	r.calls(t, chat, 5)
	op("_room", "→ stop claude")
	rec := r.wait(t)
	op("alice", "→ view branch:1 as:prose")
	usage, err := loom.Of(e.svc).CollaboratorUsage(context.Background(), e.ag["alice"], e.room)
	if err != nil || len(usage) != 1 {
		t.Fatal(usage, err)
	}
	s.add("collaborator usage", fmt.Sprintf("%s (%s): %s, %d calls, %d prompt + %d completion tokens, base model %d calls %d continuations %d tokens; %s",
		usage[0].Agent, usage[0].Model, usage[0].State, usage[0].Calls, usage[0].PromptTokens, usage[0].CompletionTokens,
		usage[0].GenCalls, usage[0].Generations, usage[0].GenTokens, usage[0].Reason))
	s.add("claude's trace", strings.Join(e.trace("claude"), "\n"))
	if rec.Calls != 5 {
		t.Fatalf("%d calls", rec.Calls)
	}
	got := txtar.Format(&txtar.Archive{Comment: []byte(`A three-party session (seed 002). alice is a person; claude is the instruct
collaborator, run by substrate/loom/collab against a scripted chat
endpoint; "base" is the base model behind → continue, a scripted
completions endpoint. Every prompt each model received and every answer,
in order; clock times and durations normalised. Regenerate with
go test ./substrate/loom/collab -run TestThreePartySession -update
`), Files: s.files})
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("no golden (run with -update): %v", err)
	}
	if string(want) != string(got) {
		t.Fatalf("%s changed (review, then -update):\n%s", file, got)
	}
}
