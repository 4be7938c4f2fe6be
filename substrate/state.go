package substrate

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/write"
)

// Entry is one state entry.
type Entry struct {
	Scope     string          `json:"scope"`
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	Version   int64           `json:"version"`
	SortKey   *int64          `json:"sort_key,omitempty"`
	Revision  int64           `json:"revision"`
	Writer    string          `json:"writer"`
	UpdatedAt time.Time       `json:"updated_at"`
	// Timer is the entry's lifecycle, when it has one.
	Timer map[string]any `json:"timer,omitempty"`
	// Withheld: a write's response leaves out the value of an entry gated
	// by an enabled expression when the writer did not give the whole
	// value (a merge or an increment), as a read might not show it.
	Withheld bool `json:"withheld,omitempty"`
	// Gated and Disabled, in a state read with ReadQuery.Disabled (room
	// authority only): the entry has an enabled expression, and it is
	// false (or was not evaluated within the read's budget) for the room.
	Gated    bool `json:"gated,omitempty"`
	Disabled bool `json:"disabled,omitempty"`
}

// Write is one direct state write (PUT /rooms/:id/state and each element of
// a batch); its rules are substrate/write's.
type Write = write.Write

// WriteResult is what a write returns: the entries as written (a deleted
// entry has version 0 and no value) and the mutation's seq.
type WriteResult struct {
	Seq     int64   `json:"seq"`
	Entries []Entry `json:"entries"`
}

// validateWrite checks a write's shape before any database work
// (write.Validate); i names it in a batch (-1: a single write).
func (s *Service) validateWrite(p *Principal, i int, w *Write) error {
	return write.Validate(p, s.cel, s.writeLimits(), i, w)
}

