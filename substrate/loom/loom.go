package loom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// The loom (seed 002): trees of immutable nodes that people and models
// navigate and extend with the same commands. A loom lives in a room:
//
//   - _loom (mutable, communal, system-written): tree:<id> records (name,
//     counters), trees (the tree counter), perm:<agent> (loom permissions,
//     set by room authority), gen:<n> (queued generation requests) and gens.
//   - _loom.<tree> (append entries, read by key): n:<id> nodes,
//     c:<parent>:<k> the k-th child of a node, a:<node>:<k> annotations,
//     l:<node>:<k> links. Append entries are not part of the room's
//     snapshot, so a tree of 100,000 nodes costs a read nothing until a
//     command addresses it, and every lookup is by primary key (exact keys,
//     never ranges, so it does not depend on the database's collation).
//   - _loom.live (mutable): lease:<tree>:<branch> (the turn on a branch),
//     at:<tree>:<actor> (presence), bm:<tree>:<label> (bookmarks).
//   - _loom.doc (mutable): d:<name> documents, as lines.
//   - the agent's own scope: loom:pos, loom:pins, loom:stash:<label>,
//     loom:onboarded (mutable) and loom:t:… (trace) and loom:think:…
//     (append): operational memory nobody else reads.
//
// Scopes starting with _loom are written only through these operations
// and hidden from contexts' state (they have their own surface).
const (
	scopeLoom     = "_loom"
	scopeLoomLive = "_loom.live"
	scopeLoomDoc  = "_loom.doc"
)

func treeScope(tree int64) string { return "_loom." + strconv.FormatInt(tree, 10) }

func isLoomScope(scope string) bool {
	return scope == scopeLoom || strings.HasPrefix(scope, scopeLoom+".")
}

// Loom permissions (seed 002 §Permissions).
const (
	PermAware    = "loom_aware"
	PermWrite    = "loom_write"
	PermGenerate = "loom_generate"
	PermDocRead  = "doc_read"
	PermDocWrite = "doc_write"
)

// Permissions are all of them, in the seed's order.
var Permissions = []string{PermAware, PermWrite, PermGenerate, PermDocRead, PermDocWrite}

// defaultLoomPerms are an agent's permissions until room authority sets
// them: it may look and read, not write.
var defaultLoomPerms = []string{PermAware, PermDocRead}

// Options configure the loom.
type Options struct {
	// GeneratorURL is an OpenAI-compatible completions endpoint
	// (…/v1/completions). Empty: continue queues a generation request in
	// room state for an external agent or person (→ fulfil).
	GeneratorURL string
	// GeneratorModel is sent as "model". Default "base".
	GeneratorModel string
	// GeneratorKey, when set, is sent as a bearer token.
	GeneratorKey string
	// MaxTokens caps tokens:N per continuation. Default 256.
	MaxTokens int
	// MaxN caps n:N continuations per command. Default 4.
	MaxN int
	// GeneratorTimeout bounds one generator call. Default 60 s.
	GeneratorTimeout time.Duration
	// LeaseTTL is how long a writer keeps its turn on a branch after its
	// last write. Default 60 s.
	LeaseTTL time.Duration
	// PresenceWindow is how long a participant shows as active after its
	// last command in a tree. Default 2 min.
	PresenceWindow time.Duration
	// ResultChars is the size above which a result is summarised with the
	// command that returns the rest. Default 4,000.
	ResultChars int
	// MemoryTokens is the budget of the operational memory block a model
	// gets with every result (ForModel). Default 400.
	MemoryTokens int
	// ResultTokens is the size above which ForModel summarises a
	// command's result (unless the command asked for full). Default 600.
	ResultTokens int
	// Client makes generator calls. Default http.DefaultClient.
	Client *http.Client
}

func (o *Options) fill() {
	if o.GeneratorModel == "" {
		o.GeneratorModel = "base"
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = 256
	}
	if o.MaxN <= 0 {
		o.MaxN = 4
	}
	if o.GeneratorTimeout <= 0 {
		o.GeneratorTimeout = 60 * time.Second
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 60 * time.Second
	}
	if o.PresenceWindow <= 0 {
		o.PresenceWindow = 2 * time.Minute
	}
	if o.ResultChars <= 0 {
		o.ResultChars = 4000
	}
	if o.MemoryTokens <= 0 {
		o.MemoryTokens = 400
	}
	if o.ResultTokens <= 0 {
		o.ResultTokens = 600
	}
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	// Redirects are not followed: Go's client keeps Authorization on a
	// redirect to another port or scheme of the same host, so the
	// generator's key would reach a server it was not configured for.
	c := *o.Client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	o.Client = &c
}

// Loom runs the → commands of one Service's rooms.
type Loom struct {
	svc *substrate.Service
	opt Options
	log *slog.Logger
}

type featureKey struct{}

// Attach configures the loom of svc with opt; call it once, before the
// service serves (later calls return the loom already attached).
func Attach(svc *substrate.Service, opt Options) *Loom {
	return svc.Feature(featureKey{}, func() any {
		opt.fill()
		return &Loom{svc: svc, opt: opt, log: svc.Logger()}
	}).(*Loom)
}

// Of is the loom of svc: the one Attach configured, else one with the
// default options (queued generation requests, no generator) that is not
// attached, so that Attach, whenever it comes, still configures the loom.
func Of(svc *substrate.Service) *Loom {
	if l, ok := svc.Feature(featureKey{}, nil).(*Loom); ok {
		return l
	}
	opt := Options{}
	opt.fill()
	return &Loom{svc: svc, opt: opt, log: svc.Logger()}
}

