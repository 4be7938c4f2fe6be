package loom

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// exec runs one command and returns its text.
func (r *loomRun) exec(c *Command, gen []string) (string, error) {
	switch c.Verb {
	case "help":
		return loomHelp(c), nil
	case "think":
		return r.think(c)
	case "memory", "pin", "stash", "recall", "drop":
		if err := r.agent(); err != nil {
			return "", err
		}
		if err := r.need(PermAware); err != nil {
			return "", err
		}
		return r.memoryOp(c)
	case "permit", "deny":
		return r.permit(c)
	case "new":
		return r.newTree(c)
	case "read", "write":
		return r.doc(c)
	case "requests":
		return r.requests()
	case "stop":
		return r.stop(c)
	case "fulfil":
		// A request names its tree: the fulfil writes there, whatever
		// tree the caller stands in, and saves that tree.
		if err := r.need(PermAware); err != nil {
			return "", err
		}
		if err := r.needWrite(PermWrite); err != nil {
			return "", err
		}
		return r.fulfil(c)
	}
	return r.execInTree(c, gen)
}

// execInTree runs a command on the tree the caller stands in (or the one
// the command names).
func (r *loomRun) execInTree(c *Command, gen []string) (string, error) {
	if err := r.need(PermAware); err != nil {
		return "", err
	}
	t, err := r.currentTree(c)
	if err != nil {
		return "", err
	}
	switch c.Verb {
	case "view":
		return r.view(c, t)
	case "list":
		return r.list(c, t)
	case "preview", "tree":
		return r.treeView(c, t)
	case "switch", "jump":
		return r.switchTo(c, t)
	case "bookmarks":
		return r.bookmarks(t)
	case "yield":
		return r.yield(t)
	}
	return r.execWrite(c, t, gen)
}

// execWrite runs a command that writes to tree t, then saves the tree.
func (r *loomRun) execWrite(c *Command, t *loomTree, gen []string) (string, error) {
	perm := PermWrite
	if c.Verb == "continue" {
		perm = PermGenerate
	}
	if err := r.needWrite(perm); err != nil {
		return "", err
	}
	var text string
	var err error
	switch c.Verb {
	case "add":
		text, err = r.add(c, t)
	case "branch":
		text, err = r.branch(c, t)
	case "edit":
		text, err = r.edit(c, t)
	case "annotate":
		text, err = r.annotate(c, t)
	case "link":
		text, err = r.link(c, t)
	case "bookmark":
		text, err = r.bookmark(c, t)
	case "continue":
		text, err = r.continueOp(c, t, gen)
	default:
		return "", loomErr(errs.InvalidField, "%s is not implemented", c.Verb)
	}
	if err != nil {
		return "", err
	}
	r.saveTree(t)
	return text, nil
}

// firstText is the command's first quoted text, or an error naming usage.
func firstText(c *Command, what string) (string, error) {
	if len(c.Texts) == 0 || strings.TrimSpace(c.Texts[0]) == "" {
		return "", loomErr(errs.InvalidField, "%s needs %s in quotes", c.Verb, what).WithHint("usage: → %s", loomUsage[c.Verb]).With("nearest", c.Verb)
	}
	return c.Texts[0], nil
}

func (r *loomRun) newTree(c *Command) (string, error) {
	if err := r.needWrite(PermWrite); err != nil {
		return "", err
	}
	name, err := firstText(c, "the tree's name")
	if err != nil {
		return "", err
	}
	var cnt struct {
		Next int64 `json:"next"`
	}
	if _, err := r.get(scopeLoom, "trees", &cnt); err != nil {
		return "", err
	}
	if cnt.Next == 0 {
		cnt.Next = 1
	}
	t := &loomTree{ID: cnt.Next, Name: name, Next: 1, Branches: 1, By: r.actor, At: r.now}
	cnt.Next++
	r.put(scopeLoom, "trees", cnt)
	root := ""
	if len(c.Texts) > 1 {
		root = c.Texts[1]
	}
	n, err := r.addNode(t, nil, Node{Content: root, By: r.actor, Model: r.kind == "model"})
	if err != nil {
		return "", err
	}
	r.saveTree(t)
	r.moveTo(t, n)
	return fmt.Sprintf("✓ planted tree %d %q; you are at its root, node 1", t.ID, name), nil
}

