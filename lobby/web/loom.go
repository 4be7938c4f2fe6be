package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// The loom page (seed 002): the room's loom as a person sees and works it.
// It reads with loom.Snapshot (typed data from the entries the → commands
// read and write, with read-only authority: a page read never moves anyone
// nor writes a trace) and acts through the same → commands the sync_loom
// tool runs (loom.Run), as the person's own agent, so people and models
// share one tree, one set of permissions, one turn-taking and one presence.
//
// The URL names the tree and the node (?tree=T&node=N); every form carries
// both, and every command it composes names them (tree:T), so a form acts
// on the node on screen whatever the person's agent did elsewhere since.

// loomFoldAbove is how many tree items the page draws before it folds:
// past it, subtrees off the path to the node in view are drawn closed,
// their nodes counted, not sent (opening one opens it as the node in view).
const loomFoldAbove = 200

// loomLabel is how much of a node's content its tree item shows.
const loomLabel = 90

// loomQuery is what the URL (or a form) names.
type loomQuery struct {
	Tree, Node int64
	As         string // "prose" or "" (nodes)
	Doc        string
}

func parseLoomQuery(get func(string) string) (loomQuery, error) {
	var q loomQuery
	for _, f := range []struct {
		name string
		to   *int64
	}{{"tree", &q.Tree}, {"node", &q.Node}} {
		v := strings.TrimSpace(get(f.name))
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return q, errs.New(errs.InvalidField, "%s %q is not a %s number", f.name, v, f.name).WithHint("give a %s's number, as the page shows it", f.name).With("field", f.name)
		}
		*f.to = n
	}
	switch as := get("as"); as {
	case "", "nodes":
	case "prose":
		q.As = as
	default:
		return q, errs.New(errs.InvalidField, "as %q is not a way to read a branch", as).WithHint("use as=prose or as=nodes").With("field", "as")
	}
	q.Doc = get("doc")
	if err := validDoc(q.Doc); err != nil {
		return q, err
	}
	return q, nil
}

// validDoc refuses a document name a command cannot carry.
func validDoc(doc string) error {
	if strings.ContainsAny(doc, "\"\\\n\r”") || len(doc) > 200 {
		return errs.New(errs.InvalidField, "document name %q cannot be read from here", doc).WithHint("use a name without quotes, backslashes or line breaks, up to 200 characters").With("field", "doc")
	}
	return nil
}

func (wb *Web) loomPage(w http.ResponseWriter, r *http.Request) {
	roomID := r.PathValue("room")
	p, who, access, viewToken, ok := wb.reader(w, r, roomID)
	if !ok {
		return
	}
	q, err := parseLoomQuery(r.URL.Query().Get)
	if err != nil {
		wb.fail(w, r, err)
		return
	}
	_, username, _ := wb.opt.SignedIn(r)
	me := ""
	if viewToken == "" {
		me = username + ":web"
	}
	wb.renderLoom(w, r, http.StatusOK, loomPageIn{room: roomID, reader: p, who: who, access: access, viewToken: viewToken, me: me, q: q})
}

// loomPageIn is what a loom page is drawn from.
type loomPageIn struct {
	room      string
	reader    *substrate.Principal // the person's (or view link's) authority
	who       string
	access    string // the person's role in the room; "" for a view link
	viewToken string
	me        string // the person's agent id
	q         loomQuery
	commands  string
	ran       *loom.Result
	ranErr    *errs.Error
}

