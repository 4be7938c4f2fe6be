package substrate

import (
	"bytes"
	"encoding/json"
	"math"
	"sort"
	"strconv"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/internal/jsontext"
)

// op is one resolved state write, from a direct write or an action. Exactly
// one of Value, Merge, Increment and Delete is set.
type op struct {
	Scope, Key string
	Value      json.RawMessage
	Merge      json.RawMessage
	Deep       bool // merge recursively (action writes); shallow otherwise
	Append     bool
	Delete     bool
	Increment  *json.Number
	IfVersion  *int64
	Timer      *Timer
	Enabled    string
	Ungate     bool // remove the entry's gate (Write.Ungate)
}

// row is a stored entry with its lifecycle.
type row struct {
	Entry
	timer   *timerState
	enabled *string
}

type entryKey struct{ scope, key string }

// pendingWrite is a row to upsert (or delete) when the mutation commits;
// its revision is the mutation's seq, known only then.
type pendingWrite struct {
	r   *row
	del bool
	via string
}

const rowCols = `scope, key, value, version, sort_key, revision, writer, updated_at,
	timer_json, timer_expires_at, timer_ticks_left, timer_tick_on, timer_effect, timer_started_at, enabled_expr`

type scanner interface{ Scan(dest ...any) error }

func scanRow(sc scanner) (*row, error) {
	r := &row{}
	t := &timerState{}
	err := sc.Scan(&r.Scope, &r.Key, &r.Value, &r.Version, &r.SortKey, &r.Revision, &r.Writer, &r.UpdatedAt,
		&t.JSON, &t.ExpiresAt, &t.TicksLeft, &t.TickOn, &t.Effect, &t.StartedAt, &r.enabled)
	if t.Effect != nil {
		r.timer = t
	}
	return r, err
}

// loadRows reads, under the room lock, the rows the ops address. A mutable
// entry that the mutation's snapshot holds (loaded at the room's seq under
// the lock, so exact) is taken from it; only the others are read, in one
// statement: an invocation that updates existing entries makes no round
// trip here while the room is locked. A key the snapshot lacks may be an
// append entry, which only the table knows.
func loadRows(m *mutation, ops []op) (map[entryKey]*row, error) {
	scopes := make([]string, 0, len(ops))
	keys := make([]string, 0, len(ops))
	cur := map[entryKey]*row{}
	for _, o := range ops {
		if o.Key == "" {
			continue
		}
		if m.snap != nil && m.snap.seq == m.base {
			if r := m.snap.scopes[o.Scope][o.Key]; r != nil {
				c := *r.row
				cur[entryKey{o.Scope, o.Key}] = &c
				continue
			}
		}
		scopes = append(scopes, o.Scope)
		keys = append(keys, o.Key)
	}
	if len(keys) == 0 {
		return cur, nil
	}
	rows, err := m.tx.Query(m.ctx, sqlLoadRows, m.room, scopes, keys)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, err
		}
		cur[entryKey{r.Scope, r.Key}] = r
	}
	return cur, rows.Err()
}

