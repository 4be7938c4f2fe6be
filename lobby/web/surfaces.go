package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"

	"github.com/syncsubstrate/sync/substrate"
)

// A surface is a view drawn by its render hint (the original system's
// dashboard surfaces): the view's registrar says how its value reads best
// to a person. The hint's fields, all optional but type:
//
//	{"type": "metric", "label": "Open tasks", "unit": "tasks", "order": 1, "group": "Progress"}
//	{"type": "markdown"}                                   the value is markdown text
//	{"type": "table", "columns": [{"key": "id", "label": "Task"}], "max_rows": 20}
//	{"type": "feed", "max_rows": 20}                       a list, newest last
//	{"type": "action-bar", "actions": ["start", "stop"]}   buttons for parameterless actions
//	{"type": "action-form", "action": "move"}              the action's form
//	{"type": "action-form", "action": "claim", "options": {"task": "open_tasks"}}
//	                                                       the task field picks from view open_tasks
//	{"type": "board", "group_by": "status", "lanes": ["todo", "doing", "done"], "title": "title", "fields": ["owner"]}
//	                                                       the rows as cards in one column per status
//	{"type": "choice", "action": "vote", "param": "option"} one button per value in the view's array
//	{"type": "watch", "keys": ["_shared.phase"]}           those entries of the reader's state
//	{"type": "section", "label": "…"}                      a heading; its value, if text, under it
//
// "array-table" and "view-table" read as table, "action-choice" as choice;
// an unknown type shows the value as JSON. A table with "group_by" is a
// board. Each group is a section of the page, titled by the group's name
// (a bare identifier such as "task_flow" reads "Task flow"); groups come
// in the order their surfaces declare (the smallest "order" in each, so
// the metrics a registrar puts first come first), and within a group
// surfaces go by order, then the small ones (metrics, bars) before the
// wide ones (tables, boards, feeds), then id. Options for an action
// form come only from views the reader reads (the list given).
type surface struct {
	ID      string
	Type    string
	Label   string
	Unit    string
	Order   float64
	Group   string
	Value   any
	Error   string // the view's value is an error
	Columns []column
	Rows    [][]any
	Items   []any
	HTML    template.HTML // markdown, rendered
	Actions []actionRow   // action-bar, action-form, choice
	Param   string        // choice: the param each button sets
	Options []any         // choice: the values offered
	Watched []watched     // watch
	Lanes   []lane        // board
	// ParamOptions are the choices an action form offers for a param,
	// from a view (hint "options"): a select instead of a text field.
	ParamOptions map[string][]option
	// A table's rows are all kept (all) and shown a page at a time
	// (pageTables): its heading counts all of them, and its filter
	// searches all of them, on the server, so it works without a script.
	all      [][]any
	PageSize int
	Table    *tablePage
}

// tablePage is what a table surface shows of its rows: the reader's
// filter (?tq.<view>=) and page (?tp.<view>=, from 1), and the links to
// the pages beside it.
type tablePage struct {
	Total, Matched  int
	Filter          string
	Page, Pages     int
	First, Last     int // the rows shown, counted from 1 (0, 0: none)
	Prev, Next, All string
	// Keep are the query's other fields, carried by the filter's form
	// (a view token, other tables' pages).
	Keep []keptField
}

type keptField struct{ Name, Value string }

// lane is one column of a board: the cards whose group_by field holds
// its value.
type lane struct {
	Name  string
	Cards []card
}

// card is one row of a board: its title and the other fields shown.
type card struct {
	Title  string
	Fields []cardField
}

type cardField struct{ Label, Value string }

// option is one choice of a select: the value sent (JSON for a non-text
// value, as the hidden type field says) and the label shown.
type option struct{ Value, Label string }

type column struct{ Key, Label string }

type watched struct {
	Path  string
	Value any
	Found bool
}