// renderLoom reads the loom and draws it.
func (wb *Web) renderLoom(w http.ResponseWriter, r *http.Request, status int, in loomPageIn) {
	ctx := r.Context()
	lm := loom.Of(wb.opt.Substrate)
	agent := in.me
	v, err := lm.Snapshot(ctx, substrate.ReadOnlyOf(in.reader), in.room, loom.SnapshotQuery{Tree: in.q.Tree, Node: in.q.Node, Agent: agent})
	if err != nil && ctx.Err() != nil {
		return // the browser left (a live refresh overtaken, a tab closed): nobody to answer
	}
	if err != nil {
		e := errs.From(err)
		if e.Code == errs.Internal || e.Code == errs.RoomNotFound || e.Code == errs.Unavailable {
			wb.fail(w, r, err)
			return
		}
		// A tree or node that does not exist: the page says so, with the
		// trees it has, in the error's status.
		if status == http.StatusOK {
			status = e.Code.Status()
		}
		if v, err = lm.Snapshot(ctx, substrate.ReadOnlyOf(in.reader), in.room, loom.SnapshotQuery{Agent: agent}); err != nil {
			wb.fail(w, r, err)
			return
		}
		if in.ranErr == nil {
			in.ranErr = e
		}
	}
	d := wb.loomData(ctx, in, v)
	if r.URL.Query().Get("part") == "main" {
		wb.renderPart(w, r, status, "loommain", d, in.viewToken != "")
		return
	}
	wb.render(w, r, status, "loom", d, in.viewToken != "")
}

// renderPart writes one template of a page (what its script swaps in),
// with the page's headers.
func (wb *Web) renderPart(w http.ResponseWriter, r *http.Request, status int, name string, data map[string]any, tokenInURL bool) {
	wb.render(w, r, status, name, data, tokenInURL)
}

// can is one thing the person may or may not do, with why not.
type can struct {
	OK  bool
	Why string
}

// treeItem is a node as the tree draws it.
type treeItem struct {
	N        loom.Node
	Label    string
	Marks    loom.NodeMarks
	Kids     []*treeItem
	Folded   int // descendants not drawn (the item is closed)
	Selected bool
	OnPath   bool
	Level    int
	SetSize  int
	Pos      int
	Starts   bool // the node starts a branch (the root, or a k>1 child)
	Here     []loom.Presence
	Held     *loom.Lease
	BM       []string
	Href     string
}

func (wb *Web) loomData(ctx context.Context, in loomPageIn, v *loom.View) map[string]any {
	canAct := in.viewToken == "" && canAct(in.access)
	d := map[string]any{"RoomID": in.room, "Who": in.who, "ViewToken": in.viewToken, "CanAct": canAct, "Me": in.me,
		"Q": in.q, "Commands": in.commands, "V": v, "Perms": v.Perms, "AllPerms": loom.Permissions,
		"Clip": func(s string, n int) string { return clipRunes(s, n) }}
	var tree, node int64
	if v.Tree != nil && v.Node != nil {
		tree, node = v.Tree.ID, v.Node.ID
	}
	d["Href"] = func(id int64) string { return loomURL(in.room, in.viewToken, tree, id, in.q.As) }
	d["DocHref"] = func(name string) string {
		u := loomURL(in.room, in.viewToken, tree, node, in.q.As)
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		return u + sep + "doc=" + url.QueryEscape(name)
	}
	owner := in.access == "owner"
	wb.loomAbilities(ctx, d, in, canAct, owner)
	aware := slices.Contains(v.Perms, loom.PermAware)
	d["Aware"] = aware
	d["Owner"] = owner && canAct
	if in.ran != nil {
		d["Ran"] = in.ran.Steps
	}
	if in.ranErr != nil {
		d["RanErr"] = in.ranErr.Message + hintOf(in.ranErr)
		d["RanCode"] = string(in.ranErr.Code)
	}
	if aware {
		wb.loomAware(ctx, d, in, v, owner && canAct)
	}
	if owner && canAct {
		d["Agents"] = wb.loomAgents(ctx, in)
		d["Thoughts"] = wb.loomThoughts(ctx, in, v)
	}
	if in.q.Doc != "" {
		found := false
		for _, doc := range v.Docs {
			if doc.Name == in.q.Doc {
				d["DocOpen"], found = doc, true
			}
		}
		if !found {
			d["DocMissing"] = in.q.Doc
		}
	}
	if v.Tree == nil || v.Node == nil {
		d["URL"] = loomURL(in.room, in.viewToken, 0, 0, "")
		return d
	}
	loomNodeData(d, in, v, canAct)
	return d
}

