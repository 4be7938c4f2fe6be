package expr

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// MarshalJSON is json.Marshal, byte for byte, for the JSON-shaped values
// the substrate builds (map[string]any, []any, strings, numbers, bools,
// nil, json.Number, json.RawMessage): every invocation encodes its audit
// entry, its message and its parameters, and encoding/json walks a
// map[string]any by reflection, allocating a copy of each key and value.
// Values of other types are encoded by encoding/json where they occur;
// anything it would refuse is left to json.Marshal whole, for its error.
func MarshalJSON(v any) ([]byte, error) {
	b, ok := appendJSON(make([]byte, 0, 256), v, 0)
	if !ok {
		return json.Marshal(v)
	}
	return b, nil
}

func appendJSON(b []byte, v any, depth int) ([]byte, bool) {
	if depth > maxFastDepth {
		return b, false
	}
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case string:
		return appendJSONString(b, x), true
	case bool:
		return strconv.AppendBool(b, x), true
	case int64:
		return strconv.AppendInt(b, x, 10), true
	case int:
		return strconv.AppendInt(b, int64(x), 10), true
	case float64:
		return appendJSONFloat(b, x)
	case json.Number:
		if x == "" {
			return append(b, '0'), true
		}
		if !validNumber(string(x)) {
			return b, false
		}
		return append(b, x...), true
	case map[string]any:
		if x == nil {
			return append(b, "null"...), true
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			var ok bool
			if b, ok = appendJSON(b, x[k], depth+1); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	case []any:
		if x == nil {
			return append(b, "null"...), true
		}
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendJSON(b, e, depth+1); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return b, false
	}
	return append(b, raw...), true
}

// appendJSONFloat formats as encoding/json's float64 encoder does.
func appendJSONFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 becomes e-9, as encoding/json writes it.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

// validNumber reports whether s is a JSON number.
func validNumber(s string) bool {
	p := fastParser{b: []byte(s)}
	_, ok := p.num()
	return ok && p.i == len(s)
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s as encoding/json does with HTML escaping:
// <, > and & as \u003c, \u003e and \u0026, U+2028 and U+2029 escaped,
// invalid UTF-8 as \ufffd.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
