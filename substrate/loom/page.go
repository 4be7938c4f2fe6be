package loom

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Snapshot is the loom as a page draws it: typed data read from the same
// entries the → commands read and write (so a person's page and a model's
// sync_loom never disagree), in one read transaction that writes nothing
// (no position, no trace). The commands' text is for a model's context;
// a page needs the tree's shape.

// MaxSnapshotNodes bounds the nodes a Snapshot reads of one tree; a larger
// tree is drawn around the node in view (its path, siblings and children).
const MaxSnapshotNodes = 5000

// SnapshotQuery names what to read: a tree (0: the reader's own, else the
// room's first) and a node in it (0: the reader's position there, else the
// root).
type SnapshotQuery struct {
	Tree int64
	Node int64
	// Agent, when set, is the agent whose position picks the tree and
	// node when the query names none (a person's page reads as an
	// observer, which has no position of its own).
	Agent string
}

// TreeInfo is one tree of the room.
type TreeInfo struct {
	ID          int64     `json:"id"`
	Name        string    `json:"name"`
	Nodes       int64     `json:"nodes"`
	Branches    int64     `json:"branches"`
	MaxDepth    int       `json:"max_depth"`
	Annotations int64     `json:"annotations"`
	Links       int64     `json:"links"`
	By          string    `json:"by"`
	At          time.Time `json:"created_at"`
}

// Annotation is a note on a node.
type Annotation struct {
	Text string    `json:"text"`
	By   string    `json:"by"`
	At   time.Time `json:"at"`
}

// Link is one end of a link: to or from another node, or to a document.
type Link struct {
	To   int64     `json:"to,omitempty"`
	From int64     `json:"from,omitempty"`
	Doc  string    `json:"doc,omitempty"`
	Note string    `json:"note,omitempty"`
	By   string    `json:"by"`
	At   time.Time `json:"at"`
}

// Lease is a participant's turn on a branch.
type Lease struct {
	Branch string    `json:"branch"`
	Holder string    `json:"holder"`
	Until  time.Time `json:"until"`
}

// Bookmark is a named node of a tree.
type Bookmark struct {
	Label string `json:"label"`
	Node  int64  `json:"node"`
	By    string `json:"by"`
}

// GenRequest is a queued continuation (no generator configured).
type GenRequest struct {
	ID     int64     `json:"id"`
	Tree   int64     `json:"tree"`
	Node   int64     `json:"node"`
	N      int       `json:"n"`
	Done   int       `json:"done"`
	Tokens int       `json:"tokens"`
	By     string    `json:"by"`
	At     time.Time `json:"at"`
}

// Doc is a loom document's name and size.
type Doc struct {
	Name  string   `json:"name"`
	Lines []string `json:"lines"`
	By    string   `json:"by"`
}

// NodeMarks say what hangs off a node: annotations, links, edits.
type NodeMarks struct {
	Annotated bool
	Linked    bool
	Edited    bool // another node is an edit of this one
}

// View is what a Snapshot returns.
type View struct {
	// Perms are the reader's loom permissions (what it may read); the
	// page asks Perms for the writer separately.
	Perms []string
	Trees []TreeInfo
	// Tree is the tree read (nil: the room has none, or the reader may
	// not see the loom).
	Tree *TreeInfo
	// Nodes are the tree's nodes in id order (all of them up to
	// MaxSnapshotNodes; Partial says some were left out).
	Nodes   []Node
	Partial bool
	Marks   map[int64]NodeMarks
	// Node is the node in view, with its path from the root, siblings
	// (its parent's children, itself included), children, annotations,
	// links and edits.
	Node        *Node
	Path        []Node
	Siblings    []Node
	Children    []Node
	Annotations []Annotation
	Links       []Link
	Edits       []Node
	// Presence is who is active in the tree (the reader included), by
	// actor.
	Presence  []Presence
	Leases    []Lease
	Bookmarks []Bookmark
	Requests  []GenRequest
	// Generating are the tree's generator calls in flight, oldest first.
	Generating []Generation
	// Docs are the room's loom documents (with doc_read).
	Docs []Doc
	Now  time.Time
	// Seq is the room's sequence number the read saw: the page's live
	// stream starts from it, so a commit between this read and the
	// stream's start still reaches the page.
	Seq int64
}