// loomAbilities puts into d what the person may do (CanWrite and the
// like, each with why not): the loom's own decision for their agent.
func (wb *Web) loomAbilities(ctx context.Context, d map[string]any, in loomPageIn, canAct, owner bool) {
	writer := []string{}
	if canAct {
		if owner {
			writer = loom.Permissions
		} else {
			writer = wb.personLoomPerms(ctx, in)
		}
	}
	reason := func(perm string) can {
		switch {
		case in.viewToken != "":
			return can{Why: "a view link reads only"}
		case !canAct:
			return can{Why: "your role in this room (" + in.access + ") reads but does not act"}
		case !slices.Contains(writer, perm):
			return can{Why: perm + " is not enabled for you; ask the room's owner to allow it"}
		}
		return can{OK: true}
	}
	d["CanWrite"], d["CanGenerate"], d["CanDocRead"], d["CanDocWrite"] = reason(loom.PermWrite), reason(loom.PermGenerate), reason(loom.PermDocRead), reason(loom.PermDocWrite)
}

// loomAware puts into d what a person aware of the loom sees of others:
// its collaborators and the generations running. authority is room
// authority acting on the page.
func (wb *Web) loomAware(ctx context.Context, d map[string]any, in loomPageIn, v *loom.View, authority bool) {
	d["Collabs"] = wb.loomCollabs(ctx, in)
	// → stop: room authority or a person with loom_write (the loom
	// decides; the page offers it to those it would allow).
	d["CanStop"] = authority || d["CanWrite"].(can).OK
	gens := map[int64]loom.Generation{}
	for _, g := range v.Generating {
		gens[g.Node] = g
	}
	d["Generating"] = v.Generating
	if v.Node != nil {
		if g, ok := gens[v.Node.ID]; ok {
			d["GeneratingHere"] = g
		}
	}
}

// loomNodeData puts into d the node in view: its links, the tree drawn
// around it, its neighbours, and who holds the turn where it would grow.
func loomNodeData(d map[string]any, in loomPageIn, v *loom.View, canAct bool) {
	t, n := v.Tree.ID, v.Node.ID
	d["URL"] = loomURL(in.room, in.viewToken, t, n, in.q.As)
	d["ProseURL"] = loomURL(in.room, in.viewToken, t, n, "prose")
	d["NodesURL"] = loomURL(in.room, in.viewToken, t, n, "")
	d["Tree"], d["Items"] = v.Tree, loomTree(in, v)
	// The siblings around the node in view, for Alt+↑/↓ and the node's
	// own navigation.
	for i, s := range v.Siblings {
		if s.ID == n {
			if i > 0 {
				d["PrevSib"] = v.Siblings[i-1].ID
			}
			if i+1 < len(v.Siblings) {
				d["NextSib"] = v.Siblings[i+1].ID
			}
			d["SibPos"] = i + 1
		}
	}
	if len(v.Children) > 0 {
		d["FirstChild"] = v.Children[0].ID
	}
	for _, l := range v.Leases {
		if l.Holder == in.me && canAct {
			d["HoldsTurn"] = true
		}
	}
	// Where a new child of this node lands, and whether that branch is
	// someone else's turn: the page says so and the loom refuses it.
	next := loom.NextBranch(v.Node, len(v.Children))
	d["NextBranch"] = next
	if h := v.Held(next, in.me); h != nil {
		d["HeldHere"] = h
	}
	if h := v.Held(v.Node.Branch, in.me); h != nil {
		d["HeldNode"] = h
	}
	for _, g := range v.Requests {
		if g.Node == n {
			d["PendingHere"] = fmt.Sprintf("Continuation g%d of this node is pending (%d of %d written), asked by %s.", g.ID, g.Done, g.N, g.By)
		}
	}
	// Buffer mode: the path as prose.
	if in.q.As == "prose" {
		words := 0
		for _, x := range v.Path {
			words += len(strings.Fields(x.Content))
		}
		d["Words"] = words
	}
}

// personLoomPerms is what the loom lets the person's agent do, read
// without creating the agent (a page read writes nothing): an agent not yet
// made has the defaults.
func (wb *Web) personLoomPerms(ctx context.Context, in loomPageIn) []string {
	if in.reader == nil || in.reader.Kind != substrate.KindAgent {
		return loom.DefaultPerms()
	}
	perms, _, err := loom.Of(wb.opt.Substrate).PermsOf(ctx, in.reader, in.room)
	if err != nil {
		return nil
	}
	return perms
}

