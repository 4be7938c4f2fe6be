package substrate

// What the server stores of JSON: text PostgreSQL can store, within the
// value limits (Limits.MaxValueBytes, MaxValueDepth), and what an audit
// entry records of params that are not.

import (
	"sort"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/internal/jsontext"
)

// CheckJSONText refuses JSON that PostgreSQL cannot store as jsonb: bytes
// that are not UTF-8, and strings holding NUL (\u0000). Every surface
// checks request bodies with it before decoding, and every stored value
// passes it again, so such input is a 400 that names the problem, never a
// failed statement (500).
func CheckJSONText(raw []byte) error { return jsontext.Check(raw) }

// jsonDepth and valueDepth measure how deeply a value nests, against
// Limits.MaxValueDepth (tooDeep).
var (
	jsonDepth  = jsontext.Depth
	valueDepth = jsontext.ValueDepth
)

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

// tooDeep is the error for a value nested past Limits.MaxValueDepth.
func (s *Service) tooDeep(what string) *errs.Error {
	return errs.New(errs.InvalidValue, "%s nests arrays and objects more than %d levels deep, the server's limit", what, s.lim.MaxValueDepth).
		With("limit", s.lim.MaxValueDepth).
		WithHint("flatten it: keep nested parts under keys of their own (or in a list of records that name their parent), or send a deep structure as a string")
}
