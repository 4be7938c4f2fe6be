package collab_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/loom"
	"github.com/syncsubstrate/sync/substrate/loom/collab"
)

// chatStub is a scripted OpenAI-compatible chat endpoint: answer decides
// each reply from the request; every request is recorded.
type chatStub struct {
	srv    *httptest.Server
	mu     sync.Mutex
	reqs   []chatReq
	auth   []string
	answer func(r chatReq) string
	// raw, when set, writes the whole response itself.
	raw func(w http.ResponseWriter, r chatReq) bool
	got chan struct{}
}

type chatReq struct {
	Model     string            `json:"model"`
	Messages  []collab.Message  `json:"messages"`
	MaxTokens int               `json:"max_tokens"`
	Extra     map[string]string `json:"-"`
}

// last is the request's last message.
func (r chatReq) last() string { return r.Messages[len(r.Messages)-1].Content }

// all is every message's text, joined.
func (r chatReq) all() string {
	var b strings.Builder
	for _, m := range r.Messages {
		b.WriteString("[" + m.Role + "]\n" + m.Content + "\n")
	}
	return b.String()
}

// answers is a chat model that gives replies in order, one a call, and
// the last one to every call after them.
func answers(replies ...string) func(chatReq) string {
	var k atomic.Int32
	return func(chatReq) string {
		return replies[min(int(k.Add(1)), len(replies))-1]
	}
}

func newChat(t *testing.T, answer func(r chatReq) string) *chatStub {
	s := &chatStub{answer: answer, got: make(chan struct{}, 1000)}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req chatReq
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "bad request", 400)
			return
		}
		s.mu.Lock()
		s.reqs = append(s.reqs, req)
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		defer func() { s.got <- struct{}{} }()
		if s.raw != nil && s.raw(w, req) {
			return
		}
		text := s.answer(req)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"choices": []map[string]any{{"message": map[string]string{"role": "assistant", "content": text}}},
			"usage":   map[string]int{"prompt_tokens": loom.Tokens(req.all()), "completion_tokens": loom.Tokens(text)},
		})
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *chatStub) requests() []chatReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]chatReq(nil), s.reqs...)
}

type env struct {
	t     *testing.T
	svc   *substrate.Service
	room  string
	admin *substrate.Principal
	ag    map[string]*substrate.Principal
}

// newEnv is a room "loom" with agents, a loom with opt, and a tree
// planted by room authority.
func newEnv(t *testing.T, opt loom.Options, agents ...string) *env {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures})
	t.Cleanup(svc.Close)
	loom.Attach(svc, opt)
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "loom"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	e := &env{t: t, svc: svc, room: "loom", admin: admin, ag: map[string]*substrate.Principal{}}
	for _, a := range agents {
		j, err := svc.Join(ctx, admin, "loom", substrate.JoinRequest{ID: a, Name: a})
		if err != nil {
			t.Fatal(err)
		}
		e.ag[a], _ = svc.Authenticate(ctx, j.Token)
	}
	return e
}

func (e *env) run(p *substrate.Principal, cmds string) *loom.Result {
	e.t.Helper()
	res, err := loom.Of(e.svc).Run(context.Background(), p, e.room, cmds)
	if err != nil {
		e.t.Fatalf("%s: %v", cmds, err)
	}
	return res
}

// start runs a collaborator in the background; the returned func waits
// for its end (failing the test after 30 s).
type running struct {
	done chan struct{}
	rec  *loom.CollabRecord
	err  error
	// waits has a value each time the collaborator begins to wait: how
	// many calls the stub in chat had had by then (-1: none set).
	waits chan int
	chat  atomic.Pointer[chatStub]
	stop  context.CancelFunc
}

func (e *env) start(cfg collab.Config) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{done: make(chan struct{}), waits: make(chan int, 1000), stop: cancel}
	if cfg.Room == "" {
		cfg.Room = e.room
	}
	if cfg.ChatModel == "" {
		cfg.ChatModel = "instruct"
	}
	cfg.OnWait = func() {
		n := -1
		if c := r.chat.Load(); c != nil {
			n = len(c.requests())
		}
		r.waits <- n
	}
	go func() {
		defer close(r.done)
		r.rec, r.err = collab.Run(ctx, e.svc, cfg)
	}()
	e.t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

func (r *running) wait(t *testing.T) *loom.CollabRecord {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the collaborator did not stop")
	}
	if r.err != nil {
		t.Fatalf("collaborator: %v", r.err)
	}
	return r.rec
}

// waiting blocks until the collaborator waits for a change; it returns
// the stub's calls by then (-1 when calls has not named the stub).
func (r *running) waiting(t *testing.T) int {
	t.Helper()
	select {
	case n := <-r.waits:
		return n
	case <-r.done:
		t.Fatalf("the collaborator stopped: %v %+v", r.err, r.rec)
	case <-time.After(30 * time.Second):
		t.Fatal("the collaborator did not come to wait")
	}
	return 0
}

// calls blocks until the stub has had n calls and the collaborator waits
// again after them. A wait signalled before the n-th call was done is not
// enough (the signals queue): counted when the collaborator began to
// wait, the calls it had made by then must be n.
func (r *running) calls(t *testing.T, chat *chatStub, n int) {
	t.Helper()
	r.chat.Store(chat)
	for r.waiting(t) < n {
	}
}

// trace is the agent's trace lines (read with room authority), oldest
// first.
func (e *env) trace(agent string) []string {
	e.t.Helper()
	rd, err := e.svc.ReadState(context.Background(), e.admin, e.room, substrate.ReadQuery{Scope: agent, Limit: 500})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, en := range rd.Entries {
		if !strings.HasPrefix(en.Key, "loom:t:") {
			continue
		}
		var l struct{ Line, Error string }
		_ = json.Unmarshal(en.Value, &l)
		out = append(out, strings.TrimSpace(l.Line+" "+l.Error))
	}
	return out
}

func has(t *testing.T, text string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Fatalf("missing %q in:\n%s", w, text)
		}
	}
}

func inOrder(t *testing.T, text string, want ...string) {
	t.Helper()
	at := 0
	for _, w := range want {
		i := strings.Index(text[at:], w)
		if i < 0 {
			t.Fatalf("missing %q (in order) in:\n%s", w, text)
		}
		at += i + len(w)
	}
}