// collabRow is a collaborator that runs itself, as the page shows it.
type collabRow struct {
	loom.CollabRecord
	Running bool
	State   string // what it is doing, in words
}

// loomCollabs are the room's collaborators with their calls and token
// spend against their budget (the loom lets loom_aware readers see them).
func (wb *Web) loomCollabs(ctx context.Context, in loomPageIn) []collabRow {
	recs, err := loom.Of(wb.opt.Substrate).CollaboratorUsage(ctx, substrate.ReadOnlyOf(in.reader), in.room)
	if err != nil {
		return nil
	}
	out := make([]collabRow, 0, len(recs))
	for _, c := range recs {
		row := collabRow{CollabRecord: c, Running: c.State != "stopped"}
		switch c.State {
		case "stopped":
			row.State = "stopped"
			if c.Reason != "" {
				row.State = c.Reason
			}
		case "calling":
			row.State = "running: calling its model"
		case "waiting":
			row.State = "waiting for its turn or a change on branch " + c.Branch
		default:
			row.State = c.State
		}
		if row.Running && c.Stop != "" {
			row.State = "stopping (asked by " + c.Stop + "); " + row.State
		}
		out = append(out, row)
	}
	return out
}

// loomAgent is a room agent with its loom permissions, for the owner.
type loomAgent struct {
	ID    string
	Name  string
	Perms []string
	Set   bool // room authority set them (else the defaults)
}

func (wb *Web) loomAgents(ctx context.Context, in loomPageIn) []loomAgent {
	agents, err := wb.opt.Substrate.ListAgents(ctx, in.reader, in.room)
	if err != nil {
		return nil
	}
	perms, err := loom.Of(wb.opt.Substrate).AgentPerms(ctx, in.reader, in.room)
	if err != nil {
		return nil
	}
	var out []loomAgent
	for _, a := range agents {
		la := loomAgent{ID: a.ID, Name: a.Name, Perms: loom.DefaultPerms()}
		if ps, ok := perms[a.ID]; ok {
			la.Perms, la.Set = ps, true
		}
		if slices.Contains(a.Grants, "*") {
			la.Perms, la.Set = loom.Permissions, true
		}
		out = append(out, la)
	}
	return out
}

// loomThoughts are the latest thoughts of the models active in the tree,
// for the room's owner (the loom lets only room authority and the thinker
// read them): shown folded, as seed 002 asks.
func (wb *Web) loomThoughts(ctx context.Context, in loomPageIn, v *loom.View) []loom.Thought {
	var out []loom.Thought
	for _, pr := range v.Presence {
		if pr.Kind != "model" || strings.HasPrefix(pr.Actor, "_") {
			continue
		}
		ts, err := loom.Of(wb.opt.Substrate).Thoughts(ctx, in.reader, in.room, pr.Actor, 5)
		if err != nil {
			continue
		}
		out = append(out, ts...)
	}
	return out
}

func loomURL(room, view string, tree, node int64, as string) string {
	q := []string{}
	if tree > 0 {
		q = append(q, "tree="+strconv.FormatInt(tree, 10))
	}
	if node > 0 {
		q = append(q, "node="+strconv.FormatInt(node, 10))
	}
	if as != "" {
		q = append(q, "as="+as)
	}
	if view != "" {
		q = append(q, "view="+view)
	}
	u := "/web/rooms/" + room + "/loom"
	if len(q) > 0 {
		u += "?" + strings.Join(q, "&")
	}
	return u
}

