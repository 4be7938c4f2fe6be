package loom

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate"
)

// The intermediary for models connected over MCP (seed 002 §Context
// Assembly). sync does not own such a model's conversation, so every
// result carries what the seed's assembly would put around it, in the
// seed's order: the operational memory block (pins, recalled stashes, the
// last trace lines, the caller's turn and pending generations) within
// Options.MemoryTokens, the ambient line, a line saying what the previous
// result showed that has now faded, the results (each over
// Options.ResultTokens summarised, never cut silently), and the result's
// marker ⟨rN⟩, which the next result names when it says what faded.
//
// State, in the agent's own scope: loom:shown (the last marker, what it
// showed, the nodes it showed) and loom:recalled (stashes recalled into
// the memory block until dropped).

// tokensOf estimates the tokens a model reads for s: about 4 bytes each
// (the arrows and brackets are 3 bytes, about one token).
func tokensOf(s string) int { return (len(s) + 3) / 4 }

// Tokens is the loom's estimate of the tokens a model reads for s (about
// 4 bytes each), which every budget of the intermediary counts with.
func Tokens(s string) int { return tokensOf(s) }

// ModelParts are the pieces of ForModel's text, in the order it joins
// them: a collaborator (substrate/loom/collab) assembles its own calls
// from them, so both kinds of model get one set of memory rules.
type ModelParts struct {
	// Onboard is the orientation of an agent's first command.
	Onboard string
	// Memory is the operational memory block (⟨memory⟩ …).
	Memory string
	// Ambient is the position line.
	Ambient string
	// Faded names what the previous result showed ("⟨rN faded: …⟩").
	Faded string
	// Body is each command with its result, fitted to the budget.
	Body string
	// Steps are the results in Body, one per command (Result.Steps'
	// order), each fitted to the budget.
	Steps []string
	// Marker ends the result ("⟨rN: shown once …⟩").
	Marker string
}

type shownRec struct {
	N     int64    `json:"n"`
	What  []string `json:"what"`
	Tree  int64    `json:"tree,omitempty"`
	Nodes []int64  `json:"nodes,omitempty"`
}

// ForModel runs text as Run does and returns the result a model reads:
// Result.Text is the assembled context above. Memory belongs to agents;
// another credential gets the ambient line and the fitted results.
func (l *Loom) ForModel(ctx context.Context, p *substrate.Principal, roomID, text string) (*Result, error) {
	res, err := l.Run(ctx, p, roomID, text)
	if err != nil {
		return nil, err
	}
	var body, fitted []string
	for _, st := range res.Steps {
		fit := l.fitResult(ctx, st)
		fitted = append(fitted, fit)
		body = append(body, "→ "+st.Command+"\n"+fit)
	}
	mem, faded, marker := "", "", ""
	if p.Kind == substrate.KindAgent && !p.ReadOnly() {
		if mem, faded, marker, err = l.memoryFor(ctx, p, roomID, text, res); err != nil {
			// The block is advice: the commands ran; say the block is
			// missing rather than fail the call.
			l.log.Warn("loom memory block failed", "room", roomID, "err", err)
			mem = "(operational memory unavailable this turn: → memory shows it)"
		}
	}
	res.Parts = &ModelParts{Onboard: res.onboard, Memory: mem, Faded: faded, Body: strings.Join(body, "\n\n"), Steps: fitted, Marker: marker}
	if res.Position != nil {
		res.Parts.Ambient = res.Position.Ambient
	}
	var out []string
	if res.onboard != "" {
		out = append(out, res.onboard)
	}
	if mem != "" {
		out = append(out, mem)
	}
	head := ""
	if res.Position != nil {
		head = res.Position.Ambient
	}
	if faded != "" {
		head = strings.TrimSpace(head + "\n" + faded)
	}
	if head != "" {
		out = append(out, head)
	}
	out = append(out, strings.Join(body, "\n\n"))
	if marker != "" {
		out = append(out, marker)
	}
	res.Text = strings.Join(out, "\n\n")
	return res, nil
}