// Node is one node of a tree.
type Node struct {
	ID      int64  `json:"id"`
	Parent  int64  `json:"parent,omitempty"`
	Content string `json:"content"`
	// By is the agent (or "_room") that wrote it, or for a configured
	// generator "gen:<model>".
	By string `json:"by"`
	// Model is true for model-written content (continuations, and agents
	// whose loom kind is model), false for a person's.
	Model bool `json:"model"`
	// Edge is primary, context or instruction.
	Edge string `json:"edge"`
	// Branch names the line the node is on: the first child of a node
	// continues its branch, the k-th (k>1) starts branch "<parent>.<k>".
	Branch     string    `json:"branch"`
	Depth      int       `json:"depth"`
	K          int       `json:"k,omitempty"`
	EditedFrom int64     `json:"edited_from,omitempty"`
	For        string    `json:"requested_by,omitempty"`
	At         time.Time `json:"created_at"`
}

// Result is what a run of commands returns.
type Result struct {
	// Text is every step's text, for a model's context.
	Text  string `json:"text"`
	Steps []Step `json:"steps"`
	// Errors counts the steps that failed.
	Errors int `json:"errors"`
	// Position is where the caller is after the run.
	Position *Position `json:"position,omitempty"`
	// Parts are ForModel's pieces of Text (nil from Run).
	Parts *ModelParts `json:"-"`
	// onboard is the orientation an agent's first command brought.
	onboard string
}

// Step is one command's outcome.
type Step struct {
	Command string    `json:"command"`
	Verb    string    `json:"verb"`
	OK      bool      `json:"ok"`
	Text    string    `json:"text"`
	Error   errs.Code `json:"error,omitempty"`
	Nodes   []Node    `json:"nodes,omitempty"`
}

// Position is the ambient metadata of seed 002 §Ambient Context.
type Position struct {
	Tree        int64  `json:"tree"`
	TreeName    string `json:"tree_name"`
	Node        int64  `json:"node"`
	Depth       int    `json:"depth"`
	Siblings    int    `json:"siblings"`
	Annotations int    `json:"annotations"`
	Links       int    `json:"links"`
	Branch      string `json:"branch"`
	// Others are the other participants active in this tree.
	Others []Presence `json:"others,omitempty"`
	// Ambient is the metadata line: ⟨node:47 depth:12 siblings:2 …⟩.
	Ambient string `json:"ambient"`
}

// Presence is another participant active in the tree.
type Presence struct {
	Actor  string    `json:"actor"`
	Kind   string    `json:"kind"`
	Branch string    `json:"branch"`
	Node   int64     `json:"node"`
	At     time.Time `json:"at"`
}

type loomTree struct {
	ID          int64     `json:"id"`
	Name        string    `json:"name"`
	Next        int64     `json:"next"`
	Branches    int64     `json:"branches"`
	MaxDepth    int       `json:"max_depth"`
	Annotations int64     `json:"annotations"`
	Links       int64     `json:"links"`
	By          string    `json:"by"`
	At          time.Time `json:"created_at"`
}

type loomPos struct {
	Tree int64 `json:"tree"`
	Node int64 `json:"node"`
}

type loomLease struct {
	Holder string    `json:"holder"`
	Until  time.Time `json:"until"`
}

// run is one command's execution: the connection it reads on, the writes
// it queues, and what it learnt about the caller.
type loomRun struct {
	l     *Loom
	tx    *substrate.RoomTx
	p     *substrate.Principal
	room  string
	now   time.Time
	actor string
	kind  string // "human" or "model"
	perms []string
	// pos is where the caller is for this command: the call's position
	// (callState.pos) once the call has one, else the stored one.
	pos loomPos
	// stored is the agent's stored position (loom:pos), as read.
	stored loomPos
	// newPos is set when the command moved the caller.
	newPos *loomPos
	ops    []substrate.Op
	trace  string // the trace line; default the command
	nodes  []Node
	in     *stepIn
	// caught are the trees whose counter catchUp checked.
	caught map[int64]bool
}

func loomErr(code errs.Code, format string, a ...any) *errs.Error {
	return errs.New(code, "✗ "+format, a...)
}

func (r *loomRun) need(perm string) error {
	if slices.Contains(r.perms, perm) {
		return nil
	}
	return loomErr(errs.Forbidden, "permission denied: %s not enabled", perm).
		WithHint("ask the room's owner: → permit %s %s", r.actorOrYou(), perm).With("permission", perm)
}

func (r *loomRun) actorOrYou() string {
	if r.p.Kind == substrate.KindAgent {
		return r.p.AgentID
	}
	return "<agent>"
}

// needWrite refuses read-only credentials, then checks perm.
func (r *loomRun) needWrite(perm string) error {
	if r.p.ReadOnly() || !r.tx.Writes() {
		return loomErr(errs.ReadOnlyToken, "permission denied: this credential is read-only").
			WithHint("write with an agent token or the room token (over MCP: embody an agent)")
	}
	return r.need(perm)
}

func (r *loomRun) agent() error {
	if r.p.Kind != substrate.KindAgent {
		return loomErr(errs.InvalidField, "operational memory belongs to an agent, and this credential is not one").
			WithHint("use an agent token (over MCP: embody an agent)").With("needs", "agent")
	}
	return nil
}

