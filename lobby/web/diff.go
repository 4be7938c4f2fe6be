// What a live update sends: the room page's main section is rendered again
// for the reader on each change, and only the elements that differ from
// what the page already shows travel, as patches. Both sides parse the
// HTML the same way (the HTML5 algorithm, golang.org/x/net/html here and
// the browser's there), so an element is found again by the nearest
// ancestor with an id and the element-child indexes from it.

package web

import (
	"bytes"
	"slices"
	"strings"
	"sync"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// patch replaces one element of the page's main section.
type patch struct {
	// ID is the nearest ancestor (or the element itself) with an id; ""
	// is main. Path goes down from it by element-child index.
	ID   string `json:"id,omitempty"`
	Path []int  `json:"path,omitempty"`
	// Tag is the element's name, which the page checks before replacing:
	// a page whose tree differs from ours (a browser extension, say)
	// fetches the whole section instead.
	Tag  string `json:"tag"`
	HTML string `json:"html,omitempty"`
	// Op is "" (replace the element), "insert" (HTML goes into the
	// element, before the child whose id is Before, or last) or "remove"
	// (the element with id ID).
	Op     string `json:"op,omitempty"`
	Before string `json:"before,omitempty"`
}

// parseMain parses the main section's HTML as the browser parses main's
// innerHTML.
func parseMain(s string) ([]*html.Node, error) {
	return html.ParseFragment(strings.NewReader(s), &html.Node{Type: html.ElementNode, Data: "main", DataAtom: atom.Main})
}

// parsedSections keeps the last few sections parsed: the section a write
// renders is the one the next write's diff starts from, so each write
// parses one section, not two (at real size, a parse of the 100 KB
// section is much of a write's way to the page). The trees are only read
// (diffMain, html.Render), so the streams share them.
var parsedSections = struct {
	sync.Mutex
	order []string
	trees map[string][]*html.Node
}{trees: map[string][]*html.Node{}}

// parsedKept bounds parsedSections: a section parsed is a few times its
// size in memory, and each reader's section differs.
const parsedKept = 8

// parseMainKept is parseMain through parsedSections.
func parseMainKept(s string) ([]*html.Node, error) {
	c := &parsedSections
	c.Lock()
	nodes, ok := c.trees[s]
	c.Unlock()
	if ok {
		return nodes, nil
	}
	nodes, err := parseMain(s)
	if err != nil {
		return nil, err
	}
	c.Lock()
	defer c.Unlock()
	if _, ok := c.trees[s]; !ok {
		if len(c.order) >= parsedKept {
			delete(c.trees, c.order[0])
			c.order = c.order[1:]
		}
		c.trees[s] = nodes
		c.order = append(c.order, s)
	}
	return nodes, nil
}

// diffMain returns the patches that turn old into new, or ok false when
// the section's own children differ (then the whole section is sent).
func diffMain(old, new []*html.Node) (ps []patch, ok bool) {
	var d differ
	switch {
	case sameShape(old, new):
		d.children(old, new, "", nil)
	case !d.keyed(old, new, "main", "", nil):
		return nil, false
	}
	return d.out, true
}

type differ struct{ out []patch }

func (d *differ) children(old, new []*html.Node, id string, path []int) {
	i := 0
	for k, b := range new {
		a := old[k]
		if b.Type != html.ElementNode {
			continue
		}
		d.node(a, b, id, append(path[:len(path):len(path)], i))
		i++
	}
}

func (d *differ) node(a, b *html.Node, id string, path []int) {
	if own := attr(b, "id"); own != "" {
		id, path = own, nil
	}
	ka, kb := kids(a), kids(b)
	switch {
	case a.Data != b.Data || !sameAttrs(a.Attr, b.Attr):
	case sameShape(ka, kb):
		d.children(ka, kb, id, path)
		return
	case d.keyed(ka, kb, b.Data, id, path):
		return
	}
	d.out = append(d.out, patch{ID: id, Path: path, Tag: b.Data, HTML: render(b)})
}

// keyed diffs children that all carry ids (a feed's items, a table's
// rows) by id: the ones gone are removed, new ones inserted, the rest
// compared, so one new item in a feed travels alone. It declines (false)
// when the children are not all keyed or the kept ones moved.
func (d *differ) keyed(ka, kb []*html.Node, tag, id string, path []int) bool {
	ea, ok := keyedKids(ka)
	if !ok {
		return false
	}
	eb, ok := keyedKids(kb)
	if !ok {
		return false
	}
	ina, inb := map[string]*html.Node{}, map[string]*html.Node{}
	for _, n := range ea {
		ina[attr(n, "id")] = n
	}
	for _, n := range eb {
		inb[attr(n, "id")] = n
	}
	if len(ina) != len(ea) || len(inb) != len(eb) {
		return false // ids repeated: not keys
	}
	var ca, cb []string
	for _, n := range ea {
		if inb[attr(n, "id")] != nil {
			ca = append(ca, attr(n, "id"))
		}
	}
	for _, n := range eb {
		if ina[attr(n, "id")] != nil {
			cb = append(cb, attr(n, "id"))
		}
	}
	if !slices.Equal(ca, cb) {
		return false
	}
	for _, n := range ea {
		if k := attr(n, "id"); inb[k] == nil {
			d.out = append(d.out, patch{ID: k, Tag: n.Data, Op: "remove"})
		}
	}
	for i, n := range eb {
		k := attr(n, "id")
		if old := ina[k]; old != nil {
			d.node(old, n, k, nil)
			continue
		}
		before := ""
		for _, m := range eb[i+1:] {
			if ina[attr(m, "id")] != nil {
				before = attr(m, "id")
				break
			}
		}
		d.out = append(d.out, patch{ID: id, Path: path, Tag: tag, Op: "insert", Before: before, HTML: render(n)})
	}
	return true
}

// keyedKids are the element children when each has an id and only
// white space lies between them.
func keyedKids(ns []*html.Node) ([]*html.Node, bool) {
	var out []*html.Node
	for _, n := range ns {
		switch {
		case n.Type == html.ElementNode && attr(n, "id") != "":
			out = append(out, n)
		case n.Type == html.TextNode && strings.TrimSpace(n.Data) == "":
		default:
			return nil, false
		}
	}
	return out, true
}

func render(n *html.Node) string {
	var buf bytes.Buffer
	_ = html.Render(&buf, n)
	return buf.String()
}

// sameShape: the same number of children, the same elements (name and
// id) where elements are, and the same text between them.
func sameShape(a, b []*html.Node) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Type != b[i].Type {
			return false
		}
		switch a[i].Type {
		case html.ElementNode:
			// An element with another id is another element (a feed
			// moved on): the keyed diff takes those.
			if a[i].Data != b[i].Data || attr(a[i], "id") != attr(b[i], "id") {
				return false
			}
		case html.TextNode:
			if a[i].Data != b[i].Data {
				return false
			}
		}
	}
	return true
}

func kids(n *html.Node) []*html.Node {
	var out []*html.Node
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type != html.CommentNode {
			out = append(out, c)
		}
	}
	return out
}

func sameAttrs(a, b []html.Attribute) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func attr(n *html.Node, name string) string {
	for _, a := range n.Attr {
		if a.Key == name && a.Namespace == "" {
			return a.Val
		}
	}
	return ""
}
