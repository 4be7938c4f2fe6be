// Trees and their nodes: finding a tree, a node by reference, its
// children, ancestors and branches; adding a node.

package loom

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

func (r *loomRun) tree(id int64) (*loomTree, error) {
	var t loomTree
	ok, err := r.get(scopeLoom, "tree:"+strconv.FormatInt(id, 10), &t)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, loomErr(errs.NotFound, "tree %d does not exist", id).WithHint("→ tree lists the current tree; → new tree \"name\" plants one")
	}
	return &t, nil
}

func (r *loomRun) treeCount() (int64, error) {
	var c struct {
		Next int64 `json:"next"`
	}
	if _, err := r.get(scopeLoom, "trees", &c); err != nil {
		return 0, err
	}
	return max(c.Next-1, 0), nil
}

// currentTree is the tree the caller works in: tree:N of the command, the
// caller's position, else the room's first tree.
func (r *loomRun) currentTree(c *Command) (*loomTree, error) {
	if v, ok := c.opt("tree"); ok {
		return r.treeByRef(v)
	}
	if r.pos.Tree > 0 {
		return r.tree(r.pos.Tree)
	}
	n, err := r.treeCount()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, loomErr(errs.NotFound, "this room has no loom tree yet").WithHint(`plant one: → new tree "name" "first words"`)
	}
	return r.tree(1)
}

func (r *loomRun) treeByRef(v string) (*loomTree, error) {
	if id, err := strconv.ParseInt(v, 10, 64); err == nil {
		return r.tree(id)
	}
	n, err := r.treeCount()
	if err != nil {
		return nil, err
	}
	for i := int64(1); i <= n; i++ {
		t, err := r.tree(i)
		if err != nil {
			return nil, err
		}
		if t.Name == v {
			return t, nil
		}
	}
	return nil, loomErr(errs.NotFound, "tree %q does not exist", v).WithHint("name a tree by number (tree:1) or by its name")
}

func (r *loomRun) node(t *loomTree, ref string) (*Node, error) {
	id, err := strconv.ParseInt(ref, 10, 64)
	if err != nil || id <= 0 {
		return nil, loomErr(errs.InvalidField, "%q is not a node id", ref).WithHint("nodes are numbered 1, 2, 3 … in each tree")
	}
	var n Node
	ok, err := r.get(treeScope(t.ID), "n:"+ref, &n)
	if err != nil {
		return nil, err
	}
	if ok {
		return &n, nil
	}
	// Another tree that has this node number.
	cnt, err := r.treeCount()
	if err != nil {
		return nil, err
	}
	for i := int64(1); i <= cnt; i++ {
		if i == t.ID {
			continue
		}
		o, err := r.tree(i)
		if err != nil {
			return nil, err
		}
		if o.Next > id {
			return nil, loomErr(errs.NotFound, "node %d is in a different tree. use: → jump tree:%d node:%d", id, i, id).
				With("tree", i).With("node", id)
		}
	}
	return nil, loomErr(errs.NotFound, "node %d does not exist", id).
		WithHint("tree %d has nodes 1–%d; → tree shows them", t.ID, t.Next-1).With("node", id)
}

// refNode resolves the command's first node reference, or the caller's
// position when there is none.
func (r *loomRun) refNode(c *Command, t *loomTree) (*Node, error) {
	ref := ""
	if len(c.Refs) > 0 {
		ref = c.Refs[0]
	} else if v, ok := c.opt("node"); ok {
		ref = v
	} else if v, ok := c.opt("from"); ok {
		ref = v
	} else if r.pos.Tree == t.ID && r.pos.Node > 0 {
		ref = strconv.FormatInt(r.pos.Node, 10)
	} else {
		ref = "1"
	}
	if strings.Contains(ref, ".") {
		return r.branchHead(t, ref)
	}
	return r.node(t, ref)
}

// refParent is where a new node goes: the command's node, else the
// caller's position. A caller with no position in this tree (a room token
// before its first move in the call, an agent before its first) is refused
// rather than attached under the root: a script must never misplace a node
// silently.
func (r *loomRun) refParent(c *Command, t *loomTree) (*Node, error) {
	_, node := c.opt("node")
	_, from := c.opt("from")
	if len(c.Refs) == 0 && !node && !from && (r.pos.Tree != t.ID || r.pos.Node <= 0) {
		where := "you have no position in tree %d yet"
		if r.p.Kind != substrate.KindAgent {
			where = "this credential is not an agent, so its position lasts one call, and it has none in tree %d in this call"
		}
		return nil, loomErr(errs.InvalidField, "%s needs a place: "+where, c.Verb, t.ID).
			WithHint("name the parent (→ %s from:N …) or move first in the same call (→ switch to N, then → %s …)", c.Verb, c.Verb).With("nearest", c.Verb)
	}
	return r.refNode(c, t)
}