func (r *loomRun) add(c *Command, t *loomTree) (string, error) {
	text, err := firstText(c, "the content")
	if err != nil {
		return "", err
	}
	parent, err := r.refParent(c, t)
	if err != nil {
		return "", err
	}
	n, err := r.addNode(t, parent, Node{Content: text, By: r.actor, Model: r.kind == "model", Edge: edgeOf(c)})
	if err != nil {
		return "", err
	}
	r.moveTo(t, n)
	return fmt.Sprintf("✓ node %d (child of %d, branch %s)", n.ID, parent.ID, n.Branch), nil
}

func edgeOf(c *Command) string {
	for _, e := range []string{"context", "instruction"} {
		if c.has(e) {
			return e
		}
	}
	return "primary"
}

// branch from N [as context|instruction] ["content"]: with content, a new
// child of N; without, a move to N, whose next child starts a branch.
func (r *loomRun) branch(c *Command, t *loomTree) (string, error) {
	parent, err := r.refParent(c, t)
	if err != nil {
		return "", err
	}
	if len(c.Texts) == 0 {
		r.moveTo(t, parent)
		k, err := r.count(treeScope(t.ID), "c:"+strconv.FormatInt(parent.ID, 10)+":")
		if err != nil {
			return "", err
		}
		if k == 0 {
			return fmt.Sprintf("✓ at node %d: your next → add or → continue extends branch %s", parent.ID, parent.Branch), nil
		}
		return fmt.Sprintf("✓ at node %d: your next → add or → continue starts branch %d.%d", parent.ID, parent.ID, k+1), nil
	}
	n, err := r.addNode(t, parent, Node{Content: c.Texts[0], By: r.actor, Model: r.kind == "model", Edge: edgeOf(c)})
	if err != nil {
		return "", err
	}
	r.moveTo(t, n)
	return fmt.Sprintf("✓ node %d (%s, child of %d, branch %s)", n.ID, n.Edge, parent.ID, n.Branch), nil
}

func (r *loomRun) edit(c *Command, t *loomTree) (string, error) {
	text, err := firstText(c, "the revised content")
	if err != nil {
		return "", err
	}
	orig, err := r.refNode(c, t)
	if err != nil {
		return "", err
	}
	var parent *Node
	if orig.Parent > 0 {
		if parent, err = r.node(t, strconv.FormatInt(orig.Parent, 10)); err != nil {
			return "", err
		}
	}
	if parent == nil {
		return "", loomErr(errs.InvalidField, "the root cannot be edited").WithHint("plant a new tree, or → add below the root")
	}
	n, err := r.addNode(t, parent, Node{Content: text, By: r.actor, Model: r.kind == "model", Edge: orig.Edge, EditedFrom: orig.ID})
	if err != nil {
		return "", err
	}
	r.moveTo(t, n)
	return fmt.Sprintf("✓ node %d edited from %d (branch %s); %d is unchanged", n.ID, orig.ID, n.Branch, orig.ID), nil
}

func (r *loomRun) annotate(c *Command, t *loomTree) (string, error) {
	text, err := firstText(c, "the annotation")
	if err != nil {
		return "", err
	}
	n, err := r.refNode(c, t)
	if err != nil {
		return "", err
	}
	k, err := r.count(treeScope(t.ID), fmt.Sprintf("a:%d:", n.ID))
	if err != nil {
		return "", err
	}
	r.appendEntry(treeScope(t.ID), fmt.Sprintf("a:%d:%d", n.ID, k+1), map[string]any{"text": text, "by": r.actor, "at": r.now})
	t.Annotations++
	return fmt.Sprintf("✓ annotation %d on node %d", k+1, n.ID), nil
}

