// Package write is the write path's rules (issue 45 item 1): what makes a
// state write and a batch valid before any database work (Validate,
// Batch), what a stored value must be (CheckValue), the value a set,
// increment or merge leaves on an entry (NewValue), who may change an
// entry's gate (GateChange), what an expression write may store
// (ExprResult), the write an action's template renders (Render), a
// request's meta and params (Meta, Params) and an invocation's summary
// of what it wrote (Summary, Ref). It needs no room and no SQL: the core (substrate/write.go,
// substrate/state.go) reads the rows under the room lock, hands their
// values here, and writes what these rules return, so the rules can be
// read and tested apart from the machinery (group commit, the snapshot
// cache) that makes them fast.
package write

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
	"strconv"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/internal/jsontext"
)

// Limits are the server's limits a write is held to (the core's Limits
// of the same names).
type Limits struct {
	// MaxValueBytes caps a value as compact JSON; MaxValueDepth how
	// deeply its arrays and objects nest.
	MaxValueBytes, MaxValueDepth int
	// MaxScopeBytes and MaxKeyBytes cap a scope name and a key.
	MaxScopeBytes, MaxKeyBytes int
}

// Write is one direct state write (PUT /rooms/:id/state and each element of
// a batch). Exactly one of Value, Merge and Delete is given.
type Write struct {
	Scope string `json:"scope"`
	// Key names the entry; an append write may omit it (the key is then its
	// sort_key in decimal).
	Key string `json:"key,omitempty"`
	// Value replaces the entry.
	Value json.RawMessage `json:"value,omitempty"`
	// Merge shallow-merges an object into the entry (inserts it if absent).
	Merge json.RawMessage `json:"merge,omitempty"`
	// Append adds a log entry whose sort_key is the room's next seq.
	Append bool `json:"append,omitempty"`
	// Delete removes the entry.
	Delete bool `json:"delete,omitempty"`
	// Increment adds a number to the entry (absent counts as 0).
	Increment *json.Number `json:"increment,omitempty"`
	// IfVersion makes the write conditional: the entry's current version
	// must equal it (0: the entry must not exist).
	IfVersion *int64 `json:"if_version,omitempty"`
	// Timer gives the entry a lifecycle (see Timer).
	Timer *defs.Timer `json:"timer,omitempty"`
	// Expr makes Value (or Merge) a CEL expression, given as a JSON
	// string and evaluated with the writer's read authority under the
	// room lock; its result is what is stored (or merged).
	Expr bool `json:"expr,omitempty"`
	// Enabled is a CEL expression gating the entry's visibility: while
	// false, readers do not see it (seed 001, universal on entries). A
	// write that gives none keeps the gate of the entry it replaces.
	Enabled string `json:"enabled,omitempty"`
	// Ungate removes the entry's gate (REST: "enabled": ""). Room
	// authority may with any write; others with a whole value, since a
	// merge or increment keeps the value the gate hid. Not with Enabled.
	Ungate bool `json:"-"`
}

// Op is one resolved state write, from a direct write, an action or the
// core's own bookkeeping. Exactly one of Value, Merge, Increment and
// Delete is set.
type Op struct {
	Scope, Key string
	Value      json.RawMessage
	Merge      json.RawMessage
	Deep       bool // merge recursively (action writes); shallow otherwise
	Append     bool
	Delete     bool
	Increment  *json.Number
	IfVersion  *int64
	Timer      *defs.Timer
	Enabled    string
	Ungate     bool // remove the entry's gate (Write.Ungate)
}

// Op is w as the write path applies it: an expression write's Value or
// Merge is still its source until ExprResult replaces it.
func (w *Write) Op() Op {
	return Op{Scope: w.Scope, Key: w.Key, Value: w.Value, Merge: w.Merge, Append: w.Append, Delete: w.Delete,
		Increment: w.Increment, IfVersion: w.IfVersion, Timer: w.Timer, Enabled: w.Enabled, Ungate: w.Ungate}
}

// ExprSource is the CEL source of an expression write ("" when its value
// is not a JSON string).
func (w *Write) ExprSource() string {
	src := w.Value
	if !hasJSON(src) {
		src = w.Merge
	}
	var code string
	_ = json.Unmarshal(src, &code)
	return code
}

func hasJSON(raw json.RawMessage) bool { return len(raw) > 0 }

// Validate checks a write's shape before any database work, resolving the
// reader's names for its scope (w.Scope is the scope's own name after).
// i names the write in a batch (-1: a single write). Whether p may write
// the scope is authority's (CanWrite), asked by the caller.
func Validate(p *authority.Principal, cel *expr.Env, lim Limits, i int, w *Write) error {
	e := nameError(p, lim, w)
	if e == nil {
		e = opError(cel, w)
	}
	if e == nil {
		e = limitError(lim, w)
	}
	if e != nil {
		if i >= 0 {
			e = e.With("write", i)
		}
		return e
	}
	return nil
}