type renderHint struct {
	Type    string   `json:"type"`
	Label   string   `json:"label"`
	Unit    string   `json:"unit"`
	Order   float64  `json:"order"`
	Group   string   `json:"group"`
	Columns []column `json:"columns"`
	MaxRows int      `json:"max_rows"`
	Action  string   `json:"action"`
	Actions []string `json:"actions"`
	Param   string   `json:"param"`
	Keys    []string `json:"keys"`
	// board
	GroupBy string   `json:"group_by"`
	Lanes   []string `json:"lanes"`
	Title   string   `json:"title"`
	Fields  []string `json:"fields"`
	// action-form: param name → id of the view whose value lists its choices
	Options map[string]string `json:"options"`
}

// surfaceGroup is one section of surfaces.
type surfaceGroup struct {
	Name     string
	Title    string
	Surfaces []surface
}

// surfacesOf draws the views that carry a render hint, with what the
// reader sees: the view values, the actions (and their availability) and
// the state.
func surfacesOf(views []substrate.ViewInfo, actions []actionRow, state map[string]any) []surfaceGroup {
	byID := map[string]actionRow{}
	for _, a := range actions {
		byID[a.ID] = a
	}
	// Options come from the views listed, which are those the reader
	// reads: a hint naming another view offers nothing.
	viewByID := map[string]any{}
	for _, v := range views {
		viewByID[v.ID] = v.Value
	}
	var all []surface
	for _, v := range views {
		if len(v.Render) == 0 || string(v.Render) == "null" {
			continue
		}
		var h renderHint
		if json.Unmarshal(v.Render, &h) != nil {
			h = renderHint{Type: "json"}
		}
		s := surface{ID: v.ID, Type: h.Type, Label: h.Label, Unit: h.Unit, Order: h.Order, Group: h.Group, Value: v.Value}
		if s.Label == "" {
			s.Label = v.ID
		}
		if m, ok := v.Value.(map[string]any); ok && m["_error"] != nil {
			s.Type, s.Error = "error", fmt.Sprint(m["_error"])
		}
		fillSurface(&s, h, v.Value, byID, viewByID, state)
		all = append(all, s)
	}
	return groupSurfaces(all)
}

// fillSurface draws the view's value as its hint's type says.
func fillSurface(s *surface, h renderHint, value any, byID map[string]actionRow, viewByID, state map[string]any) {
	maxRows := h.MaxRows
	if maxRows <= 0 || maxRows > 500 {
		maxRows = tablePageSize
	}
	switch s.Type {
	case "metric", "section", "error":
	case "markdown":
		text, _ := value.(string)
		var buf bytes.Buffer
		// goldmark leaves raw HTML out and drops links to dangerous
		// schemes (javascript:, …) unless told otherwise: the text
		// is the registrar's, the page the reader's.
		if markdown.Convert([]byte(text), &buf) == nil {
			s.HTML = template.HTML(buf.String())
		}
	case "board", "kanban":
		s.Type = "board"
		rows, _ := value.([]any)
		s.Lanes = boardOf(rows, h, boardRows(h.MaxRows))
	case "table", "array-table", "view-table":
		fillTable(s, h, value, maxRows)
	case "feed":
		items, _ := value.([]any)
		if len(items) > maxRows {
			items = items[len(items)-maxRows:]
		}
		s.Items = items
	case "action-bar":
		for _, id := range h.Actions {
			if a, ok := byID[id]; ok {
				s.Actions = append(s.Actions, a)
			}
		}
	case "action-form":
		fillForm(s, h, byID, viewByID)
	case "choice", "action-choice":
		s.Type, s.Param = "choice", h.Param
		if a, ok := byID[h.Action]; ok && h.Param != "" {
			s.Actions = []actionRow{a}
			s.Options, _ = value.([]any)
		}
	case "watch":
		fillWatch(s, h, state)
	default:
		s.Type = "json"
	}
}

