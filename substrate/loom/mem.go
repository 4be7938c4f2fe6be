package loom

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Operational memory (seed 002 §Memory Tools, §Thinking Tool): every entry
// lives in the agent's own scope. Thoughts (→ think) are read by the
// thinker and room authority only (loomReadRule), even by an agent granted
// the scope.

type loomPin struct {
	Ref  string `json:"ref"`
	Tree int64  `json:"tree,omitempty"`
}

func (r *loomRun) think(c *Command) (string, error) {
	if err := r.agent(); err != nil {
		return "", err
	}
	if err := r.need(PermAware); err != nil {
		return "", err
	}
	text := ""
	if len(c.Texts) > 0 {
		text = c.Texts[0]
	}
	r.appendEntry(r.p.AgentID, thoughtPrefix+r.uniq(), map[string]any{"text": text, "at": r.now})
	r.trace = fmt.Sprintf("think (%d characters)", len([]rune(text)))
	return fmt.Sprintf("· thought kept (%d characters): you and the room's owners read it, other agents never", len([]rune(text))), nil
}

type traceLine struct {
	Key   string
	Line  string    `json:"line"`
	Verb  string    `json:"verb"`
	Error string    `json:"error"`
	At    time.Time `json:"at"`
}

// trace reads the agent's newest n trace lines, oldest first.
func (r *loomRun) traceLines(n int) ([]traceLine, error) {
	kvs, err := r.tx.List(substrate.ListQuery{Scope: r.p.AgentID, Prefix: tracePrefix, Appended: true, Limit: n})
	if err != nil {
		return nil, err
	}
	out := make([]traceLine, 0, len(kvs))
	for _, kv := range kvs {
		tl := traceLine{Key: kv.Key}
		_ = json.Unmarshal(kv.Value, &tl)
		out = append(out, tl)
	}
	slices.Reverse(out)
	return out, nil
}

// actionLines are the newest n trace lines of commands, oldest first: a
// collaborator's own accounting lines (verb collab) are the room's to
// read, not the model's memory.
func (r *loomRun) actionLines(n int) ([]traceLine, error) {
	lines, err := r.traceLines(n + 12)
	if err != nil {
		return nil, err
	}
	lines = slices.DeleteFunc(lines, func(tl traceLine) bool { return tl.Verb == collabVerb })
	return lines[max(0, len(lines)-n):], nil
}

func (tl traceLine) String() string {
	s := tl.At.UTC().Format("15:04:05") + " " + tl.Line
	if tl.Error != "" {
		s += "  " + tl.Error
	}
	return s
}

func (r *loomRun) stashes() (map[string]string, []string, error) {
	kvs, err := r.tx.List(substrate.ListQuery{Scope: r.p.AgentID, Prefix: "loom:stash:"})
	if err != nil {
		return nil, nil, err
	}
	m := map[string]string{}
	var labels []string
	for _, kv := range kvs {
		k, v := kv.Key, kv.Value
		var s struct {
			Content string `json:"content"`
		}
		_ = json.Unmarshal(v, &s)
		l := strings.TrimPrefix(k, "loom:stash:")
		m[l] = s.Content
		labels = append(labels, l)
	}
	slices.Sort(labels)
	return m, labels, nil
}

func (r *loomRun) pins() ([]loomPin, error) {
	var p struct {
		Items []loomPin `json:"items"`
	}
	_, err := r.get(r.p.AgentID, "loom:pins", &p)
	return p.Items, err
}

func (r *loomRun) memoryOp(c *Command) (string, error) {
	switch c.Verb {
	case "pin":
		return r.pin(c)
	case "stash":
		return r.stash(c)
	case "recall":
		return r.recall(c)
	case "drop":
		return r.drop(c)
	}
	return r.memoryList(c)
}

// pin keeps a node or a document's section in the memory block.
func (r *loomRun) pin(c *Command) (string, error) {
	pins, err := r.pins()
	if err != nil {
		return "", err
	}
	var p loomPin
	if d, ok := c.opt("doc"); ok {
		p.Ref = fmt.Sprintf("doc:%q", d)
		if s, ok := c.opt("section"); ok {
			p.Ref += " section:" + s
		}
	} else {
		t, err := r.currentTree(c)
		if err != nil {
			return "", err
		}
		n, err := r.refNode(c, t)
		if err != nil {
			return "", err
		}
		p.Ref, p.Tree = strconv.FormatInt(n.ID, 10), t.ID
	}
	if !slices.Contains(pins, p) {
		pins = append(pins, p)
	}
	r.put(r.p.AgentID, "loom:pins", map[string]any{"items": pins})
	return fmt.Sprintf("✓ pinned %s (%d pins)", p.Ref, len(pins)), nil
}