// fitResult is a step's text within ResultTokens: a larger one is
// summarised (by the generator when configured), with the command that
// shows the text. A command that asked for full gets what it asked for.
func (l *Loom) fitResult(ctx context.Context, st Step) string {
	if tokensOf(st.Text) <= l.opt.ResultTokens || !st.OK || strings.Contains(" "+st.Command+" ", " full ") {
		return st.Text
	}
	full := st.Command + " full"
	if st.Verb == "read" {
		full = strings.Replace(st.Command, " summary", "", 1) + " lines:1-40"
	}
	return fmt.Sprintf("(a result of ~%d tokens, over the %d-token budget, summarised; the text: → %s)\n%s",
		tokensOf(st.Text), l.opt.ResultTokens, full, l.Summarise(ctx, st.Text))
}

// named finds node references in a model's prose (lines that are not
// commands): "#47", "node 47".
var named = regexp.MustCompile(`(?i)(?:#|\bnode\s+)(\d+)\b`)

// quoted finds quotations in a model's prose.
var quoted = regexp.MustCompile(`"([^"]{20,})"|“([^”]{20,})”`)

// Prose is a model's text without its command lines and think blocks:
// what of its words a conversation keeps (seed 002: command lines are
// executed, not persisted in the conversation).
func Prose(text string) string { return prose(text) }

// CommandLines counts the lines of text that start with an arrow.
func CommandLines(text string) int {
	n := 0
	for _, l := range strings.Split(text, "\n") {
		if _, ok := arrowLine(l); ok {
			n++
		}
	}
	return n
}