// Batch refuses a batch of n writes that is empty or holds more than
// limit (the core's Limits.MaxBatchWrites).
func Batch(n, limit int) error {
	if n == 0 {
		return errs.New(errs.InvalidField, "no writes").WithHint(`send {"writes": [{"scope": …, "key": …, "value": …}, …]}`)
	}
	if n > limit {
		return errs.New(errs.InvalidField, "%d writes, over the limit of %d per batch", n, limit).
			WithHint("split the batch; each batch is applied atomically on its own")
	}
	return nil
}

// nameError checks the write's scope (resolving the reader's names for
// it) and key.
func nameError(p *authority.Principal, lim Limits, w *Write) *errs.Error {
	scope, err := authority.ResolveScope(p, w.Scope)
	if err != nil {
		return err.(*errs.Error)
	}
	w.Scope = scope
	if err := authority.ValidName("scope", w.Scope, lim.MaxScopeBytes, true); err != nil {
		return err.(*errs.Error)
	}
	if w.Key != "" || !w.Append {
		if err := authority.ValidKey(w.Key, lim.MaxKeyBytes); err != nil {
			return err.(*errs.Error)
		}
	}
	return nil
}

// opError checks that the write is exactly one op, with what that op
// takes: an expression or a merge object, a gate, an append's value.
func opError(cel *expr.Env, w *Write) *errs.Error {
	n := 0
	for _, set := range []bool{hasJSON(w.Value), hasJSON(w.Merge), w.Delete, w.Increment != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return errs.New(errs.InvalidField, "a write needs exactly one of value, merge, increment and delete").
			WithHint(`send {"scope": …, "key": …, "value": …} to replace, "merge": {…} to merge, "increment": n to add, or "delete": true`)
	}
	if w.Expr {
		code := w.ExprSource()
		if code == "" {
			return errs.New(errs.InvalidField, "with expr: true, value (or merge) is a CEL expression string").With("field", "expr").
				WithHint(`e.g. {"scope": "_shared", "key": "total", "value": "state._shared.a + state._shared.b", "expr": true}`)
		}
		if err := defs.CompileField(cel, "expr", code); err != nil {
			return errs.From(err)
		}
	} else if hasJSON(w.Merge) && w.Merge[0] != '{' {
		return errs.New(errs.InvalidField, "merge must be a JSON object").WithHint(`use "value" to store a non-object`)
	}
	if w.Ungate && w.Enabled != "" {
		return errs.New(errs.InvalidField, "a write cannot both give the entry a gate and remove it").With("field", "enabled").
			WithHint(`give "enabled" an expression to gate the entry, or "" to remove its gate`)
	}
	if w.Enabled != "" {
		if err := defs.CompileField(cel, "enabled", w.Enabled); err != nil {
			return errs.From(err)
		}
	}
	if w.Append && !hasJSON(w.Value) {
		return errs.New(errs.InvalidField, "an append write takes a value").WithHint("send append: true with value; merge into an existing append entry by key without append")
	}
	if w.Append && w.IfVersion != nil {
		return errs.New(errs.InvalidField, "if_version does not apply to an append write").WithHint("drop if_version: an append always creates a new entry")
	}
	return nil
}

// limitError checks the write's timer, if_version and the size and depth
// of its value.
func limitError(lim Limits, w *Write) *errs.Error {
	if w.Timer != nil {
		if err := w.Timer.Validate("timer"); err != nil {
			return err.(*errs.Error)
		}
	}
	if w.IfVersion != nil && *w.IfVersion < 0 {
		return errs.New(errs.InvalidField, "if_version must be ≥ 0").WithHint("use 0 for \"must not exist\" or the version you read")
	}
	for _, raw := range []json.RawMessage{w.Value, w.Merge} {
		if len(raw) > lim.MaxValueBytes {
			return TooLarge(lim, w.Scope, w.Key, len(raw))
		}
		if Depth(raw, lim.MaxValueDepth) > lim.MaxValueDepth {
			return TooDeep(lim, "the value for "+w.Scope+"/"+w.Key).With("scope", w.Scope).With("key", w.Key)
		}
	}
	return nil
}

// TooLarge is the error for a value of n bytes past Limits.MaxValueBytes.
func TooLarge(lim Limits, scope, key string, n int) *errs.Error {
	return errs.New(errs.ValueTooLarge, "value for %s/%s is %d bytes, over the limit of %d", scope, key, n, lim.MaxValueBytes).
		WithHint("store smaller values, or split the data over several keys").With("limit", lim.MaxValueBytes)
}

