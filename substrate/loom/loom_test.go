package loom_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/loom"
	"github.com/syncsubstrate/sync/substrate/trajectory"
)

type loomEnv struct {
	t     *testing.T
	svc   *substrate.Service
	room  string
	admin *substrate.Principal
	view  *substrate.Principal
	ag    map[string]*substrate.Principal
}

func newLoom(t testing.TB, opt substrate.Options, agents ...string) *loomEnv {
	return newLoomOn(t, pgtest.New(t), opt, agents...)
}

// newLoomOn is newLoom on db (a tiny pool, for concurrency tests).
func newLoomOn(t testing.TB, db *store.DB, opt substrate.Options, agents ...string) *loomEnv {
	if opt.Features == nil {
		opt.Features = testFeatures
	}
	svc := substrate.New(db, opt)
	t.Cleanup(svc.Close)
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "loom"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	view, _ := svc.Authenticate(ctx, room.ViewToken)
	e := &loomEnv{svc: svc, room: "loom", admin: admin, view: view, ag: map[string]*substrate.Principal{}}
	if tt, ok := t.(*testing.T); ok {
		e.t = tt
	}
	for _, a := range agents {
		j, err := svc.Join(ctx, admin, "loom", substrate.JoinRequest{ID: a, Name: a})
		if err != nil {
			t.Fatal(err)
		}
		e.ag[a], _ = svc.Authenticate(ctx, j.Token)
	}
	return e
}

// run runs commands and fails the test on an error.
func (e *loomEnv) run(p *substrate.Principal, cmds string) *loom.Result {
	e.t.Helper()
	res, err := loom.Of(e.svc).Run(context.Background(), p, e.room, cmds)
	if err != nil {
		e.t.Fatalf("%s: %v", cmds, err)
	}
	return res
}

// fail runs commands that must fail with code.
func (e *loomEnv) fail(p *substrate.Principal, cmds string, code errs.Code, msg string) {
	e.t.Helper()
	_, err := loom.Of(e.svc).Run(context.Background(), p, e.room, cmds)
	if !errs.Is(err, code) || !strings.Contains(err.Error(), msg) {
		e.t.Fatalf("%s: got %v, want %s %q", cmds, err, code, msg)
	}
}

func has(t *testing.T, text string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Fatalf("missing %q in:\n%s", w, text)
		}
	}
}

func TestLoomSession(t *testing.T) {
	e := newLoom(t, substrate.Options{}, "alice", "bob")
	e.run(e.admin, `→ new tree "project-alpha" "The house stood empty at the end of the lane."
→ permit alice human loom_write loom_generate doc_write
→ permit bob loom_write`)
	a := e.ag["alice"]
	res := e.run(a, `→ switch to 1
→ add "She hadn't visited since her mother's death,"
→ annotate 2 "key turning point"
→ link 2 to 1 note:"echo"
→ view 2 with-annotations with-links`)
	has(t, res.Text, "You are now operating in a loom-aware context", "Your permissions: loom_aware, loom_write, loom_generate, doc_read, doc_write",
		"⟨node:2 depth:1 siblings:1 annotations:1 links:1⟩", `alice: "key turning point"`, `→ 1 note:"echo"`)
	if res.Errors != 0 || res.Position.Node != 2 {
		t.Fatalf("%+v", res)
	}
	// Onboarding only the first time.
	if r := e.run(a, "→ view 1"); strings.Contains(r.Text, "loom-aware context") {
		t.Fatal("onboarding repeated")
	}
	// Edits make new nodes; the original stays.
	res = e.run(a, `→ edit 2 "She had not been back since the funeral,"`)
	has(t, res.Text, "node 3 edited from 2 (branch 1.2)")
	res = e.run(a, "→ show me node 2")
	has(t, res.Text, "She hadn't visited", "⟨node:3 depth:1 siblings:2") // viewing does not move
	// Errors: readable, in the trace.
	_, err := loom.Of(e.svc).Run(context.Background(), a, "loom", "→ view 999")
	if !errs.Is(err, errs.NotFound) || !strings.Contains(err.Error(), "✗ node 999 does not exist") {
		t.Fatal(err)
	}
	res = e.run(a, "→ memory errors")
	has(t, res.Text, "view 999", "✗ node 999 does not exist")
	// Cross-tree hint.
	e.run(e.admin, `→ new tree "notes" "n1"`)
	e.run(e.admin, "→ jump tree:2 node:1\n→ add \"x\"\n→ add \"x\"\n→ add \"x\"")
	_, err = loom.Of(e.svc).Run(context.Background(), a, "loom", "→ switch to 4")
	if err == nil || !strings.Contains(err.Error(), "✗ node 4 is in a different tree. use: → jump tree:2 node:4") {
		t.Fatal(err)
	}
	res = e.run(a, "→ jump tree:2 node:4")
	has(t, res.Text, "at node 4 of tree 2")
	// Buffer mode: prose with boundary markers, nodes with metadata.
	e.run(a, "→ jump tree:1 node:2\n→ yield")
	e.run(e.admin, `→ continue from 2`) // queued: no generator
	res = e.run(e.ag["bob"], `→ fulfil g1 " and the windows seemed to watch her approach."`)
	has(t, res.Text, "node 4 fulfils g1")
	res = e.run(a, "→ view branch:4 as:prose")
	has(t, res.Text, "The house stood empty at the end of the lane. ︱ She hadn't visited since her mother's death, ︱› and the windows")
	res = e.run(a, "→ view branch:4 as:nodes")
	has(t, res.Text, "#4 ← 2 · bob› · branch 1", "#2 ← 1 · alice · branch 1")
	// Documents.
	res = e.run(a, `→ write doc:"notes" append "new insight about theme"
→ write doc:"notes" at:end "conclusion paragraph"
→ read doc:"notes" lines:2-2`)
	has(t, res.Text, "2  conclusion paragraph")
	// Tree overview and summary.
	res = e.run(a, "→ tree\n→ tree summary\n→ list 1 continuations\n→ preview 1 depth:3")
	has(t, res.Text, "2 continuations of 1", "4 nodes, 2 branches")
}

