package loom_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// Attacks on what the intermediary (loom.ForModel) keeps that must fail:
// a thought never leaves loom:think:… through the memory it writes
// (loom:shown, the faded line), even to an agent granted the thinker's
// scope; and one model's memory block never shows another's.
func TestAttackForModelKeepsThoughtsAndMemoryApart(t *testing.T) {
	e := newLoom(t, substrate.Options{}, "al")
	ctx := context.Background()
	b := e.joinGranted("bo", "al")
	e.run(e.admin, `→ new tree "t" "root words"`)
	a := e.ag["al"]
	e.model(a, "→ view 1\n→ think SECRET-THOUGHT about the scene ←\n→ pin 1\n→ stash \"s\" \"SECRET-STASH\"\n→ recall \"s\"")
	// An unclosed think block fails; its text must not reach the trace.
	if _, err := loom.Of(e.svc).ForModel(ctx, a, "loom", "→ think SECRET-THOUGHT unclosed\nmore"); err == nil {
		t.Fatal("an unclosed think block ran")
	}
	// Read as room authority, which reads traces: the unclosed block's
	// trace line must not carry its text (bo, below, could not see a
	// trace entry whatever it held).
	all, err := e.svc.ReadState(ctx, e.admin, "loom", substrate.ReadQuery{Scope: "al"})
	if err != nil {
		t.Fatal(err)
	}
	traced := 0
	for _, en := range all.Entries {
		if strings.HasPrefix(en.Key, "loom:t:") {
			traced++
			if strings.Contains(string(en.Value), "SECRET-THOUGHT") {
				t.Fatalf("HOLE: a trace line carries a thought: %s", en.Value)
			}
		}
	}
	if traced == 0 {
		t.Fatal("no trace lines read: the check above saw nothing")
	}
	out := e.model(a, "→ tree")
	if strings.Contains(out, "SECRET-THOUGHT") {
		t.Fatalf("HOLE: the thought is in the faded line or memory block:\n%s", out)
	}
	kvs, err := e.svc.ReadState(ctx, b, "loom", substrate.ReadQuery{Scope: "al"})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(kvs)
	if strings.Contains(string(raw), "SECRET-THOUGHT") {
		t.Fatalf("HOLE: bo, granted al's scope, reads al's thought through the intermediary's keys: %s", raw)
	}
	res, err := loom.Of(e.svc).ForModel(ctx, b, "loom", "→ view 1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.Text, "SECRET-STASH") || strings.Contains(res.Text, "pin 1") {
		t.Fatalf("HOLE: bo's memory block shows al's memory:\n%s", res.Text)
	}
}

// A command naming another room is refused, on every surface, before it
// runs: the loom's options are forgiving, and room:x was ignored, so a
// model that meant another room acted on this one (a node written here,
// a read answered from here, as if from there).
func TestAttackLoomCommandNamingAnotherRoomRefused(t *testing.T) {
	e := newLoom(t, substrate.Options{}, "al")
	e.run(e.admin, `→ new tree "t" "root words"
→ permit al loom_write`)
	for _, cmd := range []string{`→ add from:1 "x" room:secret`, "→ view 1 room:secret", `→ read doc:"plans" ROOM:secret`} {
		e.fail(e.ag["al"], cmd, "invalid_field", "commands act in the room they are sent to")
	}
	if res := e.run(e.admin, "→ tree summary"); !strings.Contains(res.Text, "1 nodes") {
		t.Fatalf("a refused command wrote: %s", res.Text)
	}
}