// fillTable draws a table (a board when grouped), its first page.
func fillTable(s *surface, h renderHint, value any, maxRows int) {
	s.Type = "table"
	rows, _ := value.([]any)
	if h.GroupBy != "" {
		s.Type, s.Lanes = "board", boardOf(rows, h, boardRows(h.MaxRows))
		return
	}
	s.Columns = h.Columns
	if len(s.Columns) == 0 {
		s.Columns = columnsOf(rows)
	}
	s.PageSize = maxRows
	for _, r := range rows {
		m, _ := r.(map[string]any)
		row := make([]any, len(s.Columns))
		for j, c := range s.Columns {
			if m != nil {
				row[j] = m[c.Key]
			} else if j == 0 {
				row[j] = r
			}
		}
		s.all = append(s.all, row)
	}
	// The first page, unfiltered, for pages drawn without a
	// reader's query (a refusal's page, the past): pageTables
	// replaces it with the page asked for.
	s.Rows, s.Table = pageOf(s, nil)
}

// fillForm draws an action's form, with the options its hint takes from
// views the reader reads.
func fillForm(s *surface, h renderHint, byID map[string]actionRow, viewByID map[string]any) {
	a, ok := byID[h.Action]
	if !ok {
		return
	}
	s.Actions = []actionRow{a}
	for param, viewID := range h.Options {
		val, ok := viewByID[viewID]
		if _, declared := a.Params[param]; !ok || !declared {
			continue
		}
		if opts := optionsOf(val); len(opts) > 0 {
			if s.ParamOptions == nil {
				s.ParamOptions = map[string][]option{}
			}
			s.ParamOptions[param] = opts
		}
	}
}

// fillWatch draws the state keys a watch names.
func fillWatch(s *surface, h renderHint, state map[string]any) {
	for _, path := range h.Keys {
		scope, key, _ := strings.Cut(path, ".")
		w := watched{Path: path}
		// A scope's entries come as the envelope holds them
		// (stored JSON passed through): read them as JSON.
		var m map[string]any
		if raw, err := json.Marshal(state[scope]); err == nil && json.Unmarshal(raw, &m) == nil {
			w.Value, w.Found = m[key]
		}
		s.Watched = append(s.Watched, w)
	}
}

// groupSurfaces orders the surfaces and groups them: a group sits where
// its first-declared surface would.
func groupSurfaces(all []surface) []surfaceGroup {
	first := map[string]float64{}
	for _, s := range all {
		if o, ok := first[s.Group]; !ok || s.Order < o {
			first[s.Group] = s.Order
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.Group != b.Group {
			if first[a.Group] != first[b.Group] {
				return first[a.Group] < first[b.Group]
			}
			return a.Group < b.Group
		}
		if a.Order != b.Order {
			return a.Order < b.Order
		}
		if wa, wb := wide(a.Type), wide(b.Type); wa != wb {
			return wb
		}
		return a.ID < b.ID
	})
	var out []surfaceGroup
	for _, s := range all {
		if len(out) == 0 || out[len(out)-1].Name != s.Group {
			out = append(out, surfaceGroup{Name: s.Group, Title: humanTitle(s.Group)})
		}
		g := &out[len(out)-1]
		g.Surfaces = append(g.Surfaces, s)
	}
	return out
}

// tablePageSize is how many rows a table shows at a time unless its hint
// says (max_rows, at most 500).
const tablePageSize = 50

// pageTables returns groups with each table cut to the page the reader
// asked for in q (tq.<view> filters, tp.<view> pages), the links to the
// others carrying the rest of q. groups are shared by every reader of
// one read of the room (livefeed.go): they are copied, never changed.
func pageTables(groups []surfaceGroup, q url.Values) []surfaceGroup {
	out := slices.Clone(groups)
	for gi := range out {
		cloned := false
		for si := range out[gi].Surfaces {
			if out[gi].Surfaces[si].Type != "table" {
				continue
			}
			if !cloned {
				out[gi].Surfaces, cloned = slices.Clone(out[gi].Surfaces), true
			}
			s := &out[gi].Surfaces[si]
			s.Rows, s.Table = pageOf(s, q)
		}
	}
	return out
}