// WriteState applies direct writes as one mutation: all of them or none.
func (s *Service) WriteState(ctx context.Context, p *Principal, roomID string, writes []Write, batch bool) (*WriteResult, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	if err := write.Batch(len(writes), s.lim.MaxBatchWrites); err != nil {
		return nil, err
	}
	ops := make([]op, len(writes))
	for i := range writes {
		idx := i
		if !batch {
			idx = -1
		}
		if err := s.validateWrite(p, idx, &writes[i]); err != nil {
			return nil, err
		}
		if err := checkWrite(p, writes[i].Scope); err != nil {
			return nil, err
		}
		ops[i] = writes[i].Op()
	}
	// Writes evaluate under the lock (expression values, the gates of
	// the entries they replace).
	ctx, done, err := s.work(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	defer done()
	res := &WriteResult{}
	var written []*Entry
	var hidden map[entryKey]bool
	seq, err := s.mutate(ctx, p, roomID, func(m *mutation) error {
		// Authority again, against the grants read under the lock.
		for i := range writes {
			if err := checkWrite(m.p, writes[i].Scope); err != nil {
				return err
			}
		}
		if err := s.evalWriteExprs(m, writes, ops); err != nil {
			return err
		}
		var audit []map[string]any
		var err error
		written, audit, err = s.applyOps(m, ops, "direct")
		if err != nil {
			return err
		}
		if !m.p.Admin() {
			hidden = withheldKeys(m, ops)
		}
		m.audit = map[string]any{"kind": "state_write", "via": "direct", "writes": audit}
		return nil
	})
	if err != nil {
		return nil, err
	}
	res.Seq = seq
	for _, e := range written {
		c := *e
		if hidden[entryKey{c.Scope, c.Key}] && c.Version > 0 {
			c.Value, c.Withheld = nil, true
		}
		res.Entries = append(res.Entries, c)
	}
	return res, nil
}

// withheldKeys are the entries whose values a write's response leaves
// out: gated ones the writer did not give whole. Merging {} into an entry
// whose gate hides it from the writer must not read it.
func withheldKeys(m *mutation, ops []op) map[entryKey]bool {
	derived := map[entryKey]bool{}
	for _, o := range ops {
		k := entryKey{o.Scope, o.Key}
		derived[k] = derived[k] || o.Value == nil && !o.Delete
	}
	out := map[entryKey]bool{}
	for _, w := range m.pending {
		if k := (entryKey{w.r.Scope, w.r.Key}); derived[k] && w.r.enabled != nil {
			out[k] = true
		}
	}
	return out
}

// ReadQuery selects what ReadState returns.
type ReadQuery struct {
	// Scope limits the read to one scope ("self" for the caller's own): its
	// mutable entries, then a page of its append entries. Without Scope,
	// the mutable entries of every visible scope are returned; logs are
	// read one scope at a time.
	Scope string
	// Key selects one entry of Scope.
	Key string
	// After pages a log: append entries with sort_key > After.
	After int64
	// Before, when set, reads a log from its newest end: the newest Limit
	// append entries with After < sort_key < Before, still oldest first
	// (math.MaxInt64 for the very newest); More then says older entries
	// were left out (page back with before=<first sort_key>). Zero: the
	// oldest Limit after After.
	Before int64
	// Limit caps the append entries returned. Default 100, at most
	// Limits.MaxLogPage.
	Limit int
	// Disabled keeps the entries whose enabled expression hides them,
	// marked Disabled, and marks every gated entry Gated: an owner's view
	// of the room (the dashboard). Room authority only; ignored for
	// anyone else, whom a gate hides an entry from as always.
	Disabled bool
}

// StateRead is the result of ReadState.
type StateRead struct {
	// Seq is the room's seq at the snapshot the read saw.
	Seq     int64   `json:"seq"`
	Entries []Entry `json:"entries"`
	// More is true when entries were cut: page a log on with
	// after=<last sort_key>; for a whole-room read, read scope by scope.
	More bool `json:"more,omitempty"`
}

const entryCols = `SELECT ` + rowCols + ` FROM state `

// liveSQL keeps the rows whose timer lets them be seen now: a "delete"
// timer that has not run out, or an "enable" timer that has.
const liveSQL = ` AND (timer_effect IS NULL OR ((coalesce(timer_expires_at <= now(), false) OR coalesce(timer_ticks_left <= 0, false)) = (timer_effect = 'enable')))`

// ReadState returns the state p may see, from one consistent snapshot.
func (s *Service) ReadState(ctx context.Context, p *Principal, roomID string, q ReadQuery) (*StateRead, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	if err := s.checkReadQuery(p, &q); err != nil {
		return nil, err
	}
	ctx, done, err := s.work(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	defer done()
	out := &StateRead{Entries: []Entry{}}
	var gated []gatedEntry
	err = s.db.ReadTx(ctx, func(ctx context.Context, tx pgx.Tx) (err error) {
		vis, err := s.visibilityIn(ctx, tx, p, roomID)
		if err != nil {
			return err
		}
		if q.Scope != "" && !vis.Entry(q.Scope, q.Key) {
			return vis.Refuse(q.Scope, q.Key)
		}
		var born time.Time
		var msgCount int64
		if err := tx.QueryRow(ctx, `SELECT seq, created_at, message_count FROM rooms WHERE id = $1`, roomID).Scan(&out.Seq, &born, &msgCount); err != nil {
			return err
		}
		defer func() {
			if err == nil {
				// What the queries select, the read rule thins (a
				// mistake in a query cannot show a private scope), before
				// gates are evaluated for what is left.
				out.Entries, gated = visibleEntries(vis, out.Entries, gated)
				err = s.applyEntryGates(ctx, tx, p, roomID, cacheKey(roomID, born), out.Seq, msgCount, &out.Entries, gated, q.Disabled && p.Admin())
			}
		}()
		collect := func(ctx context.Context, tx pgx.Tx, into *[]Entry, sql string, args ...any) error {
			return collectGated(ctx, tx, into, &gated, sql, args...)
		}
		switch {
		case q.Key != "":
			return collect(ctx, tx, &out.Entries, entryCols+`WHERE room_id = $1 AND scope = $2 AND key = $3`+liveSQL, roomID, q.Scope, q.Key)
		case q.Scope != "":
			return readScopeEntries(ctx, tx, collect, vis, roomID, &q, out, &gated)
		default:
			return s.readRoomEntries(ctx, tx, collect, p, roomID, out)
		}
	})
	if err != nil {
		return nil, err
	}
	if q.Key != "" && len(out.Entries) == 0 {
		return nil, errs.New(errs.KeyNotFound, "%s/%s does not exist", q.Scope, q.Key).WithHint("read the scope without key to see its keys")
	}
	return out, nil
}

// stateCollect reads entries with sql into into, keeping the gated ones
// aside for their gates.
type stateCollect func(ctx context.Context, tx pgx.Tx, into *[]Entry, sql string, args ...any) error

// checkReadQuery bounds q's page and resolves its scope into the one p
// may read, refusing a key without a scope and a scope p may not read.
func (s *Service) checkReadQuery(p *Principal, q *ReadQuery) error {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	q.Limit = min(q.Limit, s.lim.MaxLogPage)
	if q.Key != "" && q.Scope == "" {
		return errs.New(errs.InvalidField, "key needs scope").WithHint("send scope and key together")
	}
	if q.Scope != "" {
		scope, err := authority.ResolveScope(p, q.Scope)
		if err != nil {
			return err
		}
		if !authority.CanRead(p, scope) {
			return authority.ReadDenied(scope, "")
		}
		q.Scope = scope
	}
	return nil
}

// readScopeEntries reads a scope: its keyed entries, then a page of its
// log, after q.After or (with q.Before) the newest before it.
func readScopeEntries(ctx context.Context, tx pgx.Tx, collect stateCollect, vis *authority.Visibility, roomID string, q *ReadQuery, out *StateRead, gated *[]gatedEntry) error {
	if err := collect(ctx, tx, &out.Entries, sqlScopeEntries, roomID, q.Scope); err != nil {
		return err
	}
	n := len(out.Entries)
	if q.Before > 0 {
		if err := collect(ctx, tx, &out.Entries, sqlScopeLogNewest,
			roomID, q.Scope, q.After, q.Limit+1, vis.HiddenPrefixes(q.Scope), q.Before); err != nil {
			return err
		}
		if len(out.Entries)-n > q.Limit {
			// The one read beyond the page is its oldest, first.
			out.Entries, *gated = dropEntry(out.Entries, *gated, n)
			out.More = true
		}
		return nil
	}
	if err := collect(ctx, tx, &out.Entries, sqlScopeLogPage,
		roomID, q.Scope, q.After, q.Limit+1, vis.HiddenPrefixes(q.Scope)); err != nil {
		return err
	}
	if len(out.Entries)-n > q.Limit {
		out.Entries, out.More = out.Entries[:n+q.Limit], true
	}
	return nil
}

// readRoomEntries reads the keyed entries of the scopes p reads, up to
// Limits.MaxReadEntries.
func (s *Service) readRoomEntries(ctx context.Context, tx pgx.Tx, collect stateCollect, p *Principal, roomID string, out *StateRead) error {
	max := s.lim.MaxReadEntries
	var err error
	if p.Kind == KindRoom || p.Kind == KindView || p.ReadsAll || p.Admin() {
		err = collect(ctx, tx, &out.Entries, entryCols+`WHERE room_id = $1 AND sort_key IS NULL`+liveSQL+` ORDER BY scope, key LIMIT $2`, roomID, max+1)
	} else {
		// Everyone else (agents, observers, any kind added later)
		// reads communal scopes, its own and its grants.
		err = collect(ctx, tx, &out.Entries, entryCols+`WHERE room_id = $1 AND sort_key IS NULL`+liveSQL+`
					AND ((scope LIKE '\_%' AND scope <> '_audit') OR scope = $2 OR scope = ANY($3))
					ORDER BY scope, key LIMIT $4`, roomID, p.AgentID, p.Grants, max+1)
	}
	if len(out.Entries) > max {
		out.Entries, out.More = out.Entries[:max], true
	}
	return err
}

// visibleEntries keeps the entries vis admits, and the gated entries
// among them (re-indexed).
func visibleEntries(vis *authority.Visibility, entries []Entry, gated []gatedEntry) ([]Entry, []gatedEntry) {
	gate := make(map[int]string, len(gated))
	for _, g := range gated {
		gate[g.at] = g.enabled
	}
	kept, keptGated := entries[:0], gated[:0]
	for i, e := range entries {
		if !vis.Entry(e.Scope, e.Key) {
			continue
		}
		if g, ok := gate[i]; ok {
			keptGated = append(keptGated, gatedEntry{at: len(kept), enabled: g})
		}
		kept = append(kept, e)
	}
	return kept, keptGated
}

// dropEntry removes entries[i], keeping gated's indices on the entries
// they name.
func dropEntry(entries []Entry, gated []gatedEntry, i int) ([]Entry, []gatedEntry) {
	entries = slices.Delete(entries, i, i+1)
	kept := gated[:0]
	for _, g := range gated {
		switch {
		case g.at == i:
			continue
		case g.at > i:
			g.at--
		}
		kept = append(kept, g)
	}
	return entries, kept
}

// gatedEntry is an entry a read collected that has an `enabled`
// expression: its index in the read's entries and the expression.
type gatedEntry struct {
	at      int
	enabled string
}

// collectGated appends the rows sql selects to into, noting in gated
// those with an `enabled` expression (decided per reader afterwards).
func collectGated(ctx context.Context, tx pgx.Tx, into *[]Entry, gated *[]gatedEntry, sql string, args ...any) error {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	now := time.Now()
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return err
		}
		r.Timer = r.timer.describe(now)
		if r.enabled != nil {
			*gated = append(*gated, gatedEntry{at: len(*into), enabled: *r.enabled})
		}
		*into = append(*into, r.Entry)
	}
	return rows.Err()
}