// Memory round trips: pin, stash, recall, drop, trace, thoughts.
func TestLoomMemory(t *testing.T) {
	e := newLoom(t, substrate.Options{}, "alice", "bob")
	e.run(e.admin, `→ new tree "t" "root words"
→ add "second"`)
	a := e.ag["alice"]
	res := e.run(a, `→ pin 2
→ stash "character arc insight" "Marie's reluctance stems from..."
→ stash "key reference" content-of:1
→ think
private musing about the scene
←
→ memory`)
	has(t, res.Text, "pinned:", "2 (tree 1): second", `stashed: "character arc insight", "key reference"`, "think (30 characters)")
	res = e.run(a, `→ recall "key reference"`)
	has(t, res.Text, "root words")
	res = e.run(a, `→ drop stash:"key reference"
→ drop 2
→ memory stashed`)
	has(t, res.Text, `"character arc insight"`)
	if strings.Contains(res.Steps[2].Text, "key reference") {
		t.Fatal("dropped stash still listed")
	}
	res = e.run(a, "→ memory trace")
	has(t, res.Text, "pin 2", `recall "key reference"`)
	res = e.run(a, "→ drop lines:1-2\n→ memory trace")
	if strings.Contains(res.Steps[1].Text, "pin 2") || strings.Contains(res.Steps[1].Text, "character arc") {
		t.Fatalf("trace after drop:\n%s", res.Steps[1].Text)
	}
	// Another agent reads none of it; thoughts never reach shared state.
	ctx := context.Background()
	if _, err := e.svc.ReadState(ctx, e.ag["bob"], "loom", substrate.ReadQuery{Scope: "alice"}); !errs.Is(err, errs.ScopeDenied) {
		t.Fatalf("bob read alice's memory: %v", err)
	}
	all, err := e.svc.ReadState(ctx, e.ag["bob"], "loom", substrate.ReadQuery{})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(all)
	if strings.Contains(string(raw), "private musing") || strings.Contains(string(raw), "Marie") {
		t.Fatal("private memory in bob's read")
	}
	bob := e.run(e.ag["bob"], "→ memory\n→ view 2")
	if strings.Contains(bob.Text, "private musing") || strings.Contains(bob.Text, "Marie") {
		t.Fatal("alice's memory in bob's loom")
	}
}