// applyOps computes ops in order, each seeing the ones before it, against
// the rows read under the room lock, and queues the result on m. An entry
// whose timer has run out counts as absent. It returns the entries as
// written (a deleted one with Version 0) and their audit records.
func (s *Service) applyOps(m *mutation, ops []op, via string) (written []*Entry, audit []map[string]any, err error) {
	failing := -1
	defer func() {
		// Name the failing write when there are several.
		if e, ok := err.(*errs.Error); ok && failing >= 0 && len(ops) > 1 {
			err = e.With("write", failing)
		}
	}()
	cur, err := loadRows(m, ops)
	if err != nil {
		return nil, nil, err
	}
	b := &opBatch{s: s, m: m, cur: cur, newKeys: map[string]int{}, audit: make([]map[string]any, 0, len(ops))}
	m.notePrior(cur, b.live)
	for i := range ops {
		failing = i
		o := &ops[i]
		if o.Append {
			err = b.appendOp(o)
		} else {
			err = b.writeOp(o)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	failing = -1
	if err := s.checkScopeCapacity(m, b.newKeys); err != nil {
		return nil, nil, err
	}
	out := make([]*Entry, 0, len(b.order))
	for _, k := range b.order {
		r := cur[k]
		m.pending = append(m.pending, pendingWrite{r: r, del: r.Version == 0, via: via})
		m.ticks = append(m.ticks, k.scope+"."+k.key)
		r.Timer = r.timer.describe(m.now) // the response says the entry's lifecycle, as a read would
		out = append(out, &r.Entry)
	}
	if b.gated {
		if err := s.checkEnabledBudget(m); err != nil {
			return nil, nil, err
		}
	}
	return out, b.audit, nil
}

// opBatch is applyOps' working set: the rows as the ops so far leave
// them, in the order first written, with their audit records.
type opBatch struct {
	s       *Service
	m       *mutation
	cur     map[entryKey]*row
	newKeys map[string]int
	// gated: an entry gets an enabled expression it did not have.
	gated bool
	order []entryKey
	audit []map[string]any
}

// live is the row as a reader sees it: nil when absent, deleted or
// expired.
func (b *opBatch) live(r *row) *row {
	if r == nil || r.Version == 0 || !r.timer.live(b.m.now) {
		return nil
	}
	return r
}

// appendOp adds a new entry and never overwrites one.
func (b *opBatch) appendOp(o *op) error {
	m := b.m
	sk := m.seq()
	if o.Key == "" {
		o.Key = strconv.FormatInt(sk, 10)
	}
	if b.live(b.cur[entryKey{o.Scope, o.Key}]) != nil {
		return errs.New(errs.KeyExists, "%s/%s already exists, and an append never overwrites", o.Scope, o.Key).
			WithHint("omit key to let the server number the entry, or choose a new key")
	}
	value, err := b.s.checkValue(o.Scope, o.Key, o.Value)
	if err != nil {
		return err
	}
	nr := &row{Entry: Entry{Scope: o.Scope, Key: o.Key, Value: value, Version: 1, SortKey: &sk}}
	b.s.setLifecycle(m, nr, nil, o)
	k := entryKey{o.Scope, o.Key}
	b.cur[k] = nr
	b.order = appendKey(b.order, k)
	if o.Scope == ScopeMessages {
		m.messages++
	}
	b.audit = append(b.audit, map[string]any{"op": "append", "scope": o.Scope, "key": o.Key, "version": 1})
	return nil
}

// writeOp sets, increments, merges or deletes one entry, after its
// if_version holds.
func (b *opBatch) writeOp(o *op) error {
	m := b.m
	k := entryKey{o.Scope, o.Key}
	old := b.live(b.cur[k])
	var curVersion int64
	if old != nil {
		curVersion = old.Version
	}
	if o.IfVersion != nil && *o.IfVersion != curVersion {
		return versionConflict(m, o, curVersion)
	}
	if o.Delete {
		return b.deleteOp(o, k, old, curVersion)
	}
	value, opName, err := newValue(o, old)
	if err != nil {
		return err
	}
	value, err = b.s.checkValue(o.Scope, o.Key, value)
	if err != nil {
		return err
	}
	nr := &row{Entry: Entry{Scope: o.Scope, Key: o.Key, Value: value, Version: curVersion + 1}}
	if old != nil {
		nr.SortKey = old.SortKey
	} else {
		opName = "insert"
		b.newKeys[o.Scope]++
	}
	if err := gateChangeRefused(m, o, old); err != nil {
		return err
	}
	b.s.setLifecycle(m, nr, old, o)
	if o.Enabled != "" && (old == nil || old.enabled == nil || *old.enabled != o.Enabled) {
		b.gated = true
	}
	b.cur[k] = nr
	b.order = appendKey(b.order, k)
	b.audit = append(b.audit, map[string]any{"op": opName, "scope": o.Scope, "key": o.Key, "version": nr.Version})
	return nil
}

// versionConflict is the error for an if_version that no longer holds.
func versionConflict(m *mutation, o *op, curVersion int64) error {
	// The read named is the one that shows versions (envelope/versions.go),
	// in the reader's name for the scope.
	read := o.Scope
	if m.p != nil && m.p.AgentID != "" && read == m.p.AgentID {
		read = ScopeSelf
	}
	return errs.New(errs.VersionConflict, "%s/%s is at version %d, not %d", o.Scope, o.Key, curVersion, *o.IfVersion).
		WithHint("someone wrote it since you read it: read it again with next (its version is versions.%s.%s), redo your change on its value, and retry with if_version: %d", read, o.Key, curVersion).
		WithNext(errs.Step{Op: errs.OpReadContext, Room: m.room, Args: versionsRead(read)}).
		With("scope", o.Scope).With("key", o.Key).With("current_version", curVersion).With("expected_version", *o.IfVersion)
}

// deleteOp removes a live entry; deleting an absent one is an error.
func (b *opBatch) deleteOp(o *op, k entryKey, old *row, curVersion int64) error {
	if old == nil {
		return errs.New(errs.KeyNotFound, "%s/%s does not exist", o.Scope, o.Key).WithHint("nothing to delete; read the scope to see its keys")
	}
	if o.Scope == ScopeMessages && old.SortKey != nil {
		b.m.messages--
	}
	b.cur[k] = &row{Entry: Entry{Scope: o.Scope, Key: o.Key}}
	b.order = appendKey(b.order, k)
	b.audit = append(b.audit, map[string]any{"op": "delete", "scope": o.Scope, "key": o.Key, "version": curVersion})
	return nil
}

// newValue is the value a set, increment or merge leaves on old (nil when
// absent), and the op's audit name. An append entry is never replaced.
func newValue(o *op, old *row) (json.RawMessage, string, error) {
	switch {
	case o.Value != nil:
		if old != nil && old.SortKey != nil {
			return nil, "", errs.New(errs.AppendOnly, "%s/%s is an append entry and cannot be replaced", o.Scope, o.Key).
				WithHint("merge into it with \"merge\": {…}, or append a new entry")
		}
		return o.Value, "set", nil
	case o.Increment != nil:
		base := json.Number("0")
		if old != nil {
			var n json.Number
			if err := defs.DecodeNumber(old.Value, &n); err != nil {
				return nil, "", errs.New(errs.NotNumeric, "%s/%s holds a %s, and increment needs a number", o.Scope, o.Key, jsonKind(old.Value)).
					WithHint("replace it with a number first, or increment another key")
			}
			base = n
		}
		value, err := addNumbers(base, *o.Increment)
		if err != nil {
			return nil, "", err.(*errs.Error).With("scope", o.Scope).With("key", o.Key)
		}
		return value, "increment", nil
	default:
		var oldValue json.RawMessage
		if old != nil {
			oldValue = old.Value
		}
		value, err := mergeJSON(oldValue, o.Merge, o.Deep)
		if err != nil {
			return nil, "", errs.New(errs.NotMergeable, "%s/%s holds a %s, and merge needs an object", o.Scope, o.Key, jsonKind(oldValue)).
				WithHint("replace it with \"value\" instead")
		}
		return value, "merge", nil
	}
}

// gateChangeRefused refuses a merge or increment that changes or removes
// a gated entry's gate. A merge or increment keeps the value, so giving
// it another gate would let a writer the old gate hides read it (a merge
// of {} with enabled "true", or removing the gate). Only room authority
// may; others change or remove a gated entry's gate with a whole value.
func gateChangeRefused(m *mutation, o *op, old *row) error {
	if o.Value == nil && (o.Ungate || o.Enabled != "") && old != nil && old.enabled != nil && (o.Ungate || *old.enabled != o.Enabled) && !m.p.Admin() {
		change, hint := "change", "replace the value (\"value\") to give the entry another gate"
		if o.Ungate {
			change, hint = "remove", "replace the value (\"value\") with \"enabled\": \"\" to remove the gate"
		}
		return errs.New(errs.Forbidden, "%s/%s is gated by an enabled expression, and a merge or increment cannot %s its gate", o.Scope, o.Key, change).
			With("scope", o.Scope).With("key", o.Key).WithHint("%s", hint)
	}
	return nil
}

// checkEnabledBudget refuses a mutation that writes entries with an
// `enabled` expression when, with it, a read of the room by the room token
// could not afford every gate within Limits.EnabledCostPerRead: for its
// own state and once more for each registrar of a live action or view
// (whose expressions read with that registrar's authority). The readers
// that come after never pay for more gates than the server evaluates,
// and the writer learns now rather than its readers later.
func (s *Service) checkEnabledBudget(m *mutation) error {
	snap, err := s.lockedSnapshot(m)
	if err != nil {
		return err
	}
	agents, err := m.presence()
	if err != nil {
		return err
	}
	after := snap.advance(s, m.pending, snap.seq, snap.messageCount)
	rc := &roomCtx{now: m.now, snap: after, agents: agents}
	rc.state, _ = s.stateFor(m.ctx, rc, func(string) bool { return true })
	ids := make([]string, 0, len(after.actions))
	for id := range after.actions {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if a := after.actions[id]; a.r.timer.live(m.now) {
			rc.stateAs(m.ctx, s, a.def.Scope, a.def.RegisteredBy, false)
		}
	}
	for _, v := range after.views {
		if v.r.timer.live(m.now) {
			rc.stateAs(m.ctx, s, v.def.Scope, v.def.RegisteredBy, true)
		}
	}
	if b := rc.budget(); b.cut > 0 {
		return errs.New(errs.EnabledBudget, "with this write the room's entry-level enabled expressions would cost more than %d per read (cel-go cost); nothing was written", s.lim.EnabledCostPerRead).
			With("limit", s.lim.EnabledCostPerRead).With("unevaluated", b.cut).
			WithHint("every read evaluates each entry's enabled expression, once per reader and once per registrar of an action or view: write the entry without enabled (or with a cheaper one), keep gated data in fewer entries, or delete gated entries nobody needs")
	}
	return nil
}

// setLifecycle gives a written row its timer and enabled expression: the
// write's own, else those of the live entry it replaces.
func (s *Service) setLifecycle(m *mutation, nr, old *row, o *op) {
	if o.Timer != nil {
		nr.timer = startTimer(o.Timer, m.now)
	} else if old != nil {
		nr.timer = old.timer
	}
	switch {
	case o.Ungate:
		nr.enabled = nil
	case o.Enabled != "":
		e := o.Enabled
		nr.enabled = &e
	case old != nil:
		nr.enabled = old.enabled
	}
}

func appendKey(ks []entryKey, k entryKey) []entryKey {
	for _, x := range ks {
		if x == k {
			return ks
		}
	}
	return append(ks, k)
}

func (s *Service) checkValue(scope, key string, raw json.RawMessage) (json.RawMessage, error) {
	if err := CheckJSONText(raw); err != nil {
		return nil, err.(*errs.Error).With("scope", scope).With("key", key)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, errs.New(errs.InvalidJSON, "value for %s/%s is not valid JSON: %v", scope, key, err).WithHint("send valid JSON")
	}
	if b.Len() > s.lim.MaxValueBytes {
		return nil, s.tooLarge(scope, key, b.Len())
	}
	// Every stored value passes here (direct writes, actions' writes and
	// expression values, messages, definitions, features' documents), so
	// no surface stores one deeper than the limit.
	if jsonDepth(b.Bytes(), s.lim.MaxValueDepth) > s.lim.MaxValueDepth {
		return nil, s.tooDeep("the value for "+scope+"/"+key).With("scope", scope).With("key", key)
	}
	return b.Bytes(), nil
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

// addNumbers adds two JSON numbers, staying integral when both are.
// addNumbers adds whole numbers exactly (as 64-bit integers) and others as
// doubles. A sum past either range is refused, never wrapped or rounded to
// infinity.
func addNumbers(a, b json.Number) (json.RawMessage, error) {
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

func jsonKind(v json.RawMessage) string {
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

// checkScopeCapacity refuses inserts that would take a scope past
// MaxKeysPerScope mutable keys. The count comes from the room's snapshot
// at the locked seq when this process has it (kept up to date by every
// mutation, so counting costs nothing); only a cold cache counts in SQL.
func (s *Service) checkScopeCapacity(m *mutation, newKeys map[string]int) error {
	snap := s.cachedSnap(m)
	for scope, n := range newKeys {
		var have int
		if snap != nil {
			have = len(snap.scopes[scope])
		} else if err := m.tx.QueryRow(m.ctx, sqlScopeKeys, m.room, scope).Scan(&have); err != nil {
			return err
		}
		if have+n > s.lim.MaxKeysPerScope {
			return errs.New(errs.ScopeFull, "scope %q has %d keys; %d more would pass the limit of %d", scope, have, n, s.lim.MaxKeysPerScope).
				WithHint("delete keys you no longer need, or keep bulk data in fewer, larger values")
		}
	}
	return nil
}

// What the server stores of JSON: text PostgreSQL can store, within the
// value limits (Limits.MaxValueBytes, MaxValueDepth).

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

// tooDeep is the error for a value nested past Limits.MaxValueDepth.
func (s *Service) tooDeep(what string) *errs.Error {
	return errs.New(errs.InvalidValue, "%s nests arrays and objects more than %d levels deep, the server's limit", what, s.lim.MaxValueDepth).
		With("limit", s.lim.MaxValueDepth).
		WithHint("flatten it: keep nested parts under keys of their own (or in a list of records that name their parent), or send a deep structure as a string")
}
