package substrate

import (
	"sort"
	"strconv"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/write"
)

// op is one resolved state write (the write path's rules are
// substrate/write's; this file reads and writes the rows they judge).
type op = write.Op

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
	value, err := write.CheckValue(b.s.writeLimits(), o.Scope, o.Key, o.Value)
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
	cur := old.current()
	value, opName, err := write.NewValue(o, cur)
	if err != nil {
		return err
	}
	value, err = write.CheckValue(b.s.writeLimits(), o.Scope, o.Key, value)
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
	// m.p is nil for an anonymous open-join, which is no room authority.
	if err := write.GateChange(o, cur, m.p != nil && m.p.Admin()); err != nil {
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

// current is r as the write rules see the live entry a write lands on
// (nil: absent).
func (r *row) current() *write.Current {
	if r == nil {
		return nil
	}
	return &write.Current{Value: r.Value, Append: r.SortKey != nil, Gate: r.enabled}
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

// writeLimits are the limits the write rules hold a write to.
func (s *Service) writeLimits() write.Limits {
	return write.Limits{MaxValueBytes: s.lim.MaxValueBytes, MaxValueDepth: s.lim.MaxValueDepth,
		MaxScopeBytes: s.lim.MaxScopeBytes, MaxKeyBytes: s.lim.MaxKeyBytes}
}

// CheckJSONText refuses JSON that PostgreSQL cannot store as jsonb
// (write.CheckJSONText): every surface checks request bodies with it
// before decoding.
func CheckJSONText(raw []byte) error { return write.CheckJSONText(raw) }

// valueDepth measures how deeply a value nests, against
// Limits.MaxValueDepth (write.TooDeep).
var valueDepth = write.ValueDepth