// Snapshot reads the loom of roomID as p may see it (loom_aware for the
// trees, doc_read for the documents), writing nothing.
func (l *Loom) Snapshot(ctx context.Context, p *substrate.Principal, roomID string, q SnapshotQuery) (*View, error) {
	if err := l.svc.RequireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	v := &View{Marks: map[int64]NodeMarks{}}
	err := l.svc.ReadRoom(ctx, p, roomID, func(tx *substrate.RoomTx) error {
		r := &loomRun{l: l, tx: tx, p: p, room: roomID, now: tx.Now(), actor: p.Actor()}
		if err := r.loadCaller(); err != nil {
			return err
		}
		v.Perms, v.Now, v.Seq = r.perms, r.now, tx.Seq()
		if q.Agent != "" && r.pos.Tree == 0 {
			if _, err := r.get(q.Agent, "loom:pos", &r.pos); err != nil {
				return err
			}
		}
		if slices.Contains(r.perms, PermDocRead) {
			kvs, err := tx.List(substrate.ListQuery{Scope: scopeLoomDoc, Prefix: "d:", Limit: 500})
			if err != nil {
				return err
			}
			for _, kv := range kvs {
				var d Doc
				_ = json.Unmarshal(kv.Value, &d)
				d.Name = strings.TrimPrefix(kv.Key, "d:")
				v.Docs = append(v.Docs, d)
			}
		}
		if !slices.Contains(r.perms, PermAware) {
			return nil
		}
		return r.snapshot(v, q)
	})
	if err != nil {
		return nil, err
	}
	return v, nil
}

func (r *loomRun) snapshot(v *View, q SnapshotQuery) error {
	cnt, err := r.treeCount()
	if err != nil {
		return err
	}
	var trees []*loomTree
	for i := int64(1); i <= cnt && i <= 1000; i++ {
		t, err := r.tree(i)
		if err != nil {
			return err
		}
		trees = append(trees, t)
		v.Trees = append(v.Trees, TreeInfo{ID: t.ID, Name: t.Name, Nodes: t.Next - 1, Branches: t.Branches, MaxDepth: t.MaxDepth,
			Annotations: t.Annotations, Links: t.Links, By: t.By, At: t.At})
	}
	if len(trees) == 0 {
		return nil
	}
	tid := q.Tree
	if tid == 0 {
		tid = r.pos.Tree
	}
	if tid == 0 {
		tid = 1
	}
	if tid < 1 || tid > int64(len(trees)) {
		return loomErr(errs.NotFound, "tree %d does not exist", tid).WithHint("this room has trees 1–%d", len(trees)).With("tree", tid)
	}
	t := trees[tid-1]
	v.Tree = &v.Trees[tid-1]
	scope := treeScope(t.ID)
	if err := r.snapshotNodes(v, t, scope); err != nil {
		return err
	}
	if err := r.snapshotFocus(v, t, q, scope); err != nil {
		return err
	}
	return r.snapshotLive(v, t)
}

// snapshotNodes reads the tree's nodes, by key (never a range), with
// their marks.
func (r *loomRun) snapshotNodes(v *View, t *loomTree, scope string) error {
	last := t.Next - 1
	if last > MaxSnapshotNodes {
		last, v.Partial = MaxSnapshotNodes, true
	}
	keys := make([]string, 0, 3*last)
	for i := int64(1); i <= last; i++ {
		id := strconv.FormatInt(i, 10)
		keys = append(keys, "n:"+id, "a:"+id+":1", "l:"+id+":1")
	}
	got, err := r.getMany(scope, keys)
	if err != nil {
		return err
	}
	for i := int64(1); i <= last; i++ {
		id := strconv.FormatInt(i, 10)
		raw, ok := got["n:"+id]
		if !ok {
			continue
		}
		var n Node
		if json.Unmarshal(raw, &n) != nil {
			continue
		}
		v.Nodes = append(v.Nodes, n)
		_, a := got["a:"+id+":1"]
		_, l := got["l:"+id+":1"]
		if a || l {
			m := v.Marks[i]
			m.Annotated, m.Linked = a, l
			v.Marks[i] = m
		}
	}
	for _, n := range v.Nodes {
		if n.EditedFrom > 0 {
			m := v.Marks[n.EditedFrom]
			m.Edited = true
			v.Marks[n.EditedFrom] = m
		}
	}
	return nil
}