// stash keeps a text under a label.
func (r *loomRun) stash(c *Command) (string, error) {
	label, err := firstText(c, "a label")
	if err != nil {
		return "", err
	}
	content, stop, err := r.stashContent(c)
	if err != nil || stop {
		return "", err
	}
	if err := substrate.ValidKey("loom:stash:"+label, 256); err != nil {
		return "", err
	}
	r.put(r.p.AgentID, "loom:stash:"+label, map[string]any{"content": content, "at": r.now})
	return fmt.Sprintf("✓ stashed %q (%d characters)", label, len([]rune(content))), nil
}

// stashContent is what a stash keeps: the text given, a node's content
// or a summary of nodes; stop when the summary's generation was stopped.
func (r *loomRun) stashContent(c *Command) (content string, stop bool, err error) {
	if len(c.Texts) > 1 {
		content = c.Texts[1]
	} else if v, ok := c.opt("content-of"); ok {
		t, err := r.currentTree(c)
		if err != nil {
			return "", false, err
		}
		n, err := r.node(t, v)
		if err != nil {
			return "", false, err
		}
		content = n.Content
	} else if v, ok := c.opt("summary-of"); ok {
		t, err := r.currentTree(c)
		if err != nil {
			return "", false, err
		}
		a, b, _ := strings.Cut(v, "-")
		from, _ := strconv.ParseInt(a, 10, 64)
		to, _ := strconv.ParseInt(b, 10, 64)
		if to < from {
			to = from
		}
		keys := []string{}
		for i := from; i <= to && i < from+200; i++ {
			keys = append(keys, "n:"+strconv.FormatInt(i, 10))
		}
		got, err := r.getMany(treeScope(t.ID), keys)
		if err != nil {
			return "", false, err
		}
		var parts []string
		for _, k := range keys {
			var n Node
			if json.Unmarshal(got[k], &n) == nil && n.Edge != "instruction" {
				parts = append(parts, fmt.Sprintf("%d: %s", n.ID, strings.ReplaceAll(n.Content, "\n", " ")))
			}
		}
		sum, stopped := r.summaryOf(strings.Join(parts, "\n"))
		if stopped {
			return "", true, nil
		}
		content = fmt.Sprintf("nodes %d–%d, %s", from, to, sum)
	} else {
		return "", false, loomErr(errs.InvalidField, "stash needs content: a second quoted text, content-of:N or summary-of:A-B").
			WithHint("usage: → %s", loomUsage["stash"]).With("nearest", "stash")
	}
	return content, false, nil
}

// recall brings a stash back into the memory block.
func (r *loomRun) recall(c *Command) (string, error) {
	label, err := firstText(c, "the label")
	if err != nil {
		return "", err
	}
	var s struct {
		Content string `json:"content"`
	}
	ok, err := r.get(r.p.AgentID, "loom:stash:"+label, &s)
	if err != nil {
		return "", err
	}
	if !ok {
		_, labels, err := r.stashes()
		if err != nil {
			return "", err
		}
		return "", loomErr(errs.NotFound, "nothing stashed as %q", label).WithHint("stashed: %s", strings.Join(quoteAll(labels), ", "))
	}
	r.markRecalled(label, true)
	return fmt.Sprintf("recalled %q (in your memory block until → drop recall:%q):\n%s", label, label, s.Content), nil
}

