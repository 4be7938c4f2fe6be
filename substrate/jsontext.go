package substrate

import (
	"encoding/json"
	"sort"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
)

// CheckJSONText refuses JSON that PostgreSQL cannot store as jsonb: bytes
// that are not UTF-8, and strings holding NUL (\u0000). Every surface
// checks request bodies with it before decoding, and every stored value
// passes it again, so such input is a 400 that names the problem, never a
// failed statement (500).
func CheckJSONText(raw []byte) error {
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

// auditParams is what an audit entry or invocation message records of
// params: the params themselves when they are storable and within the
// value limits (size and depth), else a summary (their size and
// top-level names), so a refused 800 KB call costs the log a few bytes,
// and an unstorable one is still audited.
func (s *Service) auditParams(params map[string]any) any {
	raw, err := expr.MarshalJSON(params)
	// The invocation message holds params one level down: within the
	// depth limit only when params are under it.
	if err == nil && len(raw) <= s.lim.MaxValueBytes/4 && CheckJSONText(raw) == nil && jsonDepth(raw, s.lim.MaxValueDepth) < s.lim.MaxValueDepth {
		return params
	}
	names := make([]string, 0, len(params))
	for k := range params {
		if len(names) == 32 {
			break
		}
		if len(k) > 64 || CheckJSONText([]byte(k)) != nil {
			continue
		}
		names = append(names, k)
	}
	sort.Strings(names)
	return map[string]any{"_elided": true, "bytes": len(raw), "names": names}
}

// jsonDepth is how deeply raw's arrays and objects nest (0 for a
// scalar), read from its bytes without decoding them; it stops at the
// first level past limit and returns limit+1. raw is valid JSON.
func jsonDepth(raw []byte, limit int) int {
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

// valueDepth is jsonDepth for a decoded value (maps, slices, scalars,
// json.RawMessage), stopping past limit the same way.
func valueDepth(v any, limit int) int {
	if limit < 0 {
		return 0
	}
	deepest := 0
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			if d := valueDepth(e, limit-1); d > deepest {
				if deepest = d; d > limit-1 {
					break
				}
			}
		}
	case []any:
		for _, e := range x {
			if d := valueDepth(e, limit-1); d > deepest {
				if deepest = d; d > limit-1 {
					break
				}
			}
		}
	case json.RawMessage:
		return jsonDepth(x, limit)
	default:
		return 0
	}
	return deepest + 1
}

// tooDeep is the error for a value nested past Limits.MaxValueDepth.
func (s *Service) tooDeep(what string) *errs.Error {
	return errs.New(errs.InvalidValue, "%s nests arrays and objects more than %d levels deep, the server's limit", what, s.lim.MaxValueDepth).
		With("limit", s.lim.MaxValueDepth).
		WithHint("flatten it: keep nested parts under keys of their own (or in a list of records that name their parent), or send a deep structure as a string")
}
