package substrate

import (
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
// value limit, else a summary (their size and top-level names), so a
// refused 800 KB call costs the log a few bytes, and an unstorable one
// is still audited.
func (s *Service) auditParams(params map[string]any) any {
	raw, err := expr.MarshalJSON(params)
	if err == nil && len(raw) <= s.lim.MaxValueBytes/4 && CheckJSONText(raw) == nil {
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
