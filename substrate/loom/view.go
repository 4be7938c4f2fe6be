// The commands that read a tree: view, list, the tree preview,
// annotations and links.

package loom

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// view N [summary|full|with-annotations|with-links] · view branch:B as:prose|as:nodes
func (r *loomRun) view(c *Command, t *loomTree) (string, error) {
	if b, ok := c.opt("branch"); ok {
		return r.viewBranch(c, t, b)
	}
	n, err := r.refNode(c, t)
	if err != nil {
		return "", err
	}
	mode := ""
	for _, m := range []string{"summary", "full"} {
		if c.has(m) {
			mode = m
		}
	}
	out := []string{r.renderNode(n, mode)}
	if c.has("with-annotations") {
		s, err := r.listAnnotations(t, n)
		if err != nil {
			return "", err
		}
		out = append(out, s)
	}
	if c.has("with-links") {
		s, err := r.listLinks(t, n)
		if err != nil {
			return "", err
		}
		out = append(out, s)
	}
	// Viewing never moves the caller: "→ switch to 5", "→ view 2",
	// "→ add" adds under 5, as a reader who glanced elsewhere means.
	r.nodes = append(r.nodes, *n)
	return strings.Join(out, "\n"), nil
}

// renderNode: "#47 ← 46 · alice› · branch 8.2 · instruction" then the
// content ("›" marks model-written content).
func (r *loomRun) renderNode(n *Node, mode string) string {
	head := fmt.Sprintf("#%d", n.ID)
	if n.Parent > 0 {
		head += fmt.Sprintf(" ← %d", n.Parent)
	}
	who := n.By
	if n.Model {
		who += "›"
	}
	head += " · " + who + " · branch " + n.Branch
	if n.Edge != "primary" {
		head += " · " + n.Edge
	}
	if n.EditedFrom > 0 {
		head += fmt.Sprintf(" · edited from %d", n.EditedFrom)
	}
	content := n.Content
	switch mode {
	case "summary":
		content = clip(content, 160, "")
	case "full":
	default:
		content = clip(content, r.l.opt.ResultChars, fmt.Sprintf("→ view %d full", n.ID))
	}
	return head + "\n" + content
}

// clip shortens s to n characters, saying how much is left and how to get
// it.
func clip(s string, n int, more string) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	rs := []rune(s)
	left := len(rs) - n
	out := string(rs[:n]) + "…"
	if more != "" {
		out += fmt.Sprintf(" (%d more characters: %s)", left, more)
	}
	return out
}

func (r *loomRun) viewBranch(c *Command, t *loomTree, b string) (string, error) {
	head, err := r.branchHead(t, b)
	if err != nil {
		return "", err
	}
	path, err := r.ancestors(t, head)
	if err != nil {
		return "", err
	}
	if c.Opts["as"] == "nodes" {
		var parts []string
		for i := range path {
			parts = append(parts, r.renderNode(&path[i], "summary"))
		}
		return r.fit(strings.Join(parts, "\n\n"), c, len(path)), nil
	}
	// as:prose (the default): seed 002 §Buffer Mode, as the collaborator
	// reads its branch.
	prose := PathText(path, ForCollaborator)
	words := len(strings.Fields(prose))
	meta := fmt.Sprintf("⟨node:%d mode:buffer branch:%s nodes:%d words:%d⟩\n", head.ID, head.Branch, len(path), words)
	return meta + r.fit(prose, c, len(path)), nil
}

// fit keeps a long result to its last ResultChars characters unless the
// command asked for full.
func (r *loomRun) fit(s string, c *Command, items int) string {
	lim := r.l.opt.ResultChars
	if c.has("full") || utf8.RuneCountInString(s) <= lim {
		return s
	}
	rs := []rune(s)
	return fmt.Sprintf("… (%d earlier characters of %d nodes left out: → %s full)\n", len(rs)-lim, items, c.Line) + string(rs[len(rs)-lim:])
}

func (r *loomRun) list(c *Command, t *loomTree) (string, error) {
	n, err := r.refNode(c, t)
	if err != nil {
		return "", err
	}
	switch {
	case c.has("annotations"):
		return r.listAnnotations(t, n)
	case c.has("links"):
		return r.listLinks(t, n)
	default:
		kids, err := r.children(t, n.ID)
		if err != nil {
			return "", err
		}
		if len(kids) == 0 {
			return fmt.Sprintf("node %d has no continuations. → continue from %d or → add \"…\"", n.ID, n.ID), nil
		}
		lines := []string{fmt.Sprintf("%d continuations of %d:", len(kids), n.ID)}
		for _, k := range kids {
			lines = append(lines, "  "+oneLine(&k))
		}
		r.nodes = append(r.nodes, kids...)
		return r.fit(strings.Join(lines, "\n"), c, len(kids)), nil
	}
}