// get reads one entry's value into v; false when absent.
func (r *loomRun) get(scope, key string, v any) (bool, error) {
	raw, ok, err := r.tx.Get(scope, key)
	if err != nil || !ok {
		return false, err
	}
	return true, json.Unmarshal(raw, v)
}

// getMany reads the values of keys that exist, by key.
func (r *loomRun) getMany(scope string, keys []string) (map[string]json.RawMessage, error) {
	return r.tx.GetMany(scope, keys)
}

// probe reads prefix1, prefix2, … until a gap: the children, annotations
// or links of a node, by exact keys.
func (r *loomRun) probe(scope, prefix string, limit int) ([]json.RawMessage, error) {
	var out []json.RawMessage
	for start := 1; ; {
		n := min(32, limit-len(out))
		if n <= 0 {
			return out, nil
		}
		keys := make([]string, n)
		for i := range keys {
			keys[i] = prefix + strconv.Itoa(start+i)
		}
		got, err := r.getMany(scope, keys)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			v, ok := got[k]
			if !ok {
				return out, nil
			}
			out = append(out, v)
		}
		start += n
	}
}

func (r *loomRun) count(scope, prefix string) (int, error) {
	vs, err := r.probe(scope, prefix, 10_000)
	return len(vs), err
}

func (r *loomRun) put(scope, key string, v any) {
	raw, _ := json.Marshal(v)
	r.ops = append(r.ops, substrate.Op{Scope: scope, Key: key, Value: raw})
}

func (r *loomRun) putTimed(scope, key string, v any, ttl time.Duration) {
	raw, _ := json.Marshal(v)
	r.ops = append(r.ops, substrate.Op{Scope: scope, Key: key, Value: raw, TTL: ttl})
}

func (r *loomRun) appendEntry(scope, key string, v any) {
	raw, _ := json.Marshal(v)
	r.ops = append(r.ops, substrate.Op{Scope: scope, Key: key, Value: raw, Append: true})
}

func (r *loomRun) del(scope, key string) {
	r.ops = append(r.ops, substrate.Op{Scope: scope, Key: key, Delete: true})
}

// uniq is a key suffix unique to this mutation: its base seq plus a
// counter.
func (r *loomRun) uniq() string {
	return fmt.Sprintf("%012d.%d", r.tx.Base(), len(r.ops))
}

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

// position computes the ambient metadata at node n.
func (r *loomRun) position(t *loomTree, n *Node) (*Position, error) {
	ps := &Position{Tree: t.ID, TreeName: t.Name, Node: n.ID, Depth: n.Depth, Branch: n.Branch}
	var err error
	if n.Parent > 0 {
		if ps.Siblings, err = r.count(treeScope(t.ID), "c:"+strconv.FormatInt(n.Parent, 10)+":"); err != nil {
			return nil, err
		}
	} else {
		ps.Siblings = 1
	}
	id := strconv.FormatInt(n.ID, 10)
	if ps.Annotations, err = r.count(treeScope(t.ID), "a:"+id+":"); err != nil {
		return nil, err
	}
	if ps.Links, err = r.count(treeScope(t.ID), "l:"+id+":"); err != nil {
		return nil, err
	}
	if ps.Others, err = r.presence(t); err != nil {
		return nil, err
	}
	ps.Ambient = fmt.Sprintf("⟨node:%d depth:%d siblings:%d annotations:%d links:%d⟩", n.ID, n.Depth, ps.Siblings, ps.Annotations, ps.Links)
	for _, o := range ps.Others {
		ps.Ambient += fmt.Sprintf(" ⟨%s %s active in branch:%s⟩", o.Kind, o.Actor, o.Branch)
	}
	return ps, nil
}

// presence lists the others active in tree t: the _loom.live scope holds
// only a few mutable entries.
func (r *loomRun) presence(t *loomTree) ([]Presence, error) {
	kvs, err := r.tx.List(substrate.ListQuery{Scope: scopeLoomLive, Prefix: "at:" + strconv.FormatInt(t.ID, 10) + ":"})
	if err != nil {
		return nil, err
	}
	var out []Presence
	for _, kv := range kvs {
		var pr Presence
		if json.Unmarshal(kv.Value, &pr) != nil || pr.Actor == r.actor || r.now.Sub(pr.At) > r.l.opt.PresenceWindow {
			continue
		}
		out = append(out, pr)
	}
	slices.SortFunc(out, func(a, b Presence) int { return strings.Compare(a.Actor, b.Actor) })
	return out, nil
}

// moveTo records that the caller is now at node n of tree t.
func (r *loomRun) moveTo(t *loomTree, n *Node) {
	r.newPos = &loomPos{Tree: t.ID, Node: n.ID}
	if !r.tx.Writes() {
		return
	}
	r.putTimed(scopeLoomLive, "at:"+strconv.FormatInt(t.ID, 10)+":"+r.actor,
		Presence{Actor: r.actor, Kind: r.kind, Branch: n.Branch, Node: n.ID, At: r.now}, r.l.opt.PresenceWindow)
}

