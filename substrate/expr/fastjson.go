package expr

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// DecodeJSON parses the first JSON value of raw as a json.Decoder with
// UseNumber does (numbers as json.Number, objects as map[string]any),
// with the same result and the same errors. Values are decoded on every
// invocation (parameters, state values read back, write templates), and
// a json.Decoder allocates a reader and a buffer of its own each time: the
// common shapes (no escapes in strings, the value alone) are parsed here
// without them; anything else goes to encoding/json.
func DecodeJSON(raw []byte) (any, error) {
	p := fastParser{b: raw}
	p.space()
	if v, ok := p.value(0); ok {
		p.space()
		if p.i == len(p.b) {
			return v, nil
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// fastParser parses the subset of JSON DecodeJSON takes; ok false means
// "not in the subset" (or not JSON), and the caller starts over with
// encoding/json.
type fastParser struct {
	b []byte
	i int
}

// maxFastDepth bounds the recursion (encoding/json refuses past 10,000).
const maxFastDepth = 64

func (p *fastParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *fastParser) value(depth int) (any, bool) {
	if p.i >= len(p.b) || depth > maxFastDepth {
		return nil, false
	}
	switch c := p.b[p.i]; {
	case c == '{':
		p.i++
		m := map[string]any{}
		p.space()
		if p.i < len(p.b) && p.b[p.i] == '}' {
			p.i++
			return m, true
		}
		for {
			p.space()
			k, ok := p.str()
			if !ok {
				return nil, false
			}
			p.space()
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				return nil, false
			}
			p.i++
			p.space()
			v, ok := p.value(depth + 1)
			if !ok {
				return nil, false
			}
			m[k] = v // a repeated key: the last one wins, as in encoding/json
			p.space()
			if p.i >= len(p.b) {
				return nil, false
			}
			if p.b[p.i] == '}' {
				p.i++
				return m, true
			}
			if p.b[p.i] != ',' {
				return nil, false
			}
			p.i++
		}
	case c == '[':
		p.i++
		a := []any{}
		p.space()
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			return a, true
		}
		for {
			p.space()
			v, ok := p.value(depth + 1)
			if !ok {
				return nil, false
			}
			a = append(a, v)
			p.space()
			if p.i >= len(p.b) {
				return nil, false
			}
			if p.b[p.i] == ']' {
				p.i++
				return a, true
			}
			if p.b[p.i] != ',' {
				return nil, false
			}
			p.i++
		}
	case c == '"':
		return p.str()
	case c == 't':
		return true, p.lit("true")
	case c == 'f':
		return false, p.lit("false")
	case c == 'n':
		return nil, p.lit("null")
	case c == '-' || c >= '0' && c <= '9':
		return p.num()
	}
	return nil, false
}

func (p *fastParser) lit(s string) bool {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// str parses a string without escapes or control characters, in valid
// UTF-8 (encoding/json replaces invalid bytes, which is left to it).
func (p *fastParser) str() (string, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	start := p.i + 1
	ascii := true
	for j := start; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			s := p.b[start:j]
			if !ascii && !utf8.Valid(s) {
				return "", false
			}
			p.i = j + 1
			return string(s), true
		case c == '\\' || c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", false
}

// num parses a number by JSON's grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *fastParser) num() (any, bool) {
	b, j := p.b, p.i
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case j < len(b) && b[j] >= '1' && b[j] <= '9':
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
	default:
		return nil, false
	}
	if j < len(b) && b[j] == '.' {
		j++
		if j >= len(b) || b[j] < '0' || b[j] > '9' {
			return nil, false
		}
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if j >= len(b) || b[j] < '0' || b[j] > '9' {
			return nil, false
		}
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
	}
	n := json.Number(b[p.i:j])
	p.i = j
	return n, true
}