// Review (h7): an agent's operational memory (seed 002, "Memory Tools":
// its own working memory) is the agent's: its pins, stashes and recalled
// stashes were read by anyone granted its scope (a read of the scope, of
// one key, the context, CEL), though thoughts and traces were not. Every
// loom: key of an agent's scope is now read by the agent and room
// authority only (the package comment's "operational memory nobody else
// reads").
func TestAttackMemoryReadOnlyByItsAgent(t *testing.T) {
	e := newLoom(t, substrate.Options{}, "al")
	ctx := context.Background()
	b := e.joinGranted("bo", "al")
	e.run(e.admin, `→ new tree "t" "root words"`)
	a := e.ag["al"]
	e.model(a, "→ view 1\n→ pin 1\n→ stash \"s\" \"SECRET-STASH\"\n→ stash \"t\" \"OTHER-STASH\"\n→ recall \"t\"")
	mine, err := e.svc.ReadState(ctx, a, "loom", substrate.ReadQuery{Scope: "al"})
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := json.Marshal(mine); !strings.Contains(string(raw), "SECRET-STASH") || !strings.Contains(string(raw), "loom:pins") {
		t.Fatalf("al does not read its own memory: %s", raw)
	}
	kvs, err := e.svc.ReadState(ctx, b, "loom", substrate.ReadQuery{Scope: "al"})
	if err != nil {
		t.Fatal(err)
	}
	env, err := e.svc.Context(ctx, b, "loom", substrate.ContextRequest{Depth: "full", MessagesLimit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for what, v := range map[string]any{"the scope": kvs, "the context": env.State} {
		raw, _ := json.Marshal(v)
		if s := string(raw); strings.Contains(s, "STASH") || strings.Contains(s, "loom:pins") || strings.Contains(s, "loom:recalled") {
			t.Fatalf("HOLE: bo, granted al's scope, reads al's memory in %s: %s", what, s)
		}
	}
	if _, err := e.svc.ReadState(ctx, b, "loom", substrate.ReadQuery{Scope: "al", Key: "loom:stash:s"}); !errs.Is(err, errs.ScopeDenied) {
		t.Fatalf("HOLE: bo reads al's stash by key: %v", err)
	}
	if v, err := e.svc.Eval(ctx, b, "loom", `state.al`, nil); err == nil && strings.Contains(fmt.Sprint(v), "STASH") {
		t.Fatalf("HOLE: bo reads al's stash in CEL: %v", v)
	}
	// Nor through an entry gated on it (the gate computes with what bo
	// reads).
	if _, err := e.svc.WriteState(ctx, e.admin, "loom", []substrate.Write{{Scope: "_shared", Key: "probe", Value: json.RawMessage(`1`),
		Enabled: `"loom:pins" in state.al`}}, true); err != nil {
		t.Fatal(err)
	}
	if st, err := e.svc.ReadState(ctx, b, "loom", substrate.ReadQuery{Scope: "_shared"}); err != nil || len(st.Entries) != 0 {
		t.Fatalf("HOLE: a gate reading al's memory opened for bo: %+v %v", st, err)
	}
	if st, _ := e.svc.ReadState(ctx, a, "loom", substrate.ReadQuery{Scope: "_shared"}); st == nil || len(st.Entries) != 1 {
		t.Fatalf("the gate does not open for al, who reads its memory: %+v", st)
	}
}

// The generator's key goes to the configured URL only: a generator that
// redirects (to another port of the same host, where Go's client would
// forward Authorization) is not followed, and the other server never sees
// the key; the continuation fails as the generator's failure.
func TestAttackLoomGeneratorKeyNotForwardedOnRedirect(t *testing.T) {
	const key = "sk-GEN-REDIRECT-9"
	var got atomic.Value
	got.Store("")
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Authorization"))
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": []map[string]string{{"text": " elsewhere"}}})
	}))
	t.Cleanup(other.Close)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/v1/completions", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirect.Close)
	e := newLoom(t, substrate.Options{})
	loom.Attach(e.svc, loom.Options{GeneratorURL: redirect.URL + "/v1/completions", GeneratorKey: key})
	_, _ = loom.Of(e.svc).Run(context.Background(), e.admin, "loom", "→ new tree \"t\" \"root\"\n→ continue from 1")
	if a := got.Load().(string); strings.Contains(a, key) {
		t.Fatalf("HOLE: the generator's key reached the server redirected to: %q", a)
	}
	res, err := loom.Of(e.svc).Run(context.Background(), e.admin, "loom", "→ continue from 1")
	if err == nil || !strings.Contains(err.Error(), "307") {
		t.Fatalf("a redirected generator call: %v %+v", err, res)
	}
}

// joinGranted joins agent id with grants on the given scopes (an agent
// holding another's scope: where the attacks on its memory start).
func (e *loomEnv) joinGranted(id string, grants ...string) *substrate.Principal {
	e.t.Helper()
	ctx := context.Background()
	j, err := e.svc.Join(ctx, e.admin, e.room, substrate.JoinRequest{ID: id, Name: id})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.svc.UpdateAgent(ctx, e.admin, e.room, id, substrate.AgentUpdate{Grants: &grants}); err != nil {
		e.t.Fatal(err)
	}
	p, err := e.svc.Authenticate(ctx, j.Token)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// A node too long for the room's limits is refused in the loom's words:
// the core's storage key (_loom.1/n:2) never reaches the person, and
// nothing is written.
func TestAttackLoomStorageErrorNotShownVerbatim(t *testing.T) {
	e := newLoom(t, substrate.Options{Limits: substrate.Limits{MaxValueBytes: 2048}}, "alice")
	e.run(e.admin, `→ new tree "t" "root"`+"\n→ permit alice human all")
	_, err := loom.Of(e.svc).Run(context.Background(), e.ag["alice"], e.room, `→ add from:1 tree:1 "`+strings.Repeat("long words ", 300)+`"`)
	if !errs.Is(err, errs.ValueTooLarge) {
		t.Fatalf("a too long node: %v", err)
	}
	if msg := errs.From(err).Message + errs.From(err).Hint; strings.Contains(msg, "_loom") || strings.Contains(msg, "n:2") || !strings.Contains(msg, "too long") {
		t.Fatalf("the refusal is the storage's, not the loom's: %s", msg)
	}
	has(t, e.run(e.admin, "→ tree summary tree:1").Text, "1 nodes")
}