// snapshotFocus reads the node in view: its path, children, siblings,
// annotations, links and edits.
func (r *loomRun) snapshotFocus(v *View, t *loomTree, q SnapshotQuery, scope string) error {
	nid := q.Node
	if nid == 0 && r.pos.Tree == t.ID {
		nid = r.pos.Node
	}
	if nid == 0 {
		nid = 1
	}
	n, err := r.node(t, strconv.FormatInt(nid, 10))
	if err != nil {
		return err
	}
	v.Node = n
	if v.Path, err = r.ancestors(t, n); err != nil {
		return err
	}
	if v.Children, err = r.children(t, n.ID); err != nil {
		return err
	}
	if n.Parent > 0 {
		if v.Siblings, err = r.children(t, n.Parent); err != nil {
			return err
		}
	} else {
		v.Siblings = []Node{*n}
	}
	id := strconv.FormatInt(n.ID, 10)
	raws, err := r.probe(scope, "a:"+id+":", 200)
	if err != nil {
		return err
	}
	for _, raw := range raws {
		var a Annotation
		_ = json.Unmarshal(raw, &a)
		v.Annotations = append(v.Annotations, a)
	}
	if raws, err = r.probe(scope, "l:"+id+":", 200); err != nil {
		return err
	}
	for _, raw := range raws {
		var l Link
		_ = json.Unmarshal(raw, &l)
		v.Links = append(v.Links, l)
	}
	for _, x := range v.Nodes {
		if x.EditedFrom == n.ID {
			v.Edits = append(v.Edits, x)
		}
	}
	return nil
}

// snapshotLive reads who is where, whose turn, bookmarks and queued
// continuations.
func (r *loomRun) snapshotLive(v *View, t *loomTree) error {
	tp := strconv.FormatInt(t.ID, 10) + ":"
	live, err := r.tx.List(substrate.ListQuery{Scope: scopeLoomLive, Limit: 2000})
	if err != nil {
		return err
	}
	for _, kv := range live {
		switch {
		case strings.HasPrefix(kv.Key, "at:"+tp):
			var pr Presence
			if json.Unmarshal(kv.Value, &pr) == nil && r.now.Sub(pr.At) <= r.l.opt.PresenceWindow {
				v.Presence = append(v.Presence, pr)
			}
		case strings.HasPrefix(kv.Key, "lease:"+tp):
			var le loomLease
			if json.Unmarshal(kv.Value, &le) == nil && le.Until.After(r.now) {
				v.Leases = append(v.Leases, Lease{Branch: strings.TrimPrefix(kv.Key, "lease:"+tp), Holder: le.Holder, Until: le.Until})
			}
		case strings.HasPrefix(kv.Key, runPrefix+tp):
			var g Generation
			if json.Unmarshal(kv.Value, &g) == nil {
				v.Generating = append(v.Generating, g)
			}
		case strings.HasPrefix(kv.Key, "bm:"+tp):
			var b Bookmark
			if json.Unmarshal(kv.Value, &b) == nil {
				b.Label = strings.TrimPrefix(kv.Key, "bm:"+tp)
				v.Bookmarks = append(v.Bookmarks, b)
			}
		}
	}
	slices.SortFunc(v.Presence, func(a, b Presence) int { return strings.Compare(a.Actor, b.Actor) })
	slices.SortFunc(v.Generating, func(a, b Generation) int { return a.At.Compare(b.At) })
	gens, err := r.tx.List(substrate.ListQuery{Scope: scopeLoom, Prefix: "gen:", Limit: 500})
	if err != nil {
		return err
	}
	for _, kv := range gens {
		var g GenRequest
		if json.Unmarshal(kv.Value, &g) == nil && g.Tree == t.ID {
			v.Requests = append(v.Requests, g)
		}
	}
	slices.SortFunc(v.Requests, func(a, b GenRequest) int { return int(a.ID - b.ID) })
	return nil
}