// applyEntryGates drops from entries those whose `enabled` expression does
// not hold for p, as the context read decides it (seed 001: enabled gates
// visibility, universally): a mutable entry is shown iff it is in the
// state p's context would hold (same vars, same per-read budget, fail
// closed past it); an append entry's gate is evaluated with that state.
// The room token is no exception, as in the context: a disabled entry is
// not there until its expression holds.
func (s *Service) applyEntryGates(ctx context.Context, tx pgx.Tx, p *Principal, roomID, key string, seq, msgCount int64, entries *[]Entry, gated []gatedEntry, mark bool) error {
	if len(gated) == 0 {
		return nil
	}
	snap, err := s.loadSnapshot(ctx, tx, roomID, key, seq, msgCount)
	if err != nil {
		return err
	}
	agents, err := loadPresence(ctx, tx, roomID)
	if err != nil {
		return err
	}
	s.marks.Overlay(roomID, presenceRows(agents))
	rc := &roomCtx{now: time.Now(), snap: snap, p: p, agents: agents}
	if p.Kind == KindAgent {
		rc.self = p.AgentID
	}
	state, _ := s.stateFor(ctx, rc, func(sc string) bool { return rc.visible(sc) })
	vars := &expr.Vars{State: state, Self: rc.self, Now: rc.now, Agents: envelope.AgentsVar(agents)}
	b, limit := rc.budget(), uint64(s.lim.EnabledCostPerRead)
	drop := make(map[int]bool, len(gated))
	for _, g := range gated {
		e := (*entries)[g.at]
		if e.SortKey == nil {
			m, _ := state[e.Scope].(map[string]any)
			if _, ok := m[e.Key]; !ok {
				drop[g.at] = true
			}
			continue
		}
		if b.spent >= limit {
			drop[g.at] = true
			continue
		}
		r, _ := s.evalGate(ctx, g.enabled, vars)
		b.spent += r.cost
		if !r.on {
			drop[g.at] = true
		}
	}
	if mark {
		for _, g := range gated {
			(*entries)[g.at].Gated, (*entries)[g.at].Disabled = true, drop[g.at]
		}
		return nil
	}
	kept := (*entries)[:0]
	for i, e := range *entries {
		if !drop[i] {
			kept = append(kept, e)
		}
	}
	*entries = kept
	return nil
}

// evalWriteExprs computes the expr: true writes of a direct write, under
// the room lock, with the writer's own read authority (what it could read
// in its context, never more).
func (s *Service) evalWriteExprs(m *mutation, writes []Write, ops []op) error {
	var rc *roomCtx
	for i, w := range writes {
		if !w.Expr {
			continue
		}
		if rc == nil {
			snap, err := s.lockedSnapshot(m)
			if err != nil {
				return err
			}
			agents, err := m.presence()
			if err != nil {
				return err
			}
			rc = s.build(m.ctx, snap, m.p, agents, msgCounts{Count: snap.messageCount}, m.now, nil)
		}
		v, err := s.evalField(m.ctx, "value", w.ExprSource(), &rc.vars)
		if e, ok := err.(*errs.Error); ok {
			return e.With("write", i)
		} else if err != nil {
			return err
		}
		if err := write.ExprResult(s.writeLimits(), &ops[i], v); err != nil {
			return err.(*errs.Error).With("write", i)
		}
	}
	return nil
}