func (r *loomRun) children(t *loomTree, id int64) ([]Node, error) {
	raws, err := r.probe(treeScope(t.ID), "c:"+strconv.FormatInt(id, 10)+":", 1000)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(raws))
	for i, raw := range raws {
		var c struct {
			ID int64 `json:"id"`
		}
		_ = json.Unmarshal(raw, &c)
		keys[i] = "n:" + strconv.FormatInt(c.ID, 10)
	}
	got, err := r.getMany(treeScope(t.ID), keys)
	if err != nil {
		return nil, err
	}
	out := make([]Node, 0, len(keys))
	for _, k := range keys {
		var n Node
		if json.Unmarshal(got[k], &n) == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// ancestors returns the path from the root to n (inclusive), by one
// bounded walk over primary keys.
func (r *loomRun) ancestors(t *loomTree, n *Node) ([]Node, error) {
	raws, err := r.tx.Chain(substrate.ChainQuery{Scope: treeScope(t.ID), Start: "n:" + strconv.FormatInt(n.ID, 10),
		Prefix: "n:", Field: "parent"})
	if err != nil {
		return nil, err
	}
	slices.Reverse(raws)
	return decodeNodes(raws)
}

// decodeNodes reads one node from each value.
func decodeNodes(raws []json.RawMessage) ([]Node, error) {
	out := make([]Node, 0, len(raws))
	for _, raw := range raws {
		var x Node
		if err := json.Unmarshal(raw, &x); err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

// branchStart finds the node that starts branch "p.k" (or the node itself
// for a plain id): the k-th child of p.
func (r *loomRun) branchStart(t *loomTree, ref string) (*Node, error) {
	p, k, ok := strings.Cut(ref, ".")
	if !ok {
		return r.node(t, ref)
	}
	var c struct {
		ID int64 `json:"id"`
	}
	found, err := r.get(treeScope(t.ID), "c:"+p+":"+k, &c)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, loomErr(errs.NotFound, "branch %s does not exist", ref).
			WithHint("branch p.k is the k-th continuation of node p; → list %s continuations shows them", p)
	}
	return r.node(t, strconv.FormatInt(c.ID, 10))
}

// branchHead is the last node of a branch: its start, then first
// children down.
func (r *loomRun) branchHead(t *loomTree, ref string) (*Node, error) {
	start, err := r.branchStart(t, ref)
	if err != nil {
		return nil, err
	}
	// The walk reads the first-child links only ({"id": n}), then the
	// last node: a collaborator glances at its branch's head after every
	// change in the room, and reading every node's content on the way
	// cost a long branch's whole text each time.
	links, err := r.tx.Chain(substrate.ChainQuery{Scope: treeScope(t.ID), Start: "c:" + strconv.FormatInt(start.ID, 10) + ":1",
		Prefix: "c:", Field: "id", Suffix: ":1", Max: 100_000})
	if err != nil {
		return nil, err
	}
	if len(links) == 0 {
		return start, nil
	}
	var last struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(links[len(links)-1], &last); err != nil {
		return nil, err
	}
	return r.node(t, strconv.FormatInt(last.ID, 10))
}

// addNode creates a child of parent (nil: a root) in tree t and returns
// it. The caller's turn on the branch is taken first.
func (r *loomRun) addNode(t *loomTree, parent *Node, n Node) (*Node, error) {
	if err := r.catchUp(t); err != nil {
		return nil, err
	}
	n.ID = t.Next
	n.At = r.now
	if n.Edge == "" {
		n.Edge = "primary"
	}
	if parent == nil {
		n.Branch = "1"
	} else {
		k, err := r.count(treeScope(t.ID), "c:"+strconv.FormatInt(parent.ID, 10)+":")
		if err != nil {
			return nil, err
		}
		// Children added earlier in this same command are not yet written.
		for _, o := range r.ops {
			if strings.HasPrefix(o.Key, "c:"+strconv.FormatInt(parent.ID, 10)+":") && o.Scope == treeScope(t.ID) {
				k++
			}
		}
		n.K = k + 1
		n.Parent = parent.ID
		n.Depth = parent.Depth + 1
		if n.K == 1 {
			n.Branch = parent.Branch
		} else {
			n.Branch = fmt.Sprintf("%d.%d", parent.ID, n.K)
			t.Branches++
		}
		r.appendEntry(treeScope(t.ID), fmt.Sprintf("c:%d:%d", parent.ID, n.K), map[string]int64{"id": n.ID})
	}
	if parent != nil { // planting a root takes no turn
		if err := r.lease(t, n.Branch); err != nil {
			return nil, err
		}
	}
	r.appendEntry(treeScope(t.ID), "n:"+strconv.FormatInt(n.ID, 10), n)
	t.Next++
	t.MaxDepth = max(t.MaxDepth, n.Depth)
	r.nodes = append(r.nodes, n)
	return &n, nil
}

// catchUp moves t's node counter past nodes that already exist, once per
// command and tree. A fulfil in another tree than the caller's once wrote
// a node without saving its tree's counter, and every later node of that
// tree then collided with it; a tree left so is repaired by its next
// write instead of refusing every one.
func (r *loomRun) catchUp(t *loomTree) error {
	if r.caught[t.ID] {
		return nil
	}
	from := t.Next
	for {
		keys := make([]string, 32)
		for i := range keys {
			keys[i] = "n:" + strconv.FormatInt(t.Next+int64(i), 10)
		}
		got, err := r.getMany(treeScope(t.ID), keys)
		if err != nil {
			return err
		}
		i := 0
		for i < len(keys) && got[keys[i]] != nil {
			i++
		}
		t.Next += int64(i)
		if i < len(keys) {
			break
		}
	}
	if t.Next != from {
		r.l.log.Warn("loom tree counter behind its nodes, caught up", "room", r.room, "tree", t.ID, "from", from, "to", t.Next)
	}
	if r.caught == nil {
		r.caught = map[int64]bool{}
	}
	r.caught[t.ID] = true
	return nil
}

func (r *loomRun) saveTree(t *loomTree) {
	r.put(scopeLoom, "tree:"+strconv.FormatInt(t.ID, 10), t)
}