// Held is the lease on branch b held by someone other than actor, if any.
func (v *View) Held(b, actor string) *Lease {
	for i, l := range v.Leases {
		if l.Branch == b && l.Holder != actor && l.Until.After(v.Now) {
			return &v.Leases[i]
		}
	}
	return nil
}

// NextBranch is the branch a new child of n lands on: n's own when n has
// no children yet (it continues n's line), else a new one "n.k".
func NextBranch(n *Node, children int) string {
	if children == 0 {
		return n.Branch
	}
	return fmt.Sprintf("%d.%d", n.ID, children+1)
}

// PermsOf is p's loom permissions and kind ("human" or "model"), as the
// → commands decide them: what a page may offer p.
func (l *Loom) PermsOf(ctx context.Context, p *substrate.Principal, roomID string) (perms []string, kind string, err error) {
	err = l.svc.ReadRoom(ctx, p, roomID, func(tx *substrate.RoomTx) error {
		r := &loomRun{l: l, tx: tx, p: p, room: roomID, now: tx.Now(), actor: p.Actor()}
		if err := r.loadCaller(); err != nil {
			return err
		}
		perms, kind = r.perms, r.kind
		return nil
	})
	return perms, kind, err
}

// AgentPerms is the loom permission record of each agent in roomID that
// has one (→ permit), for room authority to manage.
func (l *Loom) AgentPerms(ctx context.Context, p *substrate.Principal, roomID string) (map[string][]string, error) {
	out := map[string][]string{}
	err := l.svc.ReadRoom(ctx, p, roomID, func(tx *substrate.RoomTx) error {
		if !p.Admin() {
			return loomErr(errs.Forbidden, "permission denied: only room authority reads loom permissions")
		}
		kvs, err := tx.List(substrate.ListQuery{Scope: scopeLoom, Prefix: "perm:", Limit: 2000})
		if err != nil {
			return err
		}
		for _, kv := range kvs {
			var rec struct {
				Perms []string `json:"perms"`
			}
			_ = json.Unmarshal(kv.Value, &rec)
			out[strings.TrimPrefix(kv.Key, "perm:")] = rec.Perms
		}
		return nil
	})
	return out, err
}

// DefaultPerms are an agent's loom permissions until room authority sets
// them.
func DefaultPerms() []string { return slices.Clone(defaultLoomPerms) }

// Thought is one → think entry of a model.
type Thought struct {
	Agent string    `json:"agent"`
	Text  string    `json:"text"`
	At    time.Time `json:"at"`
}

// Thoughts are agent's latest n thoughts, newest first, for those the
// loom's read rule lets read them: room authority and the thinker.
func (l *Loom) Thoughts(ctx context.Context, p *substrate.Principal, roomID, agent string, n int) ([]Thought, error) {
	if !p.Admin() && (p.Kind != substrate.KindAgent || p.AgentID != agent) {
		return nil, refusal(agent, thoughtPrefix)
	}
	var out []Thought
	err := l.svc.ReadRoom(ctx, p, roomID, func(tx *substrate.RoomTx) error {
		kvs, err := tx.List(substrate.ListQuery{Scope: agent, Prefix: thoughtPrefix, Appended: true, Limit: n})
		if err != nil {
			return err
		}
		for _, kv := range kvs {
			var th Thought
			_ = json.Unmarshal(kv.Value, &th)
			th.Agent = agent
			out = append(out, th)
		}
		return nil
	})
	return out, err
}
