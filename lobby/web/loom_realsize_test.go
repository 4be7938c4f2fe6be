package web_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/lobby/web"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/loom"
	"github.com/syncsubstrate/sync/substrate/loom/loomtest"
)

// loomSite is a site whose room "lab" holds the real-size loom, written by
// alice (its owner) and bob (a participant) from the loom page's command
// box, and by the model claude through loom.Run.
func loomSite(t *testing.T) (*site, *loomtest.Fixture) {
	t.Helper()
	s := newSite(t, web.Options{}, "alice", "bob")
	s.share("bob", "participant")
	ctx := context.Background()
	claude, err := s.svc.Join(ctx, s.admin, "lab", substrate.JoinRequest{ID: "claude", Name: "Claude"})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := s.svc.Authenticate(ctx, claude.Token)
	if err != nil {
		t.Fatal(err)
	}
	page := func(person string) loomtest.Runner {
		return func(cmds string) (string, error) {
			code, body := s.post(person, "/web/rooms/lab/loom", url.Values{"commands": {cmds}})
			if code != 200 || strings.Contains(body, `class="step failed"`) {
				return "", fmt.Errorf("%s's command box: %d %s", person, code, clipBody(body))
			}
			return body, nil
		}
	}
	direct := func(p *substrate.Principal) loomtest.Runner {
		return func(cmds string) (string, error) {
			res, err := loom.Of(s.svc).Run(ctx, p, "lab", cmds)
			if err != nil {
				return "", err
			}
			return res.Text, nil
		}
	}
	// Each person's agent is made by their first command.
	for _, who := range []string{"alice", "bob"} {
		if _, err := page(who)("→ help"); err != nil {
			t.Fatal(err)
		}
	}
	f, err := loomtest.Build(loomtest.Who{Admin: direct(s.admin), Alice: page("alice"), Bob: page("bob"), Model: direct(cp),
		AliceID: "alice:web", BobID: "bob:web", ModelID: "claude"})
	if err != nil {
		t.Fatal(err)
	}
	return s, f
}

func clipBody(body string) string {
	if i := strings.Index(body, `id="ran"`); i >= 0 {
		body = body[i:]
	}
	return body[:min(len(body), 2000)]
}

// loomText runs commands with the room token, for the test to check the
// loom.
func (s *site) loomText(cmds string) string {
	s.t.Helper()
	res, err := loom.Of(s.svc).Run(context.Background(), s.admin, "lab", cmds)
	if err != nil {
		s.t.Fatal(err)
	}
	return res.Text
}

// A fulfil from the loom page, in a tree other than the one the person's
// agent stands in, and the tree grows on: the next node from the page
// and over the loom's commands is a new node, never the storage's
// "_loom.1/n:23 already exists".
func TestLoomPageFulfilThenTheTreeGrows(t *testing.T) {
	s, f := loomSite(t)
	one := f.Trees[0]
	at := fmt.Sprintf("/web/rooms/lab/loom?tree=1&node=%d", one.ModelLeaf)
	if _, _, page := s.get("alice", at); !strings.Contains(page, "Fulfil "+one.Request) {
		t.Fatalf("the page offers no fulfil of %s", one.Request)
	}
	code, body := s.post("alice", "/web/rooms/lab/loom", url.Values{"tree": {"1"}, "node": {fmt.Sprint(one.ModelLeaf)}, "op": {"fulfil"},
		"req": {one.Request}, "text": {"ALICE FULFILS"}})
	if code != 200 || !strings.Contains(body, fmt.Sprintf("✓ node %d fulfils %s", one.Nodes+1, one.Request)) {
		t.Fatalf("fulfilling from the page: %d %s", code, clipBody(body))
	}
	code, body = s.post("alice", "/web/rooms/lab/loom", url.Values{"tree": {"1"}, "node": {fmt.Sprint(one.AliceLeaf)}, "op": {"branch"}, "text": {"ALICE GOES ON"}})
	if code != 200 || !strings.Contains(body, fmt.Sprintf("✓ node %d", one.Nodes+2)) || strings.Contains(body, "already exists") {
		t.Fatalf("the next node from the page: %d %s", code, clipBody(body))
	}
	code, body = s.post("bob", "/web/rooms/lab/loom", url.Values{"tree": {"1"}, "node": {fmt.Sprint(one.BobLeaf)}, "commands": {`→ add "BOB GOES ON"`}})
	if code != 200 || !strings.Contains(body, fmt.Sprintf("✓ node %d (child of %d", one.Nodes+3, one.BobLeaf)) {
		t.Fatalf("bob's next node from the command box: %d %s", code, clipBody(body))
	}
	if text := s.loomText("→ tree summary tree:1"); !strings.Contains(text, fmt.Sprintf("%d nodes", one.Nodes+3)) {
		t.Fatalf("tree 1: %s", text)
	}
}

// The command box acts on the tree on screen: alice's agent stands in
// tree 3 (where she last wrote), she reads node 9 of tree 1 and types a
// plain → add, which lands under node 9 of tree 1, and the page opens the
// new node there.
func TestLoomPageCommandBoxActsOnTheTreeOnScreen(t *testing.T) {
	s, f := loomSite(t)
	one, three := f.Trees[0], f.Trees[2]
	code, body := s.post("alice", "/web/rooms/lab/loom", url.Values{"tree": {"1"}, "node": {fmt.Sprint(one.AliceLeaf)}, "commands": {`→ add "TYPED IN TREE ONE"`}})
	if code != 200 || !strings.Contains(body, fmt.Sprintf("✓ node %d (child of %d", one.Nodes+1, one.AliceLeaf)) {
		t.Fatalf("the command box: %d %s", code, clipBody(body))
	}
	if !strings.Contains(body, fmt.Sprintf(`data-url="/web/rooms/lab/loom?tree=1&amp;node=%d"`, one.Nodes+1)) {
		t.Errorf("the page does not open the new node in tree 1: %s", clipBody(body))
	}
	if text := s.loomText(fmt.Sprintf("→ list %d tree:1", one.AliceLeaf)); !strings.Contains(text, "TYPED IN TREE ONE") {
		t.Fatalf("not under node %d of tree 1: %s", one.AliceLeaf, text)
	}
	if text := s.loomText("→ tree summary tree:3"); !strings.Contains(text, fmt.Sprintf("%d nodes", three.Nodes)) {
		t.Fatalf("tree 3 grew: %s", text)
	}
	// A command that does not move keeps the page on the node on screen.
	code, body = s.post("alice", "/web/rooms/lab/loom", url.Values{"tree": {"1"}, "node": {"4"}, "commands": {"→ list annotations"}})
	if code != 200 || !strings.Contains(body, "this is where the tone shifts") || !strings.Contains(body, `data-url="/web/rooms/lab/loom?tree=1&amp;node=4"`) {
		t.Fatalf("a read from the command box: %d %s", code, clipBody(body))
	}
}
