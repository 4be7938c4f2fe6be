package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"sort"
	"strings"

	"github.com/yuin/goldmark"

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
//	{"type": "choice", "action": "vote", "param": "option"} one button per value in the view's array
//	{"type": "watch", "keys": ["_shared.phase"]}           those entries of the reader's state
//	{"type": "section", "label": "…"}                      a heading; its value, if text, under it
//
// "array-table" and "view-table" read as table, "action-choice" as choice;
// an unknown type shows the value as JSON. Surfaces are sorted by group,
// then order, then id, and each group is a section of the page.
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
}

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
}

// surfaceGroup is one section of surfaces.
type surfaceGroup struct {
	Name     string
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
		maxRows := h.MaxRows
		if maxRows <= 0 || maxRows > 500 {
			maxRows = 50
		}
		switch s.Type {
		case "metric", "section", "error":
		case "markdown":
			text, _ := v.Value.(string)
			var buf bytes.Buffer
			// goldmark leaves raw HTML out and drops links to dangerous
			// schemes (javascript:, …) unless told otherwise: the text
			// is the registrar's, the page the reader's.
			if goldmark.Convert([]byte(text), &buf) == nil {
				s.HTML = template.HTML(buf.String())
			}
		case "table", "array-table", "view-table":
			s.Type = "table"
			rows, _ := v.Value.([]any)
			s.Columns = h.Columns
			if len(s.Columns) == 0 {
				s.Columns = columnsOf(rows)
			}
			for i, r := range rows {
				if i == maxRows {
					break
				}
				m, _ := r.(map[string]any)
				row := make([]any, len(s.Columns))
				for j, c := range s.Columns {
					if m != nil {
						row[j] = m[c.Key]
					} else if j == 0 {
						row[j] = r
					}
				}
				s.Rows = append(s.Rows, row)
			}
		case "feed":
			items, _ := v.Value.([]any)
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
			if a, ok := byID[h.Action]; ok {
				s.Actions = []actionRow{a}
			}
		case "choice", "action-choice":
			s.Type, s.Param = "choice", h.Param
			if a, ok := byID[h.Action]; ok && h.Param != "" {
				s.Actions = []actionRow{a}
				s.Options, _ = v.Value.([]any)
			}
		case "watch":
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
		default:
			s.Type = "json"
		}
		all = append(all, s)
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].Group != all[j].Group {
			return all[i].Group < all[j].Group
		}
		if all[i].Order != all[j].Order {
			return all[i].Order < all[j].Order
		}
		return all[i].ID < all[j].ID
	})
	var out []surfaceGroup
	for _, s := range all {
		if len(out) == 0 || out[len(out)-1].Name != s.Group {
			out = append(out, surfaceGroup{Name: s.Group})
		}
		g := &out[len(out)-1]
		g.Surfaces = append(g.Surfaces, s)
	}
	return out
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