// memoryList is "memory [trace|stashed|errors]": the trace, the stashes,
// the recent errors, or the memory block.
func (r *loomRun) memoryList(c *Command) (string, error) {
	switch {
	case c.has("trace"):
		lines, err := r.traceLines(50)
		if err != nil {
			return "", err
		}
		out := []string{fmt.Sprintf("trace (newest %d; → drop lines:a-b forgets some):", len(lines))}
		for i, l := range lines {
			out = append(out, fmt.Sprintf("%3d %s", i+1, l))
		}
		return strings.Join(out, "\n"), nil
	case c.has("stashed"):
		m, labels, err := r.stashes()
		if err != nil {
			return "", err
		}
		if len(labels) == 0 {
			return "nothing stashed", nil
		}
		out := []string{"stashed:"}
		for _, l := range labels {
			out = append(out, fmt.Sprintf("  %q %s", l, clip(strings.ReplaceAll(m[l], "\n", " "), 60, "")))
		}
		return strings.Join(out, "\n"), nil
	case c.has("errors"):
		lines, err := r.traceLines(200)
		if err != nil {
			return "", err
		}
		out := []string{"errors:"}
		for _, l := range lines {
			if l.Error != "" {
				out = append(out, "  "+l.String())
			}
		}
		if len(out) == 1 {
			return "no errors in your recent trace", nil
		}
		return strings.Join(out, "\n"), nil
	}
	return r.memoryBlock()
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

// memoryBlock is seed 002's operational memory block: permissions,
// position, pins (with their content), stashes, the recent trace.
func (r *loomRun) memoryBlock() (string, error) {
	out := []string{"operational memory", "  permissions: " + strings.Join(r.perms, ", ")}
	if r.pos.Tree > 0 {
		out = append(out, fmt.Sprintf("  position: tree %d node %d", r.pos.Tree, r.pos.Node))
	}
	pins, err := r.pins()
	if err != nil {
		return "", err
	}
	if len(pins) > 0 {
		out = append(out, "  pinned:")
		for _, p := range pins {
			line := "    " + p.Ref
			if p.Tree > 0 {
				var n Node
				if ok, err := r.get(treeScope(p.Tree), "n:"+p.Ref, &n); err != nil {
					return "", err
				} else if ok {
					line = fmt.Sprintf("    %s (tree %d): %s", p.Ref, p.Tree, clip(strings.ReplaceAll(n.Content, "\n", " "), 200, fmt.Sprintf("→ view %s", p.Ref)))
				}
			}
			out = append(out, line)
		}
	}
	_, labels, err := r.stashes()
	if err != nil {
		return "", err
	}
	if len(labels) > 0 {
		out = append(out, "  stashed: "+strings.Join(quoteAll(labels), ", "))
	}
	lines, err := r.traceLines(10)
	if err != nil {
		return "", err
	}
	errors := 0
	if len(lines) > 0 {
		out = append(out, "  recent actions:")
		for _, l := range lines {
			out = append(out, "    "+l.String())
			if l.Error != "" {
				errors++
			}
		}
	}
	if errors > 0 {
		out = append(out, fmt.Sprintf("  %d recent errors: → memory errors", errors))
	}
	return strings.Join(out, "\n"), nil
}

func (r *loomRun) drop(c *Command) (string, error) {
	if v, ok := c.opt("stash"); ok {
		var s json.RawMessage
		if ok, err := r.get(r.p.AgentID, "loom:stash:"+v, &s); err != nil {
			return "", err
		} else if !ok {
			return "", loomErr(errs.NotFound, "nothing stashed as %q", v).WithHint("→ memory stashed lists the labels")
		}
		r.del(r.p.AgentID, "loom:stash:"+v)
		r.markRecalled(v, false)
		return fmt.Sprintf("✓ dropped stash %q", v), nil
	}
	if v, ok := c.opt("recall"); ok {
		if !r.markRecalled(v, false) {
			return "", loomErr(errs.NotFound, "%q is not recalled", v).WithHint("→ memory lists what is")
		}
		return fmt.Sprintf("✓ %q leaves your memory block (still stashed: → recall %q)", v, v), nil
	}
	if v, ok := c.opt("lines"); ok {
		a, b, _ := strings.Cut(v, "-")
		from, err1 := strconv.Atoi(a)
		to, err2 := strconv.Atoi(b)
		if b == "" {
			to, err2 = from, nil
		}
		if err1 != nil || err2 != nil || from < 1 || to < from {
			return "", loomErr(errs.InvalidField, "lines:%s is not a range like lines:3-7", v).WithHint("numbers as → memory trace shows them")
		}
		lines, err := r.traceLines(50)
		if err != nil {
			return "", err
		}
		n := 0
		for i := from; i <= to && i <= len(lines); i++ {
			r.del(r.p.AgentID, lines[i-1].Key)
			n++
		}
		r.trace = fmt.Sprintf("drop lines:%s (%d trace lines)", v, n)
		return fmt.Sprintf("✓ dropped %d trace lines", n), nil
	}
	ref := ""
	if len(c.Refs) > 0 {
		ref = c.Refs[0]
	} else if v, ok := c.opt("pin"); ok {
		ref = v
	} else if d, ok := c.opt("doc"); ok {
		ref = fmt.Sprintf("doc:%q", d)
	}
	pins, err := r.pins()
	if err != nil {
		return "", err
	}
	kept := slices.DeleteFunc(slices.Clone(pins), func(p loomPin) bool { return p.Ref == ref || strings.HasPrefix(p.Ref, ref+" ") })
	if ref == "" || len(kept) == len(pins) {
		return "", loomErr(errs.NotFound, "nothing pinned as %q", ref).WithHint("drop 47 unpins a node; drop stash:\"label\" forgets a stash; drop lines:3-7 forgets trace lines")
	}
	r.put(r.p.AgentID, "loom:pins", map[string]any{"items": kept})
	return fmt.Sprintf("✓ unpinned %s", ref), nil
}

// Continuations (seed 002 §Content Tools "continue"). A collaborator may
// continue any branch it may write, its own included (needs loom_generate
// and the branch's turn): the text comes from the generator, never from
// the collaborator, so "›" stays honest. Without a configured generator the
// request is queued in _loom (gen:<n>) and whoever fulfils it must not be
// the agent that asked.

type loomGenRequest struct {
	ID     int64     `json:"id"`
	Tree   int64     `json:"tree"`
	Node   int64     `json:"node"`
	N      int       `json:"n"`
	Done   int       `json:"done"`
	Tokens int       `json:"tokens"`
	By     string    `json:"by"`
	At     time.Time `json:"at"`
}

func (r *loomRun) genParams(c *Command) (n, tokens int) {
	n, tokens = 1, r.l.opt.MaxTokens
	if v, err := strconv.Atoi(c.Opts["n"]); err == nil && v > 0 {
		n = min(v, r.l.opt.MaxN)
	}
	if v, err := strconv.Atoi(c.Opts["tokens"]); err == nil && v > 0 {
		tokens = min(v, r.l.opt.MaxTokens)
	}
	return n, tokens
}

func (r *loomRun) continueOp(c *Command, t *loomTree, gen []string) (string, error) {
	parent, err := r.refParent(c, t)
	if err != nil {
		return "", err
	}
	if gen != nil {
		var ids []string
		var last *Node
		for _, text := range gen {
			n, err := r.addNode(t, parent, Node{Content: text, By: "gen:" + r.l.opt.GeneratorModel, Model: true, For: r.actor})
			if err != nil {
				return "", err
			}
			ids = append(ids, fmt.Sprintf("%d (branch %s)", n.ID, n.Branch))
			last = n
		}
		r.moveTo(t, last)
		return fmt.Sprintf("✓ %d continuations of %d: %s", len(gen), parent.ID, strings.Join(ids, ", ")), nil
	}
	n, tokens := r.genParams(c)
	var cnt struct {
		Next int64 `json:"next"`
	}
	if _, err := r.get(scopeLoom, "gens", &cnt); err != nil {
		return "", err
	}
	if cnt.Next == 0 {
		cnt.Next = 1
	}
	req := loomGenRequest{ID: cnt.Next, Tree: t.ID, Node: parent.ID, N: n, Tokens: tokens, By: r.actor, At: r.now}
	cnt.Next++
	r.put(scopeLoom, "gens", cnt)
	key := "gen:" + strconv.FormatInt(req.ID, 10)
	r.put(scopeLoom, key, req)
	r.moveTo(t, parent)
	return fmt.Sprintf("· no generator is configured: queued request g%d for %d continuation(s) of node %d (up to %d tokens).\n"+
		"  another agent or a person answers with → fulfil g%d \"text\"; wait for it with the condition !(\"%s\" in state._loom)",
		req.ID, n, parent.ID, tokens, req.ID, key), nil
}

func (r *loomRun) fulfil(c *Command) (string, error) {
	if len(c.Refs) == 0 || !strings.HasPrefix(c.Refs[0], "g") {
		return "", loomErr(errs.InvalidField, "fulfil needs a request id like g12").WithHint("→ requests lists the open ones").With("nearest", "fulfil")
	}
	text, err := firstText(c, "the generated text")
	if err != nil {
		return "", err
	}
	key := "gen:" + strings.TrimPrefix(c.Refs[0], "g")
	var req loomGenRequest
	if ok, err := r.get(scopeLoom, key, &req); err != nil {
		return "", err
	} else if !ok {
		return "", loomErr(errs.NotFound, "generation request %s is not open", c.Refs[0]).WithHint("→ requests lists the open ones")
	}
	if req.By == r.actor {
		return "", loomErr(errs.Forbidden, "permission denied: %s asked for %s; a continuation comes from someone else", r.actor, c.Refs[0]).
			WithHint("write your own text with → add \"…\", or let a generator or another participant fulfil it")
	}
	t, err := r.tree(req.Tree)
	if err != nil {
		return "", err
	}
	if v, ok := c.opt("tree"); ok {
		named, err := r.treeByRef(v)
		if err != nil {
			return "", err
		}
		if named.ID != t.ID {
			return "", loomErr(errs.InvalidField, "%s continues node %d of tree %d, not of tree %d", c.Refs[0], req.Node, req.Tree, named.ID).
				WithHint("→ fulfil %s tree:%d \"…\", or leave tree: out (a request knows its tree)", c.Refs[0], req.Tree).With("tree", req.Tree)
		}
	}
	parent, err := r.node(t, strconv.FormatInt(req.Node, 10))
	if err != nil {
		return "", err
	}
	n, err := r.addNode(t, parent, Node{Content: text, By: r.actor, Model: true, For: req.By})
	if err != nil {
		return "", err
	}
	req.Done++
	if req.Done >= req.N {
		r.del(scopeLoom, key)
	} else {
		r.put(scopeLoom, key, req)
	}
	r.saveTree(t)
	return fmt.Sprintf("✓ node %d fulfils %s (%d of %d), in tree %d %q", n.ID, c.Refs[0], req.Done, req.N, t.ID, t.Name), nil
}

func (r *loomRun) requests() (string, error) {
	if err := r.need(PermAware); err != nil {
		return "", err
	}
	kvs, err := r.tx.List(substrate.ListQuery{Scope: scopeLoom, Prefix: "gen:"})
	if err != nil {
		return "", err
	}
	var out []string
	for _, kv := range kvs {
		var q loomGenRequest
		_ = json.Unmarshal(kv.Value, &q)
		out = append(out, fmt.Sprintf("g%d: %d of %d continuations of node %d in tree %d (≤%d tokens), asked by %s", q.ID, q.Done, q.N, q.Node, q.Tree, q.Tokens, q.By))
	}
	if len(out) == 0 {
		return "no open generation requests", nil
	}
	return strings.Join(out, "\n"), nil
}

// continueGen runs continue against the configured generator: read the
// prompt (the path to the node) on one connection, release it, call the
// generator, then write the continuations in a mutation that checks the
// permission and the branch's turn again.
func (l *Loom) continueGen(ctx context.Context, p *substrate.Principal, roomID string, c *Command, call *callState) (Step, *Position, string, error) {
	var prompt string
	var n, tokens int
	var tree, node int64
	err := l.svc.ReadRoom(ctx, p, roomID, func(tx *substrate.RoomTx) error {
		r := &loomRun{l: l, tx: tx, p: p, room: roomID, now: tx.Now(), actor: p.Actor()}
		if err := r.loadCaller(); err != nil {
			return err
		}
		if call.pos != nil {
			r.pos = *call.pos
		}
		if p.ReadOnly() {
			return loomErr(errs.ReadOnlyToken, "permission denied: this credential is read-only")
		}
		if err := r.need(PermGenerate); err != nil {
			return err
		}
		t, err := r.currentTree(c)
		if err != nil {
			return err
		}
		parent, err := r.refParent(c, t)
		if err != nil {
			return err
		}
		path, err := r.ancestors(t, parent)
		if err != nil {
			return err
		}
		prompt = PathText(path, ForBase)
		n, tokens = r.genParams(c)
		tree, node = t.ID, parent.ID
		return nil
	})
	if err != nil {
		return Step{Command: c.Line, Verb: c.Verb}, nil, "", err
	}
	running := l.markGenerating(ctx, p, roomID, tree, node, n)
	texts, err := l.generate(ctx, prompt, n, tokens)
	if err != nil {
		l.unmarkGenerating(ctx, p, roomID, running)
		return Step{Command: c.Line, Verb: c.Verb}, nil, "", err
	}
	st, pos, onboard, err := l.exec(ctx, p, roomID, c, &stepIn{call: call, gen: texts, running: running})
	if err != nil {
		l.unmarkGenerating(ctx, p, roomID, running)
	}
	return st, pos, onboard, err
}

// humanBreak keeps a human-typed node apart from the text before it in a
// base model's prompt.
const humanBreak = "\n\n"

// Reader is who reads a path's text (PathText).
type Reader int

const (
	// ForBase is the base model's prompt for → continue.
	ForBase Reader = iota
	// ForCollaborator is the instruct collaborator's reading of the path
	// (seed 002 §Buffer Mode), the text of → view branch:B as:prose.
	ForCollaborator
)

// PathText is the text of a path (root first) as its reader reads it, one
// assembly for both kinds of model: annotations, links and thinking are
// not nodes, so never in it; a human-typed node is kept apart from the
// text before it, so two people's words never run together ("Once upon a
// time" + "there was"). For the base model, model-written nodes are joined
// verbatim (they continue the text before them exactly as generated), a
// human-typed node starts after a blank line, and instruction nodes (which
// steer the collaborator, not the base model) and empty nodes are left
// out. For the collaborator, "︱" marks every node boundary and "︱›" one
// after which model-written content follows; instruction nodes are kept.
func PathText(path []Node, who Reader) string {
	var b strings.Builder
	for i, x := range path {
		if who == ForCollaborator {
			if i > 0 {
				b.WriteString(" ︱")
				if x.Model {
					b.WriteString("›")
				}
				b.WriteString(" ")
			}
			b.WriteString(strings.TrimSpace(x.Content))
			continue
		}
		if x.Edge == "instruction" || x.Content == "" {
			continue
		}
		if b.Len() > 0 && !x.Model && !strings.HasSuffix(b.String(), humanBreak) {
			b.WriteString(humanBreak)
		}
		b.WriteString(x.Content)
	}
	return b.String()
}

// generate calls the OpenAI-compatible completions endpoint.
func (l *Loom) generate(ctx context.Context, prompt string, n, tokens int) ([]string, error) {
	o := l.opt
	meter := meterOf(ctx)
	promptTokens := tokensOf(prompt)
	if meter != nil {
		if err := meter.Allow(n, tokens, promptTokens); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.GeneratorTimeout)
	defer cancel()
	body, _ := json.Marshal(map[string]any{"model": o.GeneratorModel, "prompt": prompt, "max_tokens": tokens, "n": n})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.GeneratorURL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if o.GeneratorKey != "" {
		req.Header.Set("Authorization", "Bearer "+o.GeneratorKey)
	}
	var out struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if meter != nil {
		// A call that was sent is spent, whatever came back: the
		// endpoint's figures when it gave them, else the estimate.
		defer func() {
			sp := GenSpend{Completions: len(out.Choices), PromptTokens: out.Usage.PromptTokens, CompletionTokens: out.Usage.CompletionTokens}
			if sp.PromptTokens == 0 && sp.CompletionTokens == 0 {
				sp.PromptTokens = int64(promptTokens)
				for _, ch := range out.Choices {
					sp.CompletionTokens += int64(tokensOf(ch.Text))
				}
			}
			meter.Spent(sp)
		}()
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		return nil, loomErr(errs.Unavailable, "the generator did not answer: %v", err).WithHint("retry, or ask a person to write the continuation")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, loomErr(errs.Unavailable, "the generator answered %s", resp.Status).WithHint("retry later")
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 4<<20)).Decode(&out); err != nil || len(out.Choices) == 0 {
		return nil, loomErr(errs.Unavailable, "the generator's answer has no choices").WithHint("check SYNC_LOOM_GENERATOR_URL points at a /v1/completions endpoint")
	}
	texts := make([]string, 0, len(out.Choices))
	for _, ch := range out.Choices {
		texts = append(texts, ch.Text)
	}
	if len(texts) > n {
		texts = texts[:n]
	}
	return texts, nil
}