func (r *loomRun) link(c *Command, t *loomTree) (string, error) {
	src, err := r.refNode(c, t)
	if err != nil {
		return "", err
	}
	note := c.Opts["note"]
	if note == "" && len(c.Texts) > 0 {
		note = c.Texts[0]
	}
	addLink := func(at int64, v map[string]any) error {
		k, err := r.count(treeScope(t.ID), fmt.Sprintf("l:%d:", at))
		if err != nil {
			return err
		}
		for _, o := range r.ops {
			if o.Scope == treeScope(t.ID) && strings.HasPrefix(o.Key, fmt.Sprintf("l:%d:", at)) {
				k++
			}
		}
		v["by"], v["at"], v["note"] = r.actor, r.now, note
		r.appendEntry(treeScope(t.ID), fmt.Sprintf("l:%d:%d", at, k+1), v)
		return nil
	}
	if doc, ok := c.Opts["doc"]; ok {
		// A link is a reference a reader follows: to a document that
		// does not exist it would lead nowhere (a misspelt name).
		if err := substrate.ValidKey(doc, 200); err != nil {
			return "", err
		}
		var d json.RawMessage
		if found, err := r.get(scopeLoomDoc, "d:"+doc, &d); err != nil {
			return "", err
		} else if !found {
			return "", loomErr(errs.NotFound, "doc %q does not exist, so nothing links to it", doc).
				WithHint("write it first (→ write doc:%q append \"…\"), or link an existing one; → read doc:\"name\" reads one", doc).With("doc", doc)
		}
		if err := addLink(src.ID, map[string]any{"doc": doc}); err != nil {
			return "", err
		}
		t.Links++
		return fmt.Sprintf("✓ linked %d to doc:%q", src.ID, doc), nil
	}
	if len(c.Refs) < 2 {
		return "", loomErr(errs.InvalidField, "link needs a target: another node or doc:\"name\"").WithHint("usage: → %s", loomUsage["link"]).With("nearest", "link")
	}
	dst, err := r.node(t, c.Refs[1])
	if err != nil {
		return "", err
	}
	if err := addLink(src.ID, map[string]any{"to": dst.ID}); err != nil {
		return "", err
	}
	if err := addLink(dst.ID, map[string]any{"from": src.ID}); err != nil {
		return "", err
	}
	t.Links++
	return fmt.Sprintf("✓ linked %d to %d", src.ID, dst.ID), nil
}

func (r *loomRun) bookmark(c *Command, t *loomTree) (string, error) {
	n, err := r.refNode(c, t)
	if err != nil {
		return "", err
	}
	label := strconv.FormatInt(n.ID, 10)
	if len(c.Texts) > 0 {
		label = c.Texts[0]
	}
	r.put(scopeLoomLive, fmt.Sprintf("bm:%d:%s", t.ID, label), map[string]any{"node": n.ID, "by": r.actor, "at": r.now})
	return fmt.Sprintf("✓ bookmark %q → node %d", label, n.ID), nil
}

func (r *loomRun) bookmarks(t *loomTree) (string, error) {
	prefix := fmt.Sprintf("bm:%d:", t.ID)
	kvs, err := r.tx.List(substrate.ListQuery{Scope: scopeLoomLive, Prefix: prefix})
	if err != nil {
		return "", err
	}
	var lines []string
	for _, kv := range kvs {
		k, v := kv.Key, kv.Value
		if after, ok := strings.CutPrefix(k, prefix); ok {
			var b struct {
				Node int64  `json:"node"`
				By   string `json:"by"`
			}
			_ = json.Unmarshal(v, &b)
			lines = append(lines, fmt.Sprintf("%q → node %d (%s)", after, b.Node, b.By))
		}
	}
	sort.Strings(lines)
	if len(lines) == 0 {
		return "no bookmarks in this tree. → bookmark 47 \"label\"", nil
	}
	return strings.Join(lines, "\n"), nil
}

func (r *loomRun) yield(t *loomTree) (string, error) {
	if !r.tx.Writes() {
		return "nothing to yield", nil
	}
	prefix := fmt.Sprintf("lease:%d:", t.ID)
	kvs, err := r.tx.List(substrate.ListQuery{Scope: scopeLoomLive, Prefix: prefix})
	if err != nil {
		return "", err
	}
	var freed []string
	for _, kv := range kvs {
		k, v := kv.Key, kv.Value
		var l loomLease
		if strings.HasPrefix(k, prefix) && json.Unmarshal(v, &l) == nil && l.Holder == r.actor {
			freed = append(freed, strings.TrimPrefix(k, prefix))
			r.del(scopeLoomLive, k)
		}
	}
	if len(freed) == 0 {
		return "you hold no turn in this tree", nil
	}
	sort.Strings(freed)
	return "✓ yielded branch " + strings.Join(freed, ", "), nil
}

func (r *loomRun) switchTo(c *Command, t *loomTree) (string, error) {
	var n *Node
	var err error
	ref := ""
	if len(c.Refs) > 0 {
		ref = c.Refs[0]
	} else if v, ok := c.opt("node"); ok {
		ref = v
	} else if v, ok := c.opt("branch"); ok {
		ref = v
	}
	if ref == "" {
		return "", loomErr(errs.InvalidField, "%s needs a node", c.Verb).WithHint("usage: → %s", loomUsage[c.Verb]).With("nearest", c.Verb)
	}
	if c.has("branch") || strings.Contains(ref, ".") {
		n, err = r.branchHead(t, ref)
	} else {
		n, err = r.node(t, ref)
	}
	if err != nil {
		return "", err
	}
	r.moveTo(t, n)
	return fmt.Sprintf("✓ at node %d of tree %d %q (branch %s)\n%s", n.ID, t.ID, t.Name, n.Branch, r.renderNode(n, "summary")), nil
}

