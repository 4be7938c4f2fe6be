// Package jsontext reads and writes JSON text as the server stores and
// sends it: whether PostgreSQL can store it as jsonb (Check), how deeply
// it nests (Depth, ValueDepth), and its encoding without HTML escaping
// (Encode). The rules that use them (which values are refused, with
// which limit; what an audit records of params; what the envelope
// encodes) are substrate/write's, substrate/defs/params.go's and
// substrate/envelope/json.go's.
package jsontext

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// Check refuses JSON that PostgreSQL cannot store as jsonb: bytes that
// are not UTF-8, strings holding NUL (\u0000), and lone UTF-16 surrogate
// escapes. The error is errs.InvalidJSON, naming the problem.
func Check(raw []byte) error {
	if !utf8.Valid(raw) {
		return errs.New(errs.InvalidJSON, "the JSON is not valid UTF-8").
			WithHint("send UTF-8 text; encode binary data (base64, say) before putting it in a string")
	}
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case 0:
			return errNUL
		case '\\': // escapes occur only inside strings
			if i+5 < len(raw) && raw[i+1] == 'u' {
				if string(raw[i+2:i+6]) == "0000" {
					return errNUL
				}
				// A UTF-16 surrogate must come as a high-low pair.
				if u, ok := hex4(raw[i+2 : i+6]); ok && u >= 0xD800 && u <= 0xDFFF {
					low, okLow := rune(0), false
					if u <= 0xDBFF && i+11 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
						low, okLow = hex4(raw[i+8 : i+12])
					}
					if !okLow || low < 0xDC00 || low > 0xDFFF {
						return errSurrogate
					}
					i += 6
				}
			}
			i++
		}
	}
	return nil
}

var errSurrogate = errs.New(errs.InvalidJSON, `the JSON has a lone UTF-16 surrogate escape (\uD800-\uDFFF not in a pair), which is not text`).
	WithHint("escape characters outside the basic plane as a surrogate pair, or send them as UTF-8")

func hex4(b []byte) (rune, bool) {
	var r rune
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

var errNUL = errs.New(errs.InvalidJSON, `the JSON has a string holding the NUL character (\u0000), which cannot be stored`).
	WithHint(`remove the NUL characters; encode binary data (base64, say) before putting it in a string`)

// Depth is how deeply raw's arrays and objects nest (0 for a scalar),
// read from its bytes without decoding them; it stops at the first level
// past limit and returns limit+1. raw is valid JSON.
func Depth(raw []byte, limit int) int {
	depth, deepest := 0, 0
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] == '\\' {
					i++
				}
			}
		case '[', '{':
			depth++
			if depth > deepest {
				if deepest = depth; deepest > limit {
					return deepest
				}
			}
		case ']', '}':
			depth--
		}
	}
	return deepest
}

// ValueDepth is Depth for a decoded value (maps, slices, scalars,
// json.RawMessage), stopping past limit the same way.
func ValueDepth(v any, limit int) int {
	if limit < 0 {
		return 0
	}
	deepest := 0
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			if d := ValueDepth(e, limit-1); d > deepest {
				if deepest = d; d > limit-1 {
					break
				}
			}
		}
	case []any:
		for _, e := range x {
			if d := ValueDepth(e, limit-1); d > deepest {
				if deepest = d; d > limit-1 {
					break
				}
			}
		}
	case json.RawMessage:
		return Depth(x, limit)
	default:
		return 0
	}
	return deepest + 1
}

// Encode is json.Marshal without HTML escaping, as the API writes.
func Encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