// pageOf is the page of table s that q asks for.
func pageOf(s *surface, q url.Values) ([][]any, *tablePage) {
	fq, pq := "tq."+s.ID, "tp."+s.ID
	t := &tablePage{Total: len(s.all), Filter: strings.TrimSpace(q.Get(fq))}
	rows := s.all
	if t.Filter != "" {
		needle := strings.ToLower(t.Filter)
		rows = nil
		for _, r := range s.all {
			for _, v := range r {
				if strings.Contains(strings.ToLower(textOf(v)), needle) {
					rows = append(rows, r)
					break
				}
			}
		}
	}
	t.Matched = len(rows)
	size := max(s.PageSize, 1)
	t.Pages = max(1, (len(rows)+size-1)/size)
	t.Page, _ = strconv.Atoi(q.Get(pq))
	t.Page = min(max(t.Page, 1), t.Pages)
	from := (t.Page - 1) * size
	shown := rows[from:min(len(rows), from+size)]
	if len(shown) > 0 {
		t.First, t.Last = from+1, from+len(shown)
	}
	link := func(page int, filter string) string {
		v := url.Values{}
		for k, vs := range q {
			if k != fq && k != pq && keptParam(k) {
				v[k] = vs
			}
		}
		if filter != "" {
			v.Set(fq, filter)
		}
		if page > 1 {
			v.Set(pq, strconv.Itoa(page))
		}
		return "?" + v.Encode() + "#surface-" + s.ID
	}
	if t.Page > 1 {
		t.Prev = link(t.Page-1, t.Filter)
	}
	if t.Page < t.Pages {
		t.Next = link(t.Page+1, t.Filter)
	}
	if t.Filter != "" {
		t.All = link(1, "")
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		if k != fq && k != pq && keptParam(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range q[k] {
			t.Keep = append(t.Keep, keptField{k, v})
		}
	}
	return shown, t
}

// keptParam reports a query field the room page's links carry along: the
// view token and the tables' filters and pages (not a form's one-off
// fields, nor the console's expression).
func keptParam(k string) bool {
	return k == "view" || strings.HasPrefix(k, "tq.") || strings.HasPrefix(k, "tp.")
}

// tableQuery is the part of q that decides what the tables show, in one
// canonical form: streams whose readers ask for the same pages share a
// render (livefeed.go pageKey).
func tableQuery(q url.Values) url.Values {
	out := url.Values{}
	for k, vs := range q {
		if strings.HasPrefix(k, "tq.") || strings.HasPrefix(k, "tp.") {
			out[k] = vs[:1]
		}
	}
	return out
}

// boardRows is how many cards a board shows: a board is read at a
// glance across its lanes, so by default all of a real backlog (200).
func boardRows(n int) int {
	if n <= 0 || n > 500 {
		return 200
	}
	return n
}

// wide reports a surface that takes the grid's whole width.
func wide(typ string) bool {
	switch typ {
	case "table", "board", "feed", "markdown", "json", "action-form":
		return true
	}
	return false
}

// humanTitle is a group's name as a heading: a bare identifier
// ("task_flow", "task-flow") reads "Task flow"; a name written for people
// (with a space or a capital) stays as it is.
func humanTitle(name string) string {
	if name == "" || strings.ContainsAny(name, " ") || strings.ToLower(name) != name {
		return name
	}
	t := strings.NewReplacer("_", " ", "-", " ", ".", " ").Replace(name)
	return strings.ToUpper(t[:1]) + t[1:]
}

// boardOf sorts rows into lanes by their group_by field: the lanes the
// hint names first, in its order (empty ones too), then the others as
// they first appear; rows without the field go to a lane "(none)".
func boardOf(rows []any, h renderHint, maxRows int) []lane {
	var lanes []lane
	at := map[string]int{}
	for _, name := range h.Lanes {
		if _, dup := at[name]; !dup {
			at[name] = len(lanes)
			lanes = append(lanes, lane{Name: name})
		}
	}
	title := h.Title
	shown := 0
	for _, r := range rows {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		if shown == maxRows {
			break
		}
		shown++
		name := "(none)"
		if v, ok := m[h.GroupBy]; ok && v != nil {
			name = textOf(v)
		}
		i, ok := at[name]
		if !ok {
			i = len(lanes)
			at[name] = i
			lanes = append(lanes, lane{Name: name})
		}
		if title == "" {
			title = cardTitleKey(m)
		}
		c := card{Title: textOf(m[title])}
		fields := h.Fields
		if len(fields) == 0 {
			for k := range m {
				if k != title && k != h.GroupBy {
					fields = append(fields, k)
				}
			}
			sort.Strings(fields)
		}
		for _, f := range fields {
			if v, ok := m[f]; ok && v != nil && f != h.GroupBy && f != title {
				c.Fields = append(c.Fields, cardField{Label: f, Value: textCut(v, 200)})
			}
		}
		lanes[i].Cards = append(lanes[i].Cards, c)
	}
	return lanes
}

// cardTitleKey guesses which field of a row names it.
func cardTitleKey(m map[string]any) string {
	for _, k := range []string{"title", "name", "label", "summary", "id", "key"} {
		if _, ok := m[k]; ok {
			return k
		}
	}
	return ""
}

// optionsOf reads a view's value as a select's choices: an array of
// values (text as itself, others as JSON), or of objects whose "id",
// "value" or "key" is sent and whose "label", "title" or "name" is shown;
// an object maps values to labels. At most 500 choices.
func optionsOf(v any) []option {
	var out []option
	add := func(val, label any) {
		if val == nil || len(out) == 500 {
			return
		}
		o := option{Value: compactJSON(val), Label: textOf(label)}
		if s, ok := val.(string); ok {
			o.Value = s
		}
		out = append(out, o)
	}
	switch x := v.(type) {
	case []any:
		for _, it := range x {
			m, ok := it.(map[string]any)
			if !ok {
				add(it, it)
				continue
			}
			val := firstOf(m, "id", "value", "key")
			label := firstOf(m, "label", "title", "name")
			if label == nil {
				label = val
			} else if val != nil && textOf(val) != textOf(label) {
				label = textOf(val) + " · " + textOf(label)
			}
			add(val, label)
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			label := x[k]
			if _, ok := label.(string); !ok {
				label = k
			}
			add(k, label)
		}
	}
	return out
}

func firstOf(m map[string]any, keys ...string) any {
	for _, k := range keys {
		if v, ok := m[k]; ok && v != nil {
			return v
		}
	}
	return nil
}

// markdown renders a surface's text. Its headings sit under the
// surface's own (an h3): "# Plan" is an h4, so the page's outline holds.
var markdown = goldmark.New(goldmark.WithParserOptions(parser.WithASTTransformers(util.Prioritized(headingsBelow{}, 100))))

type headingsBelow struct{}

func (headingsBelow) Transform(doc *ast.Document, _ text.Reader, _ parser.Context) {
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if h, ok := n.(*ast.Heading); ok && entering {
			h.Level = min(h.Level+3, 6)
		}
		return ast.WalkContinue, nil
	})
}

// columnsOf are the keys of a table's rows, in order of first appearance
// (sorted within a row), or one column for rows that are not objects.
func columnsOf(rows []any) []column {
	seen := map[string]bool{}
	var out []column
	for _, r := range rows {
		m, ok := r.(map[string]any)
		if !ok {
			if len(out) == 0 {
				return []column{{Key: "", Label: "value"}}
			}
			continue
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !seen[k] {
				seen[k] = true
				out = append(out, column{Key: k, Label: k})
			}
		}
		if len(out) >= 12 {
			break
		}
	}
	return out
}
