package mcp

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
)

// Text is the compact rendering of a result a model reads: the JSON's
// content as indented "key: value" lines (YAML-like), in the JSON's own
// order, without the braces, quotes and commas that make up a fifth of a
// context's JSON. The same result goes as JSON in structuredContent, for
// programs; the two are not the same bytes twice.
func Text(raw []byte) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var b strings.Builder
	if err := renderValue(&b, dec, 0, true); err != nil {
		return string(raw) // not JSON we made: show it as it is
	}
	return strings.TrimRight(b.String(), "\n")
}

// inlineWidth is the widest list or object of scalars written on one line.
const inlineWidth = 240

// textDepth is the deepest level written as indented lines; a value
// below it is written as its JSON, on one line. Each level indents every
// line under it and is copied up once per level above it, so without a
// bound one value nested 9,900 levels deep (stored before values' nesting
// was bounded) made a text of 48 MB from 40 KB of JSON (issue 41).
// A room's values nest at most 64 levels since, under a context's own
// few; 32 leaves ordinary values as they were.
const textDepth = 32

// renderValue writes the next value of dec at indent. top is true for a
// document's root, whose object keys start at column 0.
func renderValue(b *strings.Builder, dec *json.Decoder, indent int, top bool) error {
	if indent >= textDepth {
		return renderRaw(b, dec, top)
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		return renderContainer(b, dec, indent, top, t == '{')
	case string:
		b.WriteString(scalar(t))
	case json.Number:
		b.WriteString(t.String())
	case bool:
		b.WriteString(map[bool]string{true: "true", false: "false"}[t])
	case nil:
		b.WriteString("null")
	}
	if top {
		b.WriteByte('\n')
	}
	return nil
}

// renderRaw writes the next value of dec as its JSON, on one line (a
// string as a scalar): the value is past textDepth.
func renderRaw(b *strings.Builder, dec *json.Decoder, top bool) error {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	var str string
	if raw[0] == '"' && json.Unmarshal(raw, &str) == nil {
		b.WriteString(scalar(str))
	} else {
		b.Write(raw)
	}
	if top {
		b.WriteByte('\n')
	}
	return nil
}

// renderContainer writes the object (obj) or list whose opening delimiter
// dec just read: on one line when short, else one item a line.
func renderContainer(b *strings.Builder, dec *json.Decoder, indent int, top, obj bool) error {
	items, err := readItems(dec, indent, obj)
	if err != nil {
		return err
	}
	if len(items) == 0 {
		b.WriteString(map[bool]string{true: "{}", false: "[]"}[obj])
		if top {
			b.WriteByte('\n')
		}
		return nil
	}
	if !top {
		if line, ok := inline(items, obj); ok {
			b.WriteString(line)
			return nil
		}
		b.WriteByte('\n')
	}
	writeItems(b, items, strings.Repeat("  ", indent), obj)
	return nil
}

// readItems renders the items of an object (obj) or list up to and with
// its closing delimiter, each at indent+1.
func readItems(dec *json.Decoder, indent int, obj bool) ([]item, error) {
	var items []item
	for dec.More() {
		var it item
		if obj {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			it.key = k.(string)
		}
		var sub strings.Builder
		if err := renderValue(&sub, dec, indent+1, false); err != nil {
			return nil, err
		}
		it.text = sub.String()
		items = append(items, it)
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return nil, err
	}
	return items, nil
}

// writeItems writes items one a line at pad: "key: value" for an object,
// "- value" for a list.
func writeItems(b *strings.Builder, items []item, pad string, obj bool) {
	for _, it := range items {
		b.WriteString(pad)
		text := it.text
		if obj {
			b.WriteString(plainKey(it.key))
			b.WriteByte(':')
		} else {
			b.WriteByte('-')
			// A block in a list starts on the dash's line: its lines
			// are indented one level, which is the dash's width.
			text = strings.TrimPrefix(text, "\n"+pad+"  ")
		}
		if !strings.HasPrefix(text, "\n") {
			b.WriteByte(' ')
		}
		b.WriteString(text)
		if !strings.HasSuffix(text, "\n") {
			b.WriteByte('\n')
		}
	}
}

type item struct{ key, text string }

// inline writes a short list or object of scalars on one line.
func inline(items []item, obj bool) (string, bool) {
	parts := make([]string, len(items))
	width := 0
	for i, it := range items {
		// A plain string holding a separator would read as two items.
		if strings.Contains(it.text, "\n") || (!strings.HasPrefix(it.text, `"`) && strings.ContainsAny(it.text, ",{}[]") && !strings.HasPrefix(it.text, "{") && !strings.HasPrefix(it.text, "[")) {
			return "", false
		}
		parts[i] = it.text
		if obj {
			parts[i] = plainKey(it.key) + ": " + it.text
		}
		width += len(parts[i]) + 2
	}
	if width > inlineWidth {
		return "", false
	}
	if obj {
		return "{" + strings.Join(parts, ", ") + "}", true
	}
	return "[" + strings.Join(parts, ", ") + "]", true
}

// plain is text that reads unambiguously without quotes: no leading or
// trailing space, no line breaks or quotes, nothing YAML would take for
// structure, a number, a boolean or null.
var plain = regexp.MustCompile(`^[^\s"'{}\[\],:#&*!|>%@` + "`" + `-][^"\n\r\t]*$`)

var notPlain = regexp.MustCompile(`^(true|false|null|~|[-+]?[0-9.]+([eE][-+]?[0-9]+)?)$|: | #|\s$`)

func scalar(s string) string {
	if plain.MatchString(s) && !notPlain.MatchString(s) {
		return s
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

func plainKey(k string) string {
	if k != "" && plain.MatchString(k) && !strings.Contains(k, ": ") {
		return k
	}
	return scalar(k)
}