func oneLine(n *Node) string {
	who := n.By
	if n.Model {
		who += "›"
	}
	extra := ""
	if n.Edge != "primary" {
		extra = " [" + n.Edge + "]"
	}
	return fmt.Sprintf("%d (branch %s, %s)%s %s", n.ID, n.Branch, who, extra, clip(strings.ReplaceAll(n.Content, "\n", " "), 80, ""))
}

func (r *loomRun) listAnnotations(t *loomTree, n *Node) (string, error) {
	raws, err := r.probe(treeScope(t.ID), fmt.Sprintf("a:%d:", n.ID), 200)
	if err != nil {
		return "", err
	}
	if len(raws) == 0 {
		return fmt.Sprintf("no annotations on %d", n.ID), nil
	}
	lines := []string{fmt.Sprintf("annotations on %d:", n.ID)}
	for i, raw := range raws {
		var a struct{ Text, By string }
		_ = json.Unmarshal(raw, &a)
		lines = append(lines, fmt.Sprintf("  %d. %s: %q", i+1, a.By, a.Text))
	}
	return strings.Join(lines, "\n"), nil
}

func (r *loomRun) listLinks(t *loomTree, n *Node) (string, error) {
	raws, err := r.probe(treeScope(t.ID), fmt.Sprintf("l:%d:", n.ID), 200)
	if err != nil {
		return "", err
	}
	if len(raws) == 0 {
		return fmt.Sprintf("no links on %d", n.ID), nil
	}
	lines := []string{fmt.Sprintf("links of %d:", n.ID)}
	for _, raw := range raws {
		var l struct {
			To, From  int64
			Doc, Note string
			By        string
		}
		_ = json.Unmarshal(raw, &l)
		s := ""
		switch {
		case l.Doc != "":
			s = fmt.Sprintf("→ doc:%q", l.Doc)
		case l.To > 0:
			s = fmt.Sprintf("→ %d", l.To)
		default:
			s = fmt.Sprintf("← %d", l.From)
		}
		if l.Note != "" {
			s += fmt.Sprintf(" note:%q", l.Note)
		}
		lines = append(lines, "  "+s+" ("+l.By+")")
	}
	return strings.Join(lines, "\n"), nil
}

// treeView: tree [from:N] [depth:D] [summary] and preview N depth:D. It
// walks down from one node, level by level, never reading the whole tree:
// at most 60 nodes are shown, the rest counted.
func (r *loomRun) treeView(c *Command, t *loomTree) (string, error) {
	if c.Verb == "tree" && c.has("summary") {
		return fmt.Sprintf("tree %d %q: %d nodes, %d branches, max depth %d, %d annotations, %d links (created by %s)",
			t.ID, t.Name, t.Next-1, t.Branches, t.MaxDepth, t.Annotations, t.Links, t.By), nil
	}
	var from *Node
	var err error
	if v, ok := c.opt("from"); ok {
		from, err = r.node(t, v)
	} else if c.Verb == "preview" || len(c.Refs) > 0 {
		from, err = r.refNode(c, t)
	} else {
		from, err = r.node(t, "1")
	}
	if err != nil {
		return "", err
	}
	depth := 3
	if v, ok := c.opt("depth"); ok {
		if d, err := strconv.Atoi(v); err == nil && d > 0 {
			depth = min(d, 20)
		}
	}
	const maxShown = 60
	lines := []string{fmt.Sprintf("tree %d %q · %d nodes · from %d, depth %d:", t.ID, t.Name, t.Next-1, from.ID, depth), oneLine(from)}
	shown, hidden := 1, 0
	var walk func(n *Node, level int) error
	walk = func(n *Node, level int) error {
		if level > depth {
			return nil
		}
		kids, err := r.children(t, n.ID)
		if err != nil {
			return err
		}
		for i := range kids {
			if shown >= maxShown {
				hidden++
				continue
			}
			shown++
			lines = append(lines, strings.Repeat("  ", level)+oneLine(&kids[i]))
			if err := walk(&kids[i], level+1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(from, 1); err != nil {
		return "", err
	}
	if hidden > 0 {
		lines = append(lines, fmt.Sprintf("… %d more at this depth left out: → tree from:<node> depth:<n> narrows it", hidden))
	}
	return strings.Join(lines, "\n"), nil
}