// lease takes (or extends) the caller's turn on branch b of tree t, or
// says who holds it and until when.
func (r *loomRun) lease(t *loomTree, b string) error {
	key := "lease:" + strconv.FormatInt(t.ID, 10) + ":" + b
	var l loomLease
	ok, err := r.get(scopeLoomLive, key, &l)
	if err != nil {
		return err
	}
	if ok && l.Holder != r.actor && l.Until.After(r.now) {
		left := l.Until.Sub(r.now).Round(time.Second)
		return loomErr(errs.BranchHeld, "branch %s is %s's turn until %s (%s left)", b, l.Holder, l.Until.UTC().Format("15:04:05Z"), left).
			WithHint("wait for them to yield, or write elsewhere: → branch from <node> starts a branch of your own").
			With("holder", l.Holder).With("until", l.Until.UTC()).With("branch", b)
	}
	r.putTimed(scopeLoomLive, key, loomLease{Holder: r.actor, Until: r.now.Add(r.l.opt.LeaseTTL)}, r.l.opt.LeaseTTL)
	return nil
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

// loadCaller reads the caller's permissions, kind and position.
func (r *loomRun) loadCaller() error {
	row := func(scope, key string) (json.RawMessage, bool, error) {
		var raw json.RawMessage
		ok, err := r.get(scope, key, &raw)
		return raw, ok, err
	}
	var err error
	if r.perms, r.kind, err = loomPermsOf(r.p, row); err != nil {
		return err
	}
	if r.p.Kind == substrate.KindAgent {
		if _, err := r.get(r.p.AgentID, "loom:pos", &r.stored); err != nil {
			return err
		}
		r.pos = r.stored
	}
	return nil
}

// loomPermsOf is p's loom permissions and kind (human or model), from its
// perm record (→ permit) read with row. The → commands and every other
// read path (loomReadRule) decide with it, so they cannot disagree.
func loomPermsOf(p *substrate.Principal, row substrate.RowFunc) (perms []string, kind string, err error) {
	switch {
	case p.Kind == substrate.KindRoom:
		return Permissions, "human", nil
	case p.ReadOnly() && p.ReadsAs() != "",
		p.Kind == substrate.KindAgent && p.AgentID == substrate.ScopeShared && p.ReadsAs() != "" && !strings.HasPrefix(p.ReadsAs(), "_"):
		// Read-only for an agent (ReadOnlyOf), a person: its permissions
		// that read. A communal definition registered by an agent
		// (roomCtx.stateAs), a model: that agent's permissions, never more
		// than the defaults of an agent "_shared" would give.
		agent, _, err := loomPermsOf(&substrate.Principal{Kind: substrate.KindAgent, RoomID: p.RoomID, AgentID: p.ReadsAs()}, row)
		if err != nil {
			return nil, "", err
		}
		kind := "model"
		if p.ReadOnly() {
			kind = "human"
		}
		return slices.DeleteFunc(slices.Clone(agent), func(x string) bool { return !slices.Contains(defaultLoomPerms, x) }), kind, nil
	case p.ReadOnly():
		return defaultLoomPerms, "human", nil
	}
	var rec struct {
		Perms []string `json:"perms"`
		Kind  string   `json:"kind"`
	}
	raw, ok, err := row(scopeLoom, "perm:"+p.AgentID)
	if err != nil {
		return nil, "", err
	}
	perms, kind = defaultLoomPerms, "model"
	if p.Person {
		kind = "human"
	}
	if ok {
		// Only → permit writes the record; one that does not decode
		// grants nothing rather than failing every read.
		if json.Unmarshal(raw, &rec) != nil {
			rec.Perms, rec.Kind = nil, ""
		}
		perms = rec.Perms
		if rec.Kind != "" {
			kind = rec.Kind
		}
	}
	// Room authority ("*", which an owner's embodied agent has) may do
	// everything; what writes is still an agent, a model unless marked
	// a person with → permit <agent> human or driven by one from the
	// web pages (substrate.Principal.Person).
	if p.Admin() {
		perms = Permissions
	}
	return perms, kind, nil
}

// loomReadRule is the loom's read rule: a _loom* scope is visible exactly
// when the → commands would show it (_loom.doc with doc_read, the other
// _loom scopes with loom_aware), and an agent's operational memory (every
// loom:… key of its scope: its thinking, trace, pins, stashes) only to
// the agent and room authority: people observe models' thinking; other agents, view links
// and observers do not.
type loomReadRule struct{}

func (loomReadRule) Reader(p *substrate.Principal, row substrate.RowFunc) (substrate.Reader, error) {
	perms, _, err := loomPermsOf(p, row)
	if err != nil {
		return substrate.Reader{}, err
	}
	aware, docs := slices.Contains(perms, PermAware), slices.Contains(perms, PermDocRead)
	thinker := func(scope string) bool { return p.Admin() || (p.Kind == substrate.KindAgent && p.AgentID == scope) }
	return substrate.Reader{
		Sees: func(scope, key string) bool {
			switch {
			case scope == scopeLoomDoc:
				return docs
			case isLoomScope(scope):
				return aware
			case key != "" && !strings.HasPrefix(scope, "_") && isMemory(key):
				return thinker(scope)
			}
			return true
		},
		HiddenPrefixes: func(scope string) []string {
			if strings.HasPrefix(scope, "_") || thinker(scope) {
				return nil
			}
			return []string{memoryPrefix}
		},
		Refusal: refusal,
		// What the reader sees depends on its permissions and, for
		// thoughts and traces, on whose they are: only room authority and
		// the agent itself (never a _shared registrant) read those.
		Key: shareKey(p, perms),
	}, nil
}

// refusal says, in the loom's words, why a read its rule refused is
// refused.
func refusal(scope, key string) error {
	switch {
	case key != "" && !strings.HasPrefix(scope, "_") && isThought(key):
		return errs.New(errs.ScopeDenied, "%s/%s is %s's thinking (→ think), which only %s and room authority read", scope, key, scope, scope).
			WithHint("read the agent's other entries, or ask the room's owner")
	case key != "" && !strings.HasPrefix(scope, "_") && isTrace(key):
		return errs.New(errs.ScopeDenied, "%s/%s is %s's loom trace (the commands it ran), which only %s and room authority read", scope, key, scope, scope).
			WithHint("read the agent's other entries, or ask the room's owner")
	case key != "" && !strings.HasPrefix(scope, "_") && isMemory(key):
		return errs.New(errs.ScopeDenied, "%s/%s is %s's operational memory (pins, stashes: → memory), which only %s and room authority read", scope, key, scope, scope).
			WithHint("read the agent's other entries, or ask the room's owner")
	case scope == scopeLoomDoc:
		return errs.New(errs.ScopeDenied, "scope %q holds the loom's documents, which this reader may not read (%s is not enabled)", scope, PermDocRead).
			With("permission", PermDocRead).WithHint("ask the room's owner: → permit <agent> %s", PermDocRead)
	case isLoomScope(scope):
		return errs.New(errs.ScopeDenied, "scope %q belongs to the loom, which this reader may not see (%s is not enabled)", scope, PermAware).
			With("permission", PermAware).WithHint("ask the room's owner: → permit <agent> %s", PermAware)
	}
	return nil
}

// shareKey names what loomReadRule's reader for p sees: its reading
// permissions, and whose thoughts and traces it reads (room authority
// all of them; an agent its own).
func shareKey(p *substrate.Principal, perms []string) string {
	who := ""
	switch {
	case p.Admin():
		who = "*"
	case p.Kind == substrate.KindAgent:
		who = "agent:" + p.AgentID
	}
	return who + "\x00" + strings.Join(perms, ",")
}

// Feature is the loom as a Service runs it (substrate.Options.Features):
// its scopes and its agents' memory, names the core reserves for it, and
// the read rule that decides them on every surface. A Service built
// without it seals them instead.
func Feature() substrate.Feature {
	return substrate.Feature{Name: "loom", Scopes: []string{scopeLoom}, Memory: []string{memoryPrefix}, ReadRule: loomReadRule{}}
}

// memoryPrefix starts every key the loom keeps in an agent's scope: its
// operational memory (seed 002, "Memory Tools": its own working memory),
// read by the agent and room authority only, as its thoughts and trace.
const memoryPrefix = "loom:"

func isMemory(key string) bool { return strings.HasPrefix(key, memoryPrefix) }

// thoughtPrefix starts the keys of → think entries in the thinker's scope.
const thoughtPrefix = "loom:think:"

func isThought(key string) bool { return strings.HasPrefix(key, thoughtPrefix) }

// tracePrefix starts the keys of an agent's loom trace: each command line
// it ran, which carries what the command wrote (a node's text, a
// document's line). It is read as thoughts are, so an agent granted the
// scope but denied the loom does not read the loom through it.
const tracePrefix = "loom:t:"

func isTrace(key string) bool { return strings.HasPrefix(key, tracePrefix) }

// IsThought reports an agent's thinking (→ think): pages show it folded.
func IsThought(scope, key string) bool {
	return !strings.HasPrefix(scope, "_") && isThought(key)
}

// IsScope reports one of the loom's own scopes (_loom, _loom.*), which
// hold its machinery: pages show them folded.
func IsScope(scope string) bool { return isLoomScope(scope) }

// Run runs one or more → command lines (seed 002) as p in roomID. Each
// command is its own mutation (or, for a read-only credential, its own
// read): a failing command changes nothing and is recorded in the caller's
// trace, and the commands after it do not run (batchFailure: the error
// says which line failed and which ran). A call in which a line does not
// parse runs nothing (refuseUnparsed). The call carries the caller's
// position from command to command (callState).
func (l *Loom) Run(ctx context.Context, p *substrate.Principal, roomID, text string) (*Result, error) {
	return l.RunAt(ctx, p, roomID, text, Place{})
}

// Place is a node of a tree.
type Place struct {
	Tree, Node int64
}

// RunAt is Run for commands issued against a node on screen (the loom
// page's command box, a REST call that names tree and node): the call
// starts at at instead of where the caller's agent stands, so a plain
// → add lands under the node the person looks at, whatever the agent did
// elsewhere since the page was drawn. The caller's stored position moves
// only as the commands move it. A zero Place is Run.
func (l *Loom) RunAt(ctx context.Context, p *substrate.Principal, roomID, text string, at Place) (*Result, error) {
	if err := l.svc.RequireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	lines, perr := ParseLines(text)
	if perr == nil {
		if res, err := l.refuseUnparsed(ctx, p, roomID, lines); res != nil || err != nil {
			return res, err
		}
	}
	cmds := make([]*Command, 0, len(lines))
	for _, pl := range lines {
		cmds = append(cmds, pl.Cmd)
	}
	var start *loomPos
	if at.Tree > 0 && at.Node > 0 {
		start = &loomPos{Tree: at.Tree, Node: at.Node}
	}
	return l.run(ctx, p, roomID, cmds, perr, start)
}

// RunParsed runs commands Parse returned, through the same steps as Run:
// a page composes a command as a line, parses it, then puts back into its
// Texts what a line cannot carry (a node's paragraphs, line breaks).
func (l *Loom) RunParsed(ctx context.Context, p *substrate.Principal, roomID string, cmds []*Command) (*Result, error) {
	if err := l.svc.RequireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	if len(cmds) == 0 {
		return nil, errs.New(errs.InvalidField, "✗ no command").WithHint("for example: → view 23, → tree, → help")
	}
	return l.run(ctx, p, roomID, cmds, nil, nil)
}

func (l *Loom) run(ctx context.Context, p *substrate.Principal, roomID string, cmds []*Command, perr error, start *loomPos) (*Result, error) {
	res := &Result{}
	var firstErr error
	var texts []string
	onboard := ""
	record := func(st Step, err error) {
		if err != nil {
			e := errs.From(err)
			if e.Code == errs.Internal || e.Code == errs.Unavailable {
				l.log.Error("loom command failed", "room", roomID, "err", err)
			}
			st.OK, st.Error, st.Text = false, e.Code, e.Message
			if e.Hint != "" {
				st.Text += "\n  " + e.Hint
			}
			res.Errors++
			if firstErr == nil {
				firstErr = err
			}
		}
		res.Steps = append(res.Steps, st)
		texts = append(texts, "→ "+st.Command+"\n"+st.Text)
	}
	// A call carries its position from command to command: "→ jump 5"
	// then "→ add" attaches under 5 even while another call of the same
	// agent moves it elsewhere, and a credential that is not an agent
	// (which has no stored position) has one for the call.
	call := &callState{pos: start}
	failed := -1
	for i, c := range cmds {
		if failed >= 0 {
			// The lines after a failed one do not run: they were written
			// for where it would have left the caller ("→ jump 99" that
			// failed, then "→ add" at the old place).
			st := Step{Command: c.Line, Verb: c.Verb, Error: notRun, Text: fmt.Sprintf("· not run (line %d failed before it)", failed+1)}
			res.Steps = append(res.Steps, st)
			texts = append(texts, "→ "+st.Command+"\n"+st.Text)
			continue
		}
		st, pos, ob, err := l.step(ctx, p, roomID, c, call)
		if ob != "" && onboard == "" {
			onboard = ob
		}
		if pos != nil {
			res.Position = pos
		}
		record(st, err)
		if err != nil {
			failed = i
		}
	}
	if perr != nil && failed < 0 {
		line, verb := parseFailure(perr)
		l.traceError(ctx, p, roomID, verb, line, perr)
		record(Step{Command: line, Verb: verb}, perr)
	}
	if firstErr != nil {
		if len(res.Steps) == 1 {
			return nil, firstErr
		}
		return nil, batchFailure(firstErr, res.Steps, texts)
	}
	res.Text = strings.Join(texts, "\n\n")
	res.onboard = onboard
	if onboard != "" {
		res.Text = onboard + "\n\n" + res.Text
	}
	if res.Position != nil {
		res.Text = res.Position.Ambient + "\n" + res.Text
	}
	return res, nil
}

// notRun marks a command that did not run because another line of its
// call did not parse, or failed before it.
const notRun errs.Code = "not_run"

// batchFailure is the error of a call of several lines in which one
// failed: the failed line's code (so REST answers with its status and MCP
// with isError), a message that says which line failed, which lines ran
// (their writes stand: sending them again would do them twice) and which
// did not run, then every line's outcome; its details the same as
// numbers (failed_line, done, not_run) and the steps.
func batchFailure(first error, steps []Step, texts []string) error {
	e := *errs.From(first)
	e.Details = maps.Clone(e.Details)
	failed := 0
	var done, skipped []int
	for i, st := range steps {
		switch {
		case st.OK:
			done = append(done, i+1)
		case st.Error == notRun:
			skipped = append(skipped, i+1)
		default:
			failed = i + 1
		}
	}
	head := fmt.Sprintf("✗ line %d of %d failed (→ %s)", failed, len(steps), steps[failed-1].Command)
	if len(done) == 0 {
		head += "; nothing was done"
	} else {
		head += fmt.Sprintf("; %s ran and stand%s", lineList(done), map[bool]string{true: "s", false: ""}[len(done) == 1])
	}
	if len(skipped) > 0 {
		head += fmt.Sprintf("; %s did not run", lineList(skipped))
	}
	e.Message = head + ".\n\n" + strings.Join(texts, "\n\n")
	switch {
	case len(done) == 0:
		e.Hint = fmt.Sprintf("fix line %d and send the call again", failed)
	case len(skipped) == 0:
		e.Hint = fmt.Sprintf("fix line %d and send it again; do not send %s again", failed, lineList(done))
	default:
		e.Hint = fmt.Sprintf("fix line %d and send it with the lines after it; do not send %s again", failed, lineList(done))
	}
	if done == nil {
		done = []int{}
	}
	if skipped == nil {
		skipped = []int{}
	}
	return e.With("failed_line", failed).With("done", done).With("not_run", skipped).With("steps", steps)
}

// lineList names line numbers: "line 2", "lines 1–3", "lines 1, 3".
func lineList(ns []int) string {
	if len(ns) == 1 {
		return fmt.Sprintf("line %d", ns[0])
	}
	if ns[len(ns)-1]-ns[0] == len(ns)-1 {
		return fmt.Sprintf("lines %d–%d", ns[0], ns[len(ns)-1])
	}
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return "lines " + strings.Join(parts, ", ")
}

// refuseUnparsed answers a call in which some line does not parse: none
// of its commands runs (a model that mistyped one line of a plan should
// not have the rest of the plan run without it, from wherever the earlier
// lines left it), and every line is reported in order: the ones that did
// not parse with what was wrong and the nearest command, the others as
// not run. The error is the first failure's, its message every line's
// outcome, its details the steps. Nil, nil when every line parsed.
func (l *Loom) refuseUnparsed(ctx context.Context, p *substrate.Principal, roomID string, lines []Parsed) (*Result, error) {
	var first error
	bad := 0
	for _, pl := range lines {
		if pl.Err != nil {
			bad++
			if first == nil {
				first = pl.Err
			}
		}
	}
	if first == nil {
		return nil, nil
	}
	if len(lines) == 1 {
		line, verb := parseFailure(first)
		l.traceError(ctx, p, roomID, verb, line, first)
		return nil, first
	}
	steps := make([]Step, 0, len(lines))
	texts := []string{fmt.Sprintf("✗ nothing ran: %d of the %d commands did not parse. Fix %s and send the call again.",
		bad, len(lines), map[bool]string{true: "it", false: "them"}[bad == 1])}
	for _, pl := range lines {
		if pl.Err == nil {
			st := Step{Command: pl.Line, Verb: pl.Cmd.Verb, Error: notRun, Text: "· not run (another command of this call did not parse)"}
			steps = append(steps, st)
			texts = append(texts, fmt.Sprintf("→ %s\n%s", st.Command, st.Text))
			continue
		}
		line, verb := parseFailure(pl.Err)
		l.traceError(ctx, p, roomID, verb, line, pl.Err)
		e := errs.From(pl.Err)
		st := Step{Command: line, Verb: verb, Error: e.Code, Text: e.Message}
		if e.Hint != "" {
			st.Text += "\n  " + e.Hint
		}
		steps = append(steps, st)
		texts = append(texts, fmt.Sprintf("→ %s\n%s", st.Command, st.Text))
	}
	e := *errs.From(first)
	e.Details = maps.Clone(e.Details)
	e.Message = strings.Join(texts, "\n\n")
	e.Hint = "send the call again with every command line fixed; nothing in it ran"
	return nil, e.With("steps", steps)
}

// parseFailure is how a line that did not parse is traced: as written,
// an unknown verb as "unknown", anything else as "parse" (never as the
// suggestion).
func parseFailure(err error) (line, verb string) {
	line, verb = "(unparsed)", "parse"
	var e *errs.Error
	if errors.As(err, &e) {
		if v, ok := e.Details["line"].(string); ok {
			line = v
		}
		if e.Details["verb"] == "unknown" {
			verb = "unknown"
		}
	}
	return line, verb
}

// loomWrites are the verbs that change shared content.
var loomWrites = map[string]bool{"add": true, "branch": true, "annotate": true, "link": true, "edit": true, "write": true,
	"new": true, "fulfil": true, "yield": true, "bookmark": true, "permit": true, "deny": true, "continue": true, "stop": true}

// callState is what one Run carries from command to command.
type callState struct {
	// pos is the caller's position for the rest of the call: where the
	// call started (RunAt), else the agent's stored position as its first
	// command read it, then wherever the call's commands moved it. Each
	// command is its own transaction, and re-reading the stored position
	// in each let another call of the same agent move it in between (a
	// jump, then an add under the other call's node).
	pos *loomPos
}

// stepIn is what a command's mutation gets from work done before it with
// no connection held.
type stepIn struct {
	call *callState
	// gen are generated texts for a continue; running is the record of
	// their generation, which the nodes' mutation removes.
	gen     []string
	running string
	// summary, when set, is the summary a command asked for.
	summary *string
	// collect asks the command only to read the text it would summarise
	// (into collected) and stop.
	collect   bool
	collected *string
}

func (l *Loom) step(ctx context.Context, p *substrate.Principal, roomID string, c *Command, call *callState) (st Step, pos *Position, onboard string, err error) {
	switch {
	case c.Verb == "continue" && l.opt.GeneratorURL != "":
		st, pos, onboard, err = l.continueGen(ctx, p, roomID, c, call)
	case wantsSummary(c):
		st, pos, onboard, err = l.summaryStep(ctx, p, roomID, c, call)
	default:
		st, pos, onboard, err = l.exec(ctx, p, roomID, c, &stepIn{call: call})
	}
	if err != nil {
		l.traceError(ctx, p, roomID, c.Verb, c.Line, err)
	}
	return st, pos, onboard, err
}

// exec runs c on one connection: a mutation for agents (whose every
// command lands in their trace) and for writes, a read transaction
// otherwise. gen, when set, are generated texts for a continue.
func (l *Loom) exec(ctx context.Context, p *substrate.Principal, roomID string, c *Command, in *stepIn) (st Step, pos *Position, onboard string, err error) {
	st = Step{Command: c.Line, Verb: c.Verb, OK: true}
	body := func(r *loomRun) error {
		if err := r.loadCaller(); err != nil {
			return err
		}
		r.in = in
		if in.call != nil {
			if in.call.pos != nil {
				r.pos = *in.call.pos
			} else if !in.collect {
				np := r.pos
				in.call.pos = &np
			}
		}
		if r.p.Kind == substrate.KindAgent && r.tx.Writes() && !in.collect {
			var seen bool
			if ok, err := r.get(r.p.AgentID, "loom:onboarded", &seen); err != nil {
				return err
			} else if !ok {
				if onboard, err = r.onboarding(); err != nil {
					return err
				}
				r.put(r.p.AgentID, "loom:onboarded", true)
			}
		}
		text, err := r.exec(c, in.gen)
		if err != nil {
			return err
		}
		if in.collect {
			return nil
		}
		if r.newPos != nil && in.call != nil {
			np := *r.newPos
			in.call.pos = &np
		}
		st.Text = text
		st.Nodes = r.nodes
		if np := r.newPos; np != nil || r.pos.Tree > 0 {
			at := r.pos
			if np != nil {
				at = *np
			}
			if t, err := r.tree(at.Tree); err == nil {
				if n, err := r.node(t, strconv.FormatInt(at.Node, 10)); err == nil {
					if pos, err = r.position(t, n); err != nil {
						return err
					}
				}
			}
			if np != nil && r.p.Kind == substrate.KindAgent && *np != r.stored {
				r.put(r.p.AgentID, "loom:pos", np)
			}
		}
		return nil
	}
	write := (p.Kind == substrate.KindAgent || (loomWrites[c.Verb] && !p.ReadOnly())) && !in.collect
	if !write {
		err = l.svc.ReadRoom(ctx, p, roomID, func(tx *substrate.RoomTx) error {
			return body(&loomRun{l: l, tx: tx, p: p, room: roomID, now: tx.Now(), actor: p.Actor()})
		})
		return st, pos, onboard, err
	}
	var moved *loomPos
	_, err = l.svc.MutateRoom(ctx, p, roomID, func(tx *substrate.RoomTx) error {
		r := &loomRun{l: l, tx: tx, p: tx.Principal(), room: roomID, now: tx.Now(), actor: tx.Actor()}
		if err := body(r); err != nil {
			return err
		}
		moved = r.newPos
		if in.running != "" {
			r.ops = append(r.ops, substrate.Op{Scope: scopeLoomLive, Key: in.running, Delete: true})
		}
		line := r.trace
		if line == "" {
			line = c.Line
		}
		if r.p.Kind == substrate.KindAgent {
			r.appendEntry(r.p.AgentID, tracePrefix+r.uniq(), map[string]any{"line": line, "verb": c.Verb, "at": r.now})
		}
		audit, err := tx.Apply(r.ops, "loom")
		if err != nil {
			return l.inLoomWords(roomID, c, err)
		}
		for _, a := range audit {
			// Operational memory is the agent's alone: the audit log
			// records that it changed, not what it holds.
			if sc, _ := a["scope"].(string); !isLoomScope(sc) {
				delete(a, "value")
			}
		}
		tx.Audit(map[string]any{"kind": "loom", "command": c.Verb, "writes": audit})
		return nil
	})
	if err == nil && pos == nil && moved != nil && !in.collect {
		// A node the command created is written at commit, so its
		// position (the result's first line) is read once it exists.
		perr := l.svc.ReadRoom(ctx, p, roomID, func(tx *substrate.RoomTx) error {
			r := &loomRun{l: l, tx: tx, p: p, room: roomID, now: tx.Now(), actor: p.Actor()}
			t, err := r.tree(moved.Tree)
			if err != nil {
				return err
			}
			n, err := r.node(t, strconv.FormatInt(moved.Node, 10))
			if err != nil {
				return err
			}
			pos, err = r.position(t, n)
			return err
		})
		if perr != nil {
			// The command committed: its result stands without the line.
			l.log.Warn("loom position after a write unread", "room", roomID, "err", perr)
		}
	}
	return st, pos, onboard, err
}

// inLoomWords is a refusal of the core's storage (which names scopes and
// keys: _loom.2/n:15) in the words of the person or model who ran c: what
// was too big or full, or, for records that disagree, a fault of sync's
// own, logged. Nothing of the command was written either way.
func (l *Loom) inLoomWords(roomID string, c *Command, err error) error {
	e := errs.From(err)
	switch e.Code {
	case errs.ValueTooLarge:
		return loomErr(errs.ValueTooLarge, "%s was not saved: its text is too long for one entry of this room's loom", c.Verb).
			WithHint("shorten it, or split it over several nodes (→ add, then → add again), and send it again")
	case errs.ScopeFull:
		return loomErr(errs.ScopeFull, "%s was not saved: this room's loom holds as many records as its limits allow", c.Verb).
			WithHint("ask the room's owner to raise the room's limits, or remove bookmarks and documents no longer needed")
	case errs.KeyExists, errs.AppendOnly, errs.VersionConflict, errs.NotMergeable:
		l.log.Error("loom records disagree", "room", roomID, "verb", c.Verb, "err", err)
		return loomErr(errs.Internal, "%s was not saved: the loom's records disagree, a fault in sync and not in the command; nothing was written", c.Verb).
			WithHint("send it again; if it fails again, tell the room's owner")
	}
	return err
}

// traceError appends a failed command to the agent's trace.
func (l *Loom) traceError(ctx context.Context, p *substrate.Principal, roomID, verb, line string, err error) {
	if p == nil || p.Kind != substrate.KindAgent {
		return
	}
	msg := errs.From(err).Message
	_, terr := l.svc.MutateRoom(ctx, p, roomID, func(tx *substrate.RoomTx) error {
		r := &loomRun{l: l, tx: tx, now: tx.Now()}
		raw, _ := json.Marshal(map[string]any{"line": line, "verb": verb, "error": msg, "at": tx.Now()})
		audit, err := tx.Apply([]substrate.Op{{Scope: p.AgentID, Key: tracePrefix + r.uniq(), Value: raw, Append: true}}, "loom")
		for _, a := range audit {
			delete(a, "value")
		}
		tx.Audit(map[string]any{"kind": "loom", "command": "error", "writes": audit})
		return err
	})
	if terr != nil {
		l.log.Warn("loom trace of an error failed", "room", roomID, "err", terr)
	}
}