// The audit records that an agent's loom memory changed, never what it
// holds: the core reserves the loom's memory keys (Feature.Memory), so
// the trajectory (a separate package) shows its size only.
func TestLoomMemoryStaysOutOfTheTrajectory(t *testing.T) {
	e := newLoom(t, substrate.Options{}, "alice")
	e.run(e.admin, `→ new tree "t" "root words"`)
	e.run(e.ag["alice"], `→ stash "plan" "STASHED-SECRET words"
→ think
THOUGHT-SECRET musing
←`)
	var steps []string
	redacted := 0
	err := trajectory.Stream(context.Background(), e.svc, e.admin, e.room, trajectory.Query{}, func(st *trajectory.Step) error {
		b, _ := json.Marshal(st)
		steps = append(steps, string(b))
		for _, d := range st.Delta {
			var m map[string]any
			if strings.HasPrefix(d.Key, "loom:") && json.Unmarshal(d.After, &m) == nil && m["_private"] == "loom memory" {
				redacted++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(steps, "\n")
	if strings.Contains(all, "STASHED-SECRET") || strings.Contains(all, "THOUGHT-SECRET") {
		t.Fatalf("HOLE: the trajectory holds an agent's loom memory:\n%s", all)
	}
	if redacted == 0 {
		t.Fatalf("no redacted loom memory in the trajectory:\n%s", all)
	}
}

func TestLoomPermissions(t *testing.T) {
	e := newLoom(t, substrate.Options{}, "alice", "helper")
	e.run(e.admin, `→ new tree "t" "root"`)
	h := e.ag["helper"]
	e.run(h, "→ view 1") // default: loom_aware, doc_read
	e.fail(h, `→ edit 1 "new content"`, errs.Forbidden, "✗ permission denied: loom_write not enabled")
	e.fail(h, `→ add "x"`, errs.Forbidden, "✗ permission denied: loom_write not enabled")
	e.fail(h, `→ continue from 1`, errs.Forbidden, "✗ permission denied: loom_generate not enabled")
	e.fail(h, `→ write doc:"notes" append "x"`, errs.Forbidden, "✗ permission denied: doc_write not enabled")
	e.fail(h, `→ permit helper loom_write`, errs.Forbidden, "only room authority")
	e.fail(e.view, `→ add "x"`, errs.ReadOnlyToken, "✗ permission denied: this credential is read-only")
	e.run(e.view, "→ view 1")
	e.run(e.admin, "→ deny helper loom_aware")
	e.fail(h, "→ view 1", errs.Forbidden, "✗ permission denied: loom_aware not enabled")
	// Nothing of the refused writes exists.
	res := e.run(e.admin, "→ tree summary")
	has(t, res.Text, "1 nodes")
	// Agents cannot write the loom's scopes directly.
	_, err := e.svc.WriteState(context.Background(), e.ag["alice"], "loom", []substrate.Write{{Scope: "_loom", Key: "perm:alice", Value: []byte(`{"perms":["loom_write"]}`)}}, false)
	if !errs.Is(err, errs.ScopeDenied) {
		t.Fatalf("direct write to _loom: %v", err)
	}
}

// The loom's scopes are its own (it registers them with the core): not
// even room authority writes them directly, and the mutable ones beyond
// _loom (leases, presence, documents) stay out of the room's snapshot,
// so contexts and CEL do not carry them.
func TestLoomScopesAreTheLooms(t *testing.T) {
	e := newLoom(t, substrate.Options{}, "alice")
	ctx := context.Background()
	e.run(e.admin, `→ new tree "t" "root"
→ write doc:"plan" append "a line"`)
	for _, scope := range []string{"_loom", "_loom.1", "_loom.doc", "_loom.live"} {
		_, err := e.svc.WriteState(ctx, e.admin, "loom", []substrate.Write{{Scope: scope, Key: "forged", Value: []byte(`1`)}}, false)
		if !errs.Is(err, errs.ScopeDenied) || !strings.Contains(err.Error(), "written only by the system") {
			t.Fatalf("room authority wrote %s directly: %v", scope, err)
		}
	}
	res, err := e.svc.Eval(ctx, e.admin, "loom", `["_loom" in state, "_loom.doc" in state]`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(res.Value); string(b) != `[true,false]` {
		t.Fatalf("the snapshot holds the loom's documents: _loom, _loom.doc in state = %s", b)
	}
}

// Two agents: different branches in parallel; one branch turn-based.
func TestLoomParallel(t *testing.T) {
	e := newLoom(t, substrate.Options{}, "alice", "bob")
	e.run(e.admin, `→ new tree "t" "root"
→ permit alice loom_write
→ permit bob loom_write
→ yield`)
	a, b := e.ag["alice"], e.ag["bob"]
	e.run(a, `→ branch from 1 "alice's line"`) // node 2, branch 1
	e.run(b, `→ branch from 1 "bob's line"`)   // node 3, branch 1.2
	var wg sync.WaitGroup
	errCh := make(chan error, 20)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, at := a, "2"
			if i%2 == 1 {
				p, at = b, "3"
			}
			_, err := loom.Of(e.svc).Run(context.Background(), p, "loom", `→ add "more" node:`+at)
			errCh <- err
		}()
	}
	wg.Wait()
	close(errCh)
	for err := range errCh {
		if err != nil {
			t.Fatalf("parallel branches: %v", err)
		}
	}
	// Presence: alice sees bob in his branch.
	res := e.run(a, "→ view 2")
	has(t, res.Text, "⟨model bob active in branch:")
	// Same branch: bob is refused while alice holds the turn.
	e.run(b, "→ switch to branch 1")
	e.fail(b, `→ add "intrusion"`, errs.BranchHeld, "branch 1 is alice's turn until")
	_, err := loom.Of(e.svc).Run(context.Background(), b, "loom", `→ add "intrusion"`)
	if d := errs.From(err).Details; d["holder"] != "alice" || d["until"] == nil {
		t.Fatalf("refusal details %v", d)
	}
	// bob's refusal is in his trace.
	has(t, e.run(b, "→ memory errors").Text, "branch 1 is alice's turn")
	e.run(a, "→ yield")
	res = e.run(b, `→ add "now mine"`)
	has(t, res.Text, "branch 1)")
}

// continue with a configured generator: a fake OpenAI-compatible server.
func TestLoomGenerator(t *testing.T) {
	var got map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewDecoder(r.Body).Decode(&got)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"text":" one"},{"text":" two"},{"text":" three"}]}`))
	}))
	defer srv.Close()
	e := newLoom(t, substrate.Options{}, "alice")
	loom.Attach(e.svc, loom.Options{GeneratorURL: srv.URL, GeneratorModel: "tiny", MaxN: 3})
	e.run(e.admin, `→ new tree "t" "Once"
→ branch from 1 as instruction "be terse"
→ add "upon a time" node:1
→ permit alice loom_generate
→ yield`)
	res := e.run(e.ag["alice"], "→ continue from 3 n:3 tokens:40")
	has(t, res.Text, "3 continuations of 3")
	if got["prompt"] != "Once\n\nupon a time" || got["model"] != "tiny" || got["max_tokens"] != float64(40) || got["n"] != float64(3) {
		t.Fatalf("generator request %v", got)
	}
	res = e.run(e.ag["alice"], "→ list 3 continuations")
	has(t, res.Text, "gen:tiny›", "one", "two", "three")
	e.fail(e.ag["alice"], `→ add "x"`, errs.Forbidden, "loom_write not enabled")
}

// With the loom's read rule registered, _shared registrants it sees alike
// (the same loom permissions) still share one registrar state
// (substrate.Reader.Key): ten agents' _shared actions in a room of gated
// entries do not evaluate the gates ten times more per read.
func TestLoomSharedRegistrantsShareOneState(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures, Limits: substrate.Limits{GateQuantum: -1, RoomCostPerSecond: -1}})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "sharers"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	var writes []substrate.Write
	for i := range 50 {
		writes = append(writes, substrate.Write{Scope: "_shared", Key: fmt.Sprintf("g%02d", i), Value: []byte(`1`),
			Enabled: `now > timestamp("2000-01-01T00:00:00Z")`})
	}
	if _, err := svc.WriteState(ctx, admin, "sharers", writes, true); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		ag, err := svc.Join(ctx, admin, "sharers", substrate.JoinRequest{ID: fmt.Sprintf("a%d", i), Name: "a"})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := svc.Authenticate(ctx, ag.Token)
		if _, err := svc.RegisterAction(ctx, p, "sharers", substrate.ActionDef{ID: fmt.Sprintf("act%d", i), Scope: "_shared",
			Enabled: `size(state._shared) > 0`, Writes: []substrate.WriteTemplate{{Scope: "_shared", Key: "k", Value: []byte(`1`)}}}); err != nil {
			t.Fatal(err)
		}
	}
	before := svc.Stats().CELEvaluations
	if _, err := svc.Context(ctx, admin, "sharers", substrate.ContextRequest{}); err != nil {
		t.Fatal(err)
	}
	if n := svc.Stats().CELEvaluations - before; n > 200 {
		t.Fatalf("one read evaluated %d expressions: each _shared registrant's state evaluated the 50 gates again", n)
	}
}
