// Formatting helpers the pages' templates call (template.FuncMap in New).

package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/lobby/web/internal/jsonfmt"
)

// The pages' budgets for one value: what a <pre> shows, and what a line
// (a label, a summary) may hold before it is cut. Formatting stops when
// the budget is spent (jsonfmt), so a value costs the page what it shows
// however large or deep it is stored.
const (
	preBytes  = 2000
	lineBytes = 2000
)

// prettyJSON is a value indented, within preBytes.
func prettyJSON(v any) string {
	return budgeted(v, "  ", preBytes)
}

// budgeted is v as JSON within n bytes (raw JSON is read as decoded,
// keys sorted), said to be cut when it is.
func budgeted(v any, indent string, n int) string {
	o := jsonfmt.Options{Indent: indent, MaxBytes: n}
	if raw, ok := v.(json.RawMessage); ok {
		out, _ := jsonfmt.Raw(raw, o)
		return out
	}
	out, _ := jsonfmt.Format(v, o)
	return out
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
// as JSON on one line, within lineBytes.
func textOf(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return budgeted(v, "", lineBytes)
}

// textCut is textOf within n bytes: a label, a summary line.
func textCut(v any, n int) string {
	if s, ok := v.(string); ok {
		return shorten(s, n)
	}
	return budgeted(v, "", n)
}

// brief is a value on one line as far as a page shows one inline (the
// value block shows 120 characters, or 100 and the whole one folded):
// compactJSON within lineBytes.
func brief(v any) string { return budgeted(v, "", lineBytes) }

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
		return textCut(v, 200)
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

// compactJSON is a whole value on one line, for a form to send back (a
// hidden field, an option's value); pages show values with brief.
func compactJSON(v any) string {
	b, err := marshal(v, "")
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// marshal is JSON as a person reads it: without the \u003c, \u003e and
// \u0026 escapes encoding/json adds for script contexts (html/template
// escapes what the page shows), indented when indent is given.
func marshal(v any, indent string) ([]byte, error) {
	if raw, ok := v.(json.RawMessage); ok {
		var x any
		if json.Unmarshal(raw, &x) == nil {
			v = x
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// when is a timer's RFC 3339 time as a person reads it: how far off it
// is, and the time of day in UTC to the second ("in 4m 10s (at 07:12:05
// UTC)"); the page's script counts it down.
func when(v any) string {
	s, _ := v.(string)
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return relative(time.Until(t)) + " (at " + clock(t) + ")"
}

// relative is a duration from now in words: "in 4m 10s", "3s ago".
func relative(d time.Duration) string {
	past := d < 0
	if past {
		d = -d
	}
	d = d.Round(time.Second)
	var out string
	switch {
	case d < time.Minute:
		out = fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		out = fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		out = fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		out = fmt.Sprintf("%dd", int(d.Hours()/24))
	}
	if past {
		return out + " ago"
	}
	return "in " + out
}

// clock is a time of day in UTC, with the date when it is not today.
func clock(t time.Time) string {
	t = t.UTC()
	if y, m, d := t.Date(); y == time.Now().UTC().Year() && m == time.Now().UTC().Month() && d == time.Now().UTC().Day() {
		return t.Format("15:04:05 UTC")
	}
	return t.Format("2006-01-02 15:04:05 UTC")
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