// loomTree builds the tree's items: every node while the tree is small;
// past loomFoldAbove, the path to the node in view open and, breadth
// first, as much else as fits, the rest closed with a count.
func loomTree(in loomPageIn, v *loom.View) []*treeItem {
	sh := shapeOf(v)
	dr := newTreeDrawer(in, v)
	root, ok := sh.byID[1]
	if !ok {
		return nil
	}
	drawn := 1
	top := dr.item(root, 1, 1, 1)
	queue := []*treeItem{top}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		ks := sh.kids[it.N.ID]
		if len(ks) == 0 {
			continue
		}
		if !it.OnPath && drawn+len(ks) > loomFoldAbove {
			it.Folded = sh.size(it.N.ID)
			continue
		}
		drawn += len(ks)
		for i, k := range ks {
			c := dr.item(sh.byID[k], it.Level+1, i+1, len(ks))
			it.Kids = append(it.Kids, c)
			queue = append(queue, c)
		}
	}
	return []*treeItem{top}
}

// treeShape is the tree as the view read it: its nodes by id and each
// node's children in order.
type treeShape struct {
	byID map[int64]*loom.Node
	kids map[int64][]int64
	memo map[int64]int // size's
}

func shapeOf(v *loom.View) *treeShape {
	byID := make(map[int64]*loom.Node, len(v.Nodes))
	kids := map[int64][]int64{}
	for i := range v.Nodes {
		n := &v.Nodes[i]
		byID[n.ID] = n
		if n.Parent > 0 {
			kids[n.Parent] = append(kids[n.Parent], n.ID)
		}
	}
	// Children in their order (k), which is id order but for edits
	// racing: sort by K.
	for p, ks := range kids {
		slices.SortFunc(ks, func(a, b int64) int { return byID[a].K - byID[b].K })
		kids[p] = ks
	}
	// The node in view and its path, even beyond what was read.
	for _, x := range append(slices.Clone(v.Path), v.Children...) {
		if _, ok := byID[x.ID]; !ok {
			x := x
			byID[x.ID] = &x
			if x.Parent > 0 && !slices.Contains(kids[x.Parent], x.ID) {
				kids[x.Parent] = append(kids[x.Parent], x.ID)
			}
		}
	}
	return &treeShape{byID: byID, kids: kids, memo: map[int64]int{}}
}

// size counts the descendants of id that were read.
func (sh *treeShape) size(id int64) int {
	if s, ok := sh.memo[id]; ok {
		return s
	}
	s := 0
	for _, k := range sh.kids[id] {
		s += 1 + sh.size(k)
	}
	sh.memo[id] = s
	return s
}

// treeDrawer draws a tree's items: what marks each node (on the path,
// who is there, bookmarks, a held turn).
type treeDrawer struct {
	in     loomPageIn
	v      *loom.View
	onPath map[int64]bool
	here   map[int64][]loom.Presence
	bms    map[int64][]string
	held   map[string]*loom.Lease
}

func newTreeDrawer(in loomPageIn, v *loom.View) *treeDrawer {
	dr := &treeDrawer{in: in, v: v, onPath: map[int64]bool{}, here: map[int64][]loom.Presence{},
		bms: map[int64][]string{}, held: map[string]*loom.Lease{}}
	for _, x := range v.Path {
		dr.onPath[x.ID] = true
	}
	for _, pr := range v.Presence {
		dr.here[pr.Node] = append(dr.here[pr.Node], pr)
	}
	for _, b := range v.Bookmarks {
		dr.bms[b.Node] = append(dr.bms[b.Node], b.Label)
	}
	for i, l := range v.Leases {
		dr.held[l.Branch] = &v.Leases[i]
	}
	return dr
}

func (dr *treeDrawer) item(n *loom.Node, level, pos, setSize int) *treeItem {
	in, v := dr.in, dr.v
	it := &treeItem{N: *n, Label: clipRunes(strings.Join(strings.Fields(n.Content), " "), loomLabel), Marks: v.Marks[n.ID],
		Selected: n.ID == v.Node.ID, OnPath: dr.onPath[n.ID], Level: level, Pos: pos, SetSize: setSize,
		Starts: n.Parent == 0 || n.K > 1, Here: dr.here[n.ID], BM: dr.bms[n.ID]}
	it.Href = loomURL(in.room, in.viewToken, v.Tree.ID, n.ID, in.q.As)
	if it.Starts {
		if l, ok := dr.held[n.Branch]; ok {
			it.Held = l
		}
	}
	return it
}

func clipRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}
