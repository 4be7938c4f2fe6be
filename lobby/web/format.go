// Formatting helpers the pages' templates call (template.FuncMap in New).

package web

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

func prettyJSON(v any) string {
	var b []byte
	var err error
	if raw, ok := v.(json.RawMessage); ok {
		var x any
		if json.Unmarshal(raw, &x) == nil {
			v = x
		}
	}
	b, err = json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprint(v)
	}
	const max = 2000
	if len(b) > max {
		return string(b[:max]) + fmt.Sprintf("… (%d bytes)", len(b))
	}
	return string(b)
}

// thoughtText is the text of a thought entry ({"text": …, "at": …}).
func thoughtText(v json.RawMessage) string {
	var t struct {
		Text *string `json:"text"`
	}
	if json.Unmarshal(v, &t) == nil && t.Text != nil {
		return *t.Text
	}
	return string(v)
}

// textOf is a value as a person reads it: text as itself, anything else
// as JSON on one line.
func textOf(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return compactJSON(v)
}

// shorten cuts s to at most n bytes (on a rune boundary), saying so.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d bytes)", len(s))
}

// auditLine is an audit entry in a line: its kind, the action, whether it
// went through, and the keys it wrote.
func auditLine(v any) string {
	var a struct {
		Kind, Action string
		OK           *bool
		Delta        []struct{ Scope, Key string }
	}
	raw, _ := v.(json.RawMessage)
	if json.Unmarshal(raw, &a) != nil {
		return shorten(textOf(v), 200)
	}
	line := a.Kind
	if a.Action != "" {
		line += " " + a.Action
	}
	if a.OK != nil && !*a.OK {
		line += " (refused)"
	}
	var keys []string
	for _, d := range a.Delta {
		keys = append(keys, d.Scope+"."+d.Key)
	}
	if len(keys) > 0 {
		line += ": " + shorten(strings.Join(keys, ", "), 200)
	}
	return line
}

// compactJSON is a value on one line (a button's label, a hidden field).
func compactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := time.Since(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.UTC().Format("2006-01-02")
}
