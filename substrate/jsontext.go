package substrate

import (
	"encoding/json"
	"sort"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/substrate/errs"
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
			if i+5 < len(raw) && raw[i+1] == 'u' && string(raw[i+2:i+6]) == "0000" {
				return errNUL
			}
			i++
		}
	}
	return nil
}

var errNUL = errs.New(errs.InvalidJSON, `the JSON has a string holding the NUL character (\u0000), which cannot be stored`).
	WithHint(`remove the NUL characters; encode binary data (base64, say) before putting it in a string`)

// auditParams is what an audit entry or invocation message records of
// params: the params themselves when they are storable and within the
// value limit, else a summary (their size and top-level names), so a
// refused 800 KB call costs the log a few bytes, and an unstorable one
// is still audited.
func (s *Service) auditParams(params map[string]any) any {
	raw, err := json.Marshal(params)
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
