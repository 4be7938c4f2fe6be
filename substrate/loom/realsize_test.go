package loom_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/loom"
	"github.com/syncsubstrate/sync/substrate/loom/loomtest"
)

// runner is loomtest's Runner for p.
func (e *loomEnv) runner(p *substrate.Principal) loomtest.Runner {
	return func(cmds string) (string, error) {
		res, err := loom.Of(e.svc).Run(context.Background(), p, e.room, cmds)
		if err != nil {
			return "", err
		}
		return res.Text, nil
	}
}

// realSize is a loom env with the real-size fixture built in it: alice
// and bob people, claude a model.
func realSize(t *testing.T, opt substrate.Options) (*loomEnv, *loomtest.Fixture) {
	t.Helper()
	return realSizeOn(t, newLoom(t, opt, "alice", "bob", "claude"))
}

// realSizeOn builds the fixture in e, which has agents alice, bob and
// claude.
func realSizeOn(t *testing.T, e *loomEnv) (*loomEnv, *loomtest.Fixture) {
	t.Helper()
	f, err := loomtest.Build(loomtest.Who{Admin: e.runner(e.admin), Alice: e.runner(e.ag["alice"]), Bob: e.runner(e.ag["bob"]),
		Model: e.runner(e.ag["claude"]), AliceID: "alice", BobID: "bob", ModelID: "claude"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range f.Trees {
		has(t, e.run(e.admin, fmt.Sprintf("→ tree summary tree:%d", tr.ID)).Text, fmt.Sprintf("%d nodes", tr.Nodes))
	}
	return e, f
}

// A fulfil of a request in another tree than the one the person stands
// in (the page's fulfil names only the request) grows that tree, and the
// tree goes on growing: its node counter is saved with the node, so the
// next node in it is a new one, never "n:23 already exists".
func TestLoomFulfilInAnotherTreeThenGrow(t *testing.T) {
	e, f := realSize(t, substrate.Options{})
	one := f.Trees[0]
	// alice stands in tree 3 (the fixture's last); g1 is tree 1's.
	res := e.run(e.ag["alice"], fmt.Sprintf(`→ fulfil %s "A continuation alice wrote for the model."`, one.Request))
	has(t, res.Text, fmt.Sprintf("✓ node %d fulfils %s", one.Nodes+1, one.Request))
	for i, step := range []struct {
		who  string
		cmds string
		want string
	}{
		{"alice", fmt.Sprintf(`→ add from:%d tree:1 "alice after the fulfil"`, one.AliceLeaf), fmt.Sprintf("✓ node %d (child of %d", one.Nodes+2, one.AliceLeaf)},
		{"bob", fmt.Sprintf(`→ add from:%d tree:1 "bob after the fulfil"`, one.BobLeaf), fmt.Sprintf("✓ node %d (child of %d", one.Nodes+3, one.BobLeaf)},
		{"alice", fmt.Sprintf(`→ add from:%d tree:1 "and again"`, one.Nodes+2), fmt.Sprintf("✓ node %d (child of %d", one.Nodes+4, one.Nodes+2)},
	} {
		res, err := loom.Of(e.svc).Run(context.Background(), e.ag[step.who], e.room, step.cmds)
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, step.who, err)
		}
		has(t, res.Text, step.want)
	}
	has(t, e.run(e.admin, "→ tree summary tree:1").Text, fmt.Sprintf("%d nodes", one.Nodes+4))
	// The other trees are untouched.
	has(t, e.run(e.admin, "→ tree summary tree:3").Text, fmt.Sprintf("%d nodes", f.Trees[2].Nodes))
	// A fulfil that names a tree other than its request's is refused.
	e.fail(e.ag["bob"], fmt.Sprintf(`→ fulfil %s tree:3 "wrong tree"`, f.Trees[1].Request), "invalid_field", "g2 continues node 22 of tree 2")
}