// TooDeep is the error for a value nested past Limits.MaxValueDepth.
func TooDeep(lim Limits, what string) *errs.Error {
	return errs.New(errs.InvalidValue, "%s nests arrays and objects more than %d levels deep, the server's limit", what, lim.MaxValueDepth).
		With("limit", lim.MaxValueDepth).
		WithHint("flatten it: keep nested parts under keys of their own (or in a list of records that name their parent), or send a deep structure as a string")
}

// CheckValue is raw as stored (compact), or the refusal of a value the
// server does not store. Every stored value passes here (direct writes,
// actions' writes and expression values, messages, definitions, features'
// documents), so no surface stores one the limits refuse.
func CheckValue(lim Limits, scope, key string, raw json.RawMessage) (json.RawMessage, error) {
	if err := CheckJSONText(raw); err != nil {
		return nil, err.(*errs.Error).With("scope", scope).With("key", key)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, errs.New(errs.InvalidJSON, "value for %s/%s is not valid JSON: %v", scope, key, err).WithHint("send valid JSON")
	}
	if b.Len() > lim.MaxValueBytes {
		return nil, TooLarge(lim, scope, key, b.Len())
	}
	if Depth(b.Bytes(), lim.MaxValueDepth) > lim.MaxValueDepth {
		return nil, TooDeep(lim, "the value for "+scope+"/"+key).With("scope", scope).With("key", key)
	}
	return b.Bytes(), nil
}

// Current is the live entry a write lands on, as the core read it under
// the room lock.
type Current struct {
	Value json.RawMessage
	// Append: an append entry (it has a sort_key), never replaced.
	Append bool
	// Gate is the entry's enabled expression (nil: none).
	Gate *string
}

// NewValue is the value a set, increment or merge leaves on cur (nil when
// absent), and the op's audit name. An append entry is never replaced.
func NewValue(o *Op, cur *Current) (json.RawMessage, string, error) {
	switch {
	case o.Value != nil:
		if cur != nil && cur.Append {
			return nil, "", errs.New(errs.AppendOnly, "%s/%s is an append entry and cannot be replaced", o.Scope, o.Key).
				WithHint("merge into it with \"merge\": {…}, or append a new entry")
		}
		return o.Value, "set", nil
	case o.Increment != nil:
		base := json.Number("0")
		if cur != nil {
			var n json.Number
			if err := defs.DecodeNumber(cur.Value, &n); err != nil {
				return nil, "", errs.New(errs.NotNumeric, "%s/%s holds a %s, and increment needs a number", o.Scope, o.Key, kind(cur.Value)).
					WithHint("replace it with a number first, or increment another key")
			}
			base = n
		}
		value, err := addNumbers(base, *o.Increment)
		if err != nil {
			return nil, "", err.With("scope", o.Scope).With("key", o.Key)
		}
		return value, "increment", nil
	default:
		var oldValue json.RawMessage
		if cur != nil {
			oldValue = cur.Value
		}
		value, err := mergeJSON(oldValue, o.Merge, o.Deep)
		if err != nil {
			return nil, "", errs.New(errs.NotMergeable, "%s/%s holds a %s, and merge needs an object", o.Scope, o.Key, kind(oldValue)).
				WithHint("replace it with \"value\" instead")
		}
		return value, "merge", nil
	}
}

// GateChange refuses a merge or increment that changes or removes a gated
// entry's gate. A merge or increment keeps the value, so giving it
// another gate would let a writer the old gate hides read it (a merge of
// {} with enabled "true", or removing the gate). Only room authority
// (admin) may; others change or remove a gated entry's gate with a whole
// value.
func GateChange(o *Op, cur *Current, admin bool) error {
	if o.Value == nil && (o.Ungate || o.Enabled != "") && cur != nil && cur.Gate != nil && (o.Ungate || *cur.Gate != o.Enabled) && !admin {
		change, hint := "change", "replace the value (\"value\") to give the entry another gate"
		if o.Ungate {
			change, hint = "remove", "replace the value (\"value\") with \"enabled\": \"\" to remove the gate"
		}
		return errs.New(errs.Forbidden, "%s/%s is gated by an enabled expression, and a merge or increment cannot %s its gate", o.Scope, o.Key, change).
			With("scope", o.Scope).With("key", o.Key).WithHint("%s", hint)
	}
	return nil
}