func (r *loomRun) permit(c *Command) (string, error) {
	if !r.p.Admin() || !r.tx.Writes() {
		return "", loomErr(errs.Forbidden, "permission denied: only room authority sets loom permissions").
			WithHint("ask the holder of the room token")
	}
	if len(c.Words) == 0 {
		return "", loomErr(errs.InvalidField, "%s needs an agent", c.Verb).WithHint("usage: → %s", loomUsage[c.Verb]).With("nearest", c.Verb)
	}
	agent := c.Words[0]
	exists, err := r.tx.HasAgent(agent)
	if err != nil {
		return "", err
	}
	if !exists {
		return "", loomErr(errs.AgentNotFound, "agent %q is not in this room", agent)
	}
	var rec struct {
		Perms []string `json:"perms"`
		Kind  string   `json:"kind"`
	}
	if ok, err := r.get(scopeLoom, "perm:"+agent, &rec); err != nil {
		return "", err
	} else if !ok {
		rec.Perms = slices.Clone(defaultLoomPerms)
	}
	for _, w := range c.Words[1:] {
		switch {
		case w == "human" || w == "model":
			rec.Kind = w
		case w == "all":
			if c.Verb == "permit" {
				rec.Perms = slices.Clone(Permissions)
			} else {
				rec.Perms = nil
			}
		case slices.Contains(Permissions, w):
			rec.Perms = slices.DeleteFunc(rec.Perms, func(x string) bool { return x == w })
			if c.Verb == "permit" {
				rec.Perms = append(rec.Perms, w)
			}
		default:
			return "", loomErr(errs.InvalidField, "%q is not a loom permission", w).WithHint("permissions: %s; kinds: human, model", strings.Join(Permissions, ", "))
		}
	}
	sorted := make([]string, 0, len(rec.Perms))
	for _, p := range Permissions {
		if slices.Contains(rec.Perms, p) {
			sorted = append(sorted, p)
		}
	}
	rec.Perms = sorted
	r.put(scopeLoom, "perm:"+agent, rec)
	kind := rec.Kind
	if kind == "" {
		kind = "model"
	}
	return fmt.Sprintf("✓ %s (%s): %s", agent, kind, strings.Join(rec.Perms, ", ")), nil
}

func (r *loomRun) onboarding() (string, error) {
	where := "no tree yet (→ new tree \"name\" plants one)"
	if r.pos.Tree > 0 {
		where = fmt.Sprintf("node %d of tree %d", r.pos.Node, r.pos.Tree)
	} else if n, err := r.treeCount(); err != nil {
		return "", err
	} else if n > 0 {
		t, err := r.tree(1)
		if err != nil {
			return "", err
		}
		where = fmt.Sprintf("tree 1 %q (%d nodes); → switch to 1 goes to its root", t.Name, t.Next-1)
	}
	return fmt.Sprintf(`You are now operating in a loom-aware context. This means:

- You are located within a tree structure of branching conversations/documents
- You can see where you are via metadata at the start of each result: ⟨node:47 depth:12 siblings:2 annotations:1 links:1⟩
- You can navigate, inspect, annotate, and create branches using tool commands
- Tool commands start with → on their own line; several may go in one call
- You share this workspace with human collaborators who have the same capabilities
- → think … ← is your scratchpad: it stays out of the tree, of other agents' reads and of your own context; you and the room's owners (people with room authority, who observe how models work) can read it

Your current location: %s
Your permissions: %s

Type → help for available commands.`, where, strings.Join(r.perms, ", ")), nil
}

func loomHelp(c *Command) string {
	if len(c.Words) > 0 {
		if v, ok := loomVerbs[c.Words[0]]; ok {
			return "→ " + loomUsage[v]
		}
	}
	order := []string{"view", "list", "preview", "tree", "switch", "jump", "add", "branch", "continue", "edit", "annotate", "link",
		"bookmark", "bookmarks", "yield", "read", "write", "pin", "stash", "recall", "drop", "memory", "think", "new", "requests", "fulfil", "permit", "deny", "stop"}
	lines := []string{"commands (one per line, after →):"}
	for _, v := range order {
		lines = append(lines, "  "+loomUsage[v])
	}
	lines = append(lines, "synonyms work: show 23, show me node 23, goto 23, forget stash:\"x\". branch p.k is the k-th continuation of node p.")
	return strings.Join(lines, "\n")
}