// prose is text without its command lines and think blocks.
func prose(text string) string {
	var out []string
	inThink := false
	for _, l := range strings.Split(text, "\n") {
		t := strings.TrimSpace(l)
		if inThink {
			if t == "←" || t == "<-" || strings.HasSuffix(t, "←") {
				inThink = false
			}
			continue
		}
		if c, ok := arrowLine(t); ok {
			if firstWord(c) == "think" && !strings.HasSuffix(c, "←") {
				inThink = true
			}
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// memoryFor writes the auto-pins and the marker of this result and
// returns the memory block, the faded line and the marker.
func (l *Loom) memoryFor(ctx context.Context, p *substrate.Principal, roomID, text string, res *Result) (mem, faded, marker string, err error) {
	_, err = l.svc.MutateRoom(ctx, p, roomID, func(tx *substrate.RoomTx) error {
		r := &loomRun{l: l, tx: tx, p: tx.Principal(), room: roomID, now: tx.Now(), actor: tx.Actor()}
		if err := r.loadCaller(); err != nil {
			return err
		}
		var prev shownRec
		if _, err := r.get(r.p.AgentID, "loom:shown", &prev); err != nil {
			return err
		}
		auto, pins, err := r.autoPin(prev, prose(text))
		if err != nil {
			return err
		}
		if prev.N > 0 && len(prev.What) > 0 {
			faded = fmt.Sprintf("⟨r%d faded: %s — run it again to see it; → pin N keeps a node⟩", prev.N, strings.Join(prev.What, " · "))
		}
		cur := shownRec{N: prev.N + 1}
		for _, st := range res.Steps {
			// A thought's command line holds the thought, which only the
			// thinker and room authority read (loom:think:…): never copy it
			// into another key.
			if st.OK && st.Text != "" && !strings.HasPrefix(st.Text, "✓") && st.Verb != "think" {
				cur.What = append(cur.What, clip(st.Command, 40, ""))
			}
			for _, n := range st.Nodes {
				if !slices.Contains(cur.Nodes, n.ID) && len(cur.Nodes) < 20 {
					cur.Nodes = append(cur.Nodes, n.ID)
				}
			}
		}
		if res.Position != nil {
			cur.Tree = res.Position.Tree
		}
		r.put(r.p.AgentID, "loom:shown", cur)
		marker = fmt.Sprintf("⟨r%d: shown once; the next result says it faded⟩", cur.N)
		if mem, err = r.block(auto, pins); err != nil {
			return err
		}
		audit, err := tx.Apply(r.ops, "loom")
		if err != nil {
			return err
		}
		for _, a := range audit {
			delete(a, "value")
		}
		tx.Audit(map[string]any{"kind": "loom", "command": "memory", "writes": audit})
		return nil
	})
	return mem, faded, marker, err
}

// autoPin pins the nodes the model's prose names (#47, node 47) or quotes
// (20 characters or more of a node's text), among those the previous
// result showed: content a model refers to stays in its memory (seed 002).
func (r *loomRun) autoPin(prev shownRec, prose string) (added []string, pins []loomPin, err error) {
	if prev.Tree == 0 || len(prev.Nodes) == 0 || strings.TrimSpace(prose) == "" {
		return nil, nil, nil
	}
	want := map[int64]bool{}
	for _, m := range named.FindAllStringSubmatch(prose, -1) {
		if id, err := strconv.ParseInt(m[1], 10, 64); err == nil && slices.Contains(prev.Nodes, id) {
			want[id] = true
		}
	}
	if qs := quoted.FindAllStringSubmatch(prose, -1); len(qs) > 0 {
		keys := make([]string, len(prev.Nodes))
		for i, id := range prev.Nodes {
			keys[i] = "n:" + strconv.FormatInt(id, 10)
		}
		got, err := r.getMany(treeScope(prev.Tree), keys)
		if err != nil {
			return nil, nil, err
		}
		for i, k := range keys {
			var n Node
			if json.Unmarshal(got[k], &n) != nil {
				continue
			}
			for _, q := range qs {
				if s := strings.TrimSpace(q[1] + q[2]); strings.Contains(n.Content, s) {
					want[prev.Nodes[i]] = true
				}
			}
		}
	}
	if len(want) == 0 {
		return nil, nil, nil
	}
	if pins, err = r.pins(); err != nil {
		return nil, nil, err
	}
	for _, id := range prev.Nodes {
		p := loomPin{Ref: strconv.FormatInt(id, 10), Tree: prev.Tree}
		if want[id] && !slices.Contains(pins, p) {
			pins = append(pins, p)
			added = append(added, p.Ref)
		}
	}
	if len(added) > 0 {
		r.put(r.p.AgentID, "loom:pins", map[string]any{"items": pins})
	}
	return added, pins, nil
}

// markRecalled adds label to (on) or removes it from the stashes recalled
// into the memory block; false when removing one that was not there.
func (r *loomRun) markRecalled(label string, on bool) bool {
	var rec struct {
		Labels []string `json:"labels"`
	}
	if _, err := r.get(r.p.AgentID, "loom:recalled", &rec); err != nil {
		r.l.log.Warn("loom: reading recalled stashes", "err", err)
		return false
	}
	i := slices.Index(rec.Labels, label)
	switch {
	case on && i < 0:
		rec.Labels = append(rec.Labels, label)
	case !on && i >= 0:
		rec.Labels = slices.Delete(rec.Labels, i, i+1)
	default:
		return on
	}
	r.put(r.p.AgentID, "loom:recalled", rec)
	return true
}

// memItem is one entry of the memory block: its full line, a folded
// line (what stays when pruned) and how to bring the rest back.
type memItem struct {
	full, folded, recall string
}

// block is the operational memory block within MemoryTokens. Over the
// budget it prunes in the seed's order (the trace first, keeping the
// newest line, then recalled stashes' and pins' content, then whole
// items) and says what it dropped and how to recall it.
func (r *loomRun) block(auto []string, ps []loomPin) (string, error) {
	var m memBlock
	var err error
	if m.pins, err = r.memPins(ps); err != nil {
		return "", err
	}
	if m.recalled, err = r.memRecalled(); err != nil {
		return "", err
	}
	lines, err := r.actionLines(3)
	if err != nil {
		return "", err
	}
	for _, tl := range lines {
		m.trace = append(m.trace, memItem{full: "did " + clip(tl.String(), 120, ""), folded: "trace line", recall: "→ memory trace"})
	}
	if m.turn, err = r.memTurn(); err != nil {
		return "", err
	}
	m.head = "⟨memory⟩"
	if len(auto) > 0 {
		m.head += fmt.Sprintf(" · pinned %s automatically (you named or quoted it; → drop N unpins)", strings.Join(auto, ", "))
	}
	m.tokens = r.l.opt.MemoryTokens
	return m.fit(), nil
}

// memPins are the memory's pins (the actor's own when ps is nil), with
// their nodes' text.
func (r *loomRun) memPins(ps []loomPin) ([]memItem, error) {
	var err error
	if ps == nil {
		if ps, err = r.pins(); err != nil {
			return nil, err
		}
	}
	var pins []memItem
	for _, p := range ps {
		it := memItem{full: "pin " + p.Ref, folded: "pin " + p.Ref}
		if p.Tree > 0 {
			var n Node
			if ok, err := r.get(treeScope(p.Tree), "n:"+p.Ref, &n); err != nil {
				return nil, err
			} else if ok {
				it.full = fmt.Sprintf("pin %s: %s", p.Ref, clip(strings.ReplaceAll(n.Content, "\n", " "), 240, "→ view "+p.Ref))
				it.recall = "→ view " + p.Ref
			}
		}
		pins = append(pins, it)
	}
	return pins, nil
}

// memRecalled are the stashes the actor recalled, with their text.
func (r *loomRun) memRecalled() ([]memItem, error) {
	var rec struct {
		Labels []string `json:"labels"`
	}
	if _, err := r.get(r.p.AgentID, "loom:recalled", &rec); err != nil {
		return nil, err
	}
	var recalled []memItem
	for _, lb := range rec.Labels {
		var s struct {
			Content string `json:"content"`
		}
		if ok, err := r.get(r.p.AgentID, "loom:stash:"+lb, &s); err != nil {
			return nil, err
		} else if ok {
			recalled = append(recalled, memItem{full: fmt.Sprintf("recalled %q: %s", lb, clip(strings.ReplaceAll(s.Content, "\n", " "), 400, fmt.Sprintf("→ recall %q", lb))),
				folded: fmt.Sprintf("recalled %q", lb), recall: fmt.Sprintf("→ recall %q", lb)})
		}
	}
	return recalled, nil
}

// memTurn is the actor's turn: the branches it holds, its pending
// requests, the continuations running.
func (r *loomRun) memTurn() ([]memItem, error) {
	var turn []memItem
	leases, err := r.tx.List(substrate.ListQuery{Scope: scopeLoomLive, Prefix: "lease:"})
	if err != nil {
		return nil, err
	}
	for _, kv := range leases {
		var ls loomLease
		if json.Unmarshal(kv.Value, &ls) == nil && ls.Holder == r.actor && ls.Until.After(r.now) {
			tb := strings.SplitN(strings.TrimPrefix(kv.Key, "lease:"), ":", 2)
			if len(tb) == 2 {
				turn = append(turn, memItem{full: fmt.Sprintf("your turn on branch %s of tree %s for %s (→ yield frees it)", tb[1], tb[0], ls.Until.Sub(r.now).Round(time.Second))})
			}
		}
	}
	gens, err := r.tx.List(substrate.ListQuery{Scope: scopeLoom, Prefix: "gen:"})
	if err != nil {
		return nil, err
	}
	for _, kv := range gens {
		var q loomGenRequest
		if json.Unmarshal(kv.Value, &q) == nil && q.By == r.actor {
			turn = append(turn, memItem{full: fmt.Sprintf("pending g%d: %d of %d continuations of node %d (tree %d)", q.ID, q.Done, q.N, q.Node, q.Tree)})
		}
	}
	running, err := r.generations(0)
	if err != nil {
		return nil, err
	}
	for i, g := range running {
		if i == 3 {
			turn = append(turn, memItem{full: fmt.Sprintf("generating: %d more in the room", len(running)-i)})
			break
		}
		turn = append(turn, memItem{full: generatingLine(g, r.actor, r.now)})
	}
	return turn, nil
}

// memBlock is the memory block's parts, before it is fitted to its budget.
type memBlock struct {
	head                        string
	turn, pins, recalled, trace []memItem
	tokens                      int // the budget (Options.MemoryTokens)
}

// render draws the block, with a notice of what was pruned.
func (m *memBlock) render(pruned []string) string {
	out := []string{m.head}
	for _, group := range [][]memItem{m.turn, m.pins, m.recalled, m.trace} {
		for _, it := range group {
			if it.full != "" {
				out = append(out, "  "+it.full)
			}
		}
	}
	if len(out) == 1 {
		out = append(out, "  (empty: → pin N keeps a node here, → recall \"label\" a stash)")
	}
	if len(pruned) > 0 {
		// The notice itself stays small, or it would take the room
		// of what it pruned: the first few, then a count.
		shown := pruned
		if len(shown) > 3 {
			shown = append(slices.Clone(pruned[:2]), fmt.Sprintf("%d more (→ memory lists everything)", len(pruned)-2))
		}
		out = append(out, "  pruned to fit "+strconv.Itoa(m.tokens)+" tokens: "+strings.Join(shown, "; "))
	}
	return strings.Join(out, "\n")
}

// fit prunes the block until it fits its budget, and draws it.
func (m *memBlock) fit() string {
	trace := m.trace
	var pruned []string
	over := func() bool { return tokensOf(m.render(pruned)) > m.tokens }
	// 1. The trace: keep the newest line.
	if over() && len(trace) > 1 {
		for i := range trace[:len(trace)-1] {
			trace[i].full = ""
		}
		pruned = append(pruned, fmt.Sprintf("%d older trace lines (→ memory trace)", len(trace)-1))
	}
	// 2. Content folded to its label, recalled stashes first.
	for _, group := range [][]memItem{m.recalled, m.pins} {
		for i := len(group) - 1; i >= 0 && over(); i-- {
			if group[i].full != group[i].folded && group[i].recall != "" {
				group[i].full = group[i].folded
				pruned = append(pruned, fmt.Sprintf("%s's text (%s)", group[i].folded, group[i].recall))
			}
		}
	}
	// 3. Whole items, oldest pins and recalls last in the list first.
	for _, group := range [][]memItem{m.trace, m.recalled, m.pins} {
		for i := len(group) - 1; i >= 0 && over(); i-- {
			if group[i].full != "" {
				pruned = append(pruned, group[i].folded+" dropped from view (→ memory lists it)")
				group[i].full = ""
			}
		}
	}
	return m.render(pruned)
}

// Addendum is seed 002's loom-aware addendum for a model's system prompt:
// the environment, how results are assembled, and the commands. MCP offers
// it as the prompt "loom"; sync_loom's description summarises it.
func (l *Loom) Addendum() string {
	return fmt.Sprintf(`You are working in a loom (seed 002): trees of text that people, base models and you write together. This means:

- You are located within a tree of branching text; every sync_loom result says where: ⟨node:47 depth:12 siblings:2 annotations:1 links:1⟩, and who else is active and on which branch
- Commands start with → on their own line; several may go in one call; lines without → are yours and are not kept (a node of the last result you name, #47, or quote is pinned for you)
- Each result starts with your operational memory ⟨memory⟩ (your turn, pending generations, pins, recalled stashes, last actions) within %d tokens and ends with a marker ⟨rN⟩: results are shown once, and the next one says what faded. Pin what you need (→ pin 47), stash what you may need later (→ stash "label" summary-of:12-34), drop the rest; when the block prunes, it says what and how to recall it
- A result over %d tokens comes summarised, with the command that shows it whole
- Writing on a branch takes its turn until %s after your last write (→ yield frees it); → branch from N writes elsewhere without waiting
- → continue asks the base model (its text is marked ›); annotations, instruction nodes and → think … ← stay out of what the base model reads
- Permissions (the room's owner sets them with → permit): loom_aware (look, think), loom_write, loom_generate, doc_read, doc_write

%s`, l.opt.MemoryTokens, l.opt.ResultTokens, l.opt.LeaseTTL, loomHelp(&Command{}))
}