// ExprResult puts v, what an expression write's source evaluated to, in
// o as the value it stores (or, for a merge expression, the object it
// merges): JSON within Limits.MaxValueBytes, and a map for a merge.
func ExprResult(lim Limits, o *Op, v any) error {
	out, err := json.Marshal(v)
	if err != nil {
		return errs.New(errs.CELError, "the expression's result cannot be stored: %v", err).WithHint("return JSON-shaped values")
	}
	if len(out) > lim.MaxValueBytes {
		return TooLarge(lim, o.Scope, o.Key, len(out))
	}
	if hasJSON(o.Merge) {
		if _, isMap := v.(map[string]any); !isMap {
			return errs.New(errs.CELError, "the merge expression gave %s, not a map", expr.KindOf(v)).WithHint("return a map from a merge expression")
		}
		o.Merge = out
	} else {
		o.Value = out
	}
	return nil
}

// mergeJSON merges patch (an object) into base (absent, or an object).
// Shallow replaces top-level fields; deep recurses into nested objects
// (other values, arrays included, are replaced; null sets null).
func mergeJSON(base, patch json.RawMessage, deep bool) (json.RawMessage, error) {
	var p map[string]any
	if err := defs.DecodeNumber(patch, &p); err != nil || p == nil {
		return nil, errNotObject
	}
	b := map[string]any{}
	if len(base) > 0 {
		if err := defs.DecodeNumber(base, &b); err != nil || b == nil {
			return nil, errNotObject
		}
	}
	mergeMaps(b, p, deep)
	return json.Marshal(b)
}

var errNotObject = errs.New(errs.NotMergeable, "not an object")

func mergeMaps(dst, src map[string]any, deep bool) {
	for k, v := range src {
		if deep {
			if sv, ok := v.(map[string]any); ok {
				if dv, ok := dst[k].(map[string]any); ok {
					mergeMaps(dv, sv, true)
					continue
				}
			}
		}
		dst[k] = v
	}
}

// addNumbers adds whole numbers exactly (as 64-bit integers) and others as
// doubles. A sum past either range is refused, never wrapped or rounded to
// infinity.
func addNumbers(a, b json.Number) (json.RawMessage, *errs.Error) {
	if x, err := a.Int64(); err == nil {
		if y, err := b.Int64(); err == nil {
			if (y > 0 && x > math.MaxInt64-y) || (y < 0 && x < math.MinInt64-y) {
				return nil, errs.New(errs.InvalidField, "increment by %d would take %d past the range of whole numbers (±9223372036854775807)", y, x).
					WithHint("reset the counter with a value write, or keep it within 64-bit integers")
			}
			return json.RawMessage(strconv.FormatInt(x+y, 10)), nil
		}
	}
	x, _ := a.Float64()
	y, _ := b.Float64()
	sum := x + y
	if math.IsInf(sum, 0) || math.IsNaN(sum) {
		return nil, errs.New(errs.InvalidField, "increment by %s would take %s past the range of numbers", b, a).
			WithHint("reset the value with a value write")
	}
	out, err := json.Marshal(sum)
	if err != nil {
		return nil, errs.New(errs.InvalidField, "the sum cannot be stored: %v", err).WithHint("reset the value with a value write")
	}
	return out, nil
}

// kind is the JSON type of a stored value, as refusals name it.
func kind(v json.RawMessage) string {
	switch {
	case len(v) == 0:
		return "nothing"
	case v[0] == '{':
		return "object"
	case v[0] == '[':
		return "list"
	case v[0] == '"':
		return "string"
	case v[0] == 't' || v[0] == 'f':
		return "boolean"
	case v[0] == 'n':
		return "null"
	}
	return "number"
}

// What the server stores of JSON: text PostgreSQL can store, within the
// value limits (Limits.MaxValueBytes, MaxValueDepth).

// CheckJSONText refuses JSON that PostgreSQL cannot store as jsonb: bytes
// that are not UTF-8, and strings holding NUL (\u0000). Every surface
// checks request bodies with it before decoding, and every stored value
// passes it again, so such input is a 400 that names the problem, never a
// failed statement (500).
//
// Each refusal is the caller's own: callers add details to it (the
// entry, the field), and a refusal shared between requests would carry
// one request's scope and key into another's answer, and race.
func CheckJSONText(raw []byte) error {
	err := jsontext.Check(raw)
	if e, ok := err.(*errs.Error); ok {
		c := *e
		c.Details = maps.Clone(e.Details)
		return &c
	}
	return err
}

// Depth and ValueDepth measure how deeply JSON text and a decoded value
// nest, counting no further than limit (compare with Limits.MaxValueDepth,
// refused with TooDeep).
var (
	Depth      = jsontext.Depth
	ValueDepth = jsontext.ValueDepth
)