// A tree whose counter fell behind its nodes (as the fulfil above left
// one before it saved its tree) is caught up by its next write: the new
// node takes the first free number instead of every write colliding.
func TestLoomTreeCounterBehindIsCaughtUp(t *testing.T) {
	e, f := realSize(t, substrate.Options{})
	ctx := context.Background()
	if _, err := e.svc.MutateRoom(ctx, e.admin, e.room, func(tx *substrate.RoomTx) error {
		raw, ok, err := tx.Get("_loom", "tree:1")
		if err != nil || !ok {
			return fmt.Errorf("tree:1: %v %v", ok, err)
		}
		var rec map[string]any
		if err := json.Unmarshal(raw, &rec); err != nil {
			return err
		}
		rec["next"] = f.Trees[0].Nodes - 2 // two nodes behind
		raw, _ = json.Marshal(rec)
		if _, err := tx.Apply([]substrate.Op{{Scope: "_loom", Key: "tree:1", Value: raw}}, "test"); err != nil {
			return err
		}
		tx.Audit(map[string]any{"kind": "test", "command": "damage tree 1"})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	res := e.run(e.ag["alice"], fmt.Sprintf(`→ add from:%d tree:1 "after the damage"`, f.Trees[0].AliceLeaf))
	has(t, res.Text, fmt.Sprintf("✓ node %d (child of %d", f.Trees[0].Nodes+1, f.Trees[0].AliceLeaf))
	has(t, e.run(e.ag["bob"], fmt.Sprintf(`→ add from:%d tree:1 "and on"`, f.Trees[0].BobLeaf)).Text, fmt.Sprintf("✓ node %d", f.Trees[0].Nodes+2))
}

// One agent's calls sent at once, each "→ jump N" then "→ add": every
// node lands under the node its own call jumped to, on a two-connection
// pool, round after round. Each call carries its position from its jump
// to its add; before, each command re-read the agent's stored position,
// which the other calls moved in between.
func TestLoomOneAgentsParallelCallsLandWhereMeant(t *testing.T) {
	e, f := realSizeOn(t, newLoomOn(t, pgtest.NewPool(t, 2), substrate.Options{}, "alice", "bob", "claude"))
	one := f.Trees[0]
	targets := []int64{2, one.AliceLeaf, 10, one.ModelLeaf}
	ctx := context.Background()
	const rounds = 5
	for round := range rounds {
		var wg sync.WaitGroup
		start := make(chan struct{})
		errc := make(chan error, len(targets))
		for i, target := range targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				text := fmt.Sprintf("round %d, call %d, under %d", round, i, target)
				res, err := loom.Of(e.svc).Run(ctx, e.ag["claude"], e.room, fmt.Sprintf("→ jump tree:1 node:%d\n→ add %q", target, text))
				if err != nil {
					errc <- err
					return
				}
				if len(res.Steps) != 2 || len(res.Steps[1].Nodes) != 1 || res.Steps[1].Nodes[0].Parent != target {
					errc <- fmt.Errorf("round %d: %q landed elsewhere: %s", round, text, res.Text)
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Error(err)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	// What the results said is what the tree holds.
	has(t, e.run(e.admin, "→ tree summary tree:1").Text, fmt.Sprintf("%d nodes", one.Nodes+rounds*len(targets)))
	for _, target := range targets {
		text := e.run(e.admin, fmt.Sprintf("→ list %d tree:1", target)).Text
		for round := range rounds {
			has(t, text, fmt.Sprintf("round %d, call", round))
			if n := strings.Count(text, fmt.Sprintf("under %d", target)); n != rounds {
				t.Fatalf("%d of %d nodes under %d:\n%s", n, rounds, target, text)
			}
		}
	}
}

// The loom for models (issue 43): viewing never moves the caller, a link
// to a document or node that does not exist and a bare "branch from" are
// refused and change nothing, on the real-size loom.
func TestLoomViewsDoNotMoveAndBadReferencesAreRefused(t *testing.T) {
	e, f := realSize(t, substrate.Options{})
	one := f.Trees[0]
	m := e.ag["claude"]
	e.run(m, "→ switch to 5 tree:1")
	for _, look := range []string{"→ view 2", "→ view 2 full with-annotations with-links", "→ view branch:3.2 as:prose", "→ view branch:1 as:nodes", "→ show me node 7"} {
		res := e.run(m, look)
		if res.Position == nil || res.Position.Tree != 1 || res.Position.Node != 5 {
			t.Fatalf("%s moved the caller: %+v", look, res.Position)
		}
	}
	res := e.run(m, `→ add "after looking around"`)
	if len(res.Steps[0].Nodes) != 1 || res.Steps[0].Nodes[0].Parent != 5 {
		t.Fatalf("the add after the views: %s", res.Text)
	}
	e.fail(m, `→ link 7 tree:1 to doc:"charcter notes"`, errs.NotFound, `doc "charcter notes" does not exist`)
	e.fail(m, "→ link 7 tree:1 to 999", errs.NotFound, "node 999 does not exist")
	e.fail(m, "→ branch from", errs.InvalidField, "branch from needs a node")
	e.fail(m, `→ branch from "text"`, errs.InvalidField, "branch from needs a node")
	e.fail(m, "→ continue from", errs.InvalidField, "continue from needs a node")
	has(t, e.run(m, `→ link 7 tree:1 to doc:"character notes"`).Text, `✓ linked 7 to doc:"character notes"`)
	has(t, e.run(e.admin, "→ tree summary tree:1").Text, fmt.Sprintf("%d nodes", one.Nodes+1), "3 links")
}
