package substrate

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/write"
)

// Entry is one state entry (write.Entry).
type Entry = write.Entry

// Write is one direct state write (PUT /rooms/:id/state and each element of
// a batch); its rules are substrate/write's.
type Write = write.Write

// WriteResult is what a write returns (write.Result).
type WriteResult = write.Result

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
		res.Entries = append(res.Entries, write.Shown(*e, hidden[entryKey{e.Scope, e.Key}]))
	}
	return res, nil
}

// withheldKeys are the entries whose values a write's response leaves
// out (write.Withheld).
func withheldKeys(m *mutation, ops []op) map[entryKey]bool {
	withheld := write.Withheld(ops)
	out := map[entryKey]bool{}
	for _, w := range m.pending {
		if withheld(w.r.Scope, w.r.Key, w.r.enabled != nil) {
			out[entryKey{w.r.Scope, w.r.Key}] = true
		}
	}
	return out
}

// ReadQuery selects what ReadState returns (envelope.ReadQuery).
type ReadQuery = envelope.ReadQuery

// StateRead is the result of ReadState (envelope.StateRead).
type StateRead = envelope.StateRead

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
				out.Entries, gated = envelope.VisibleEntries(vis, out.Entries, gated)
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

// checkReadQuery bounds q's page and resolves its scope
// (envelope.CheckReadQuery).
func (s *Service) checkReadQuery(p *Principal, q *ReadQuery) error {
	return envelope.CheckReadQuery(p, q, s.lim.MaxLogPage)
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
			out.Entries, *gated = envelope.DropEntry(out.Entries, *gated, n)
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

// gatedEntry is an entry a read collected that has an `enabled`
// expression (envelope.GatedEntry).
type gatedEntry = envelope.GatedEntry

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
			*gated = append(*gated, gatedEntry{At: len(*into), Enabled: *r.enabled})
		}
		*into = append(*into, r.Entry)
	}
	return rows.Err()
}

// applyEntryGates drops from entries those whose `enabled` expression does
// not hold for p (envelope.GateEntries), with the state p's context would
// hold (same vars, same per-read budget). The room token is no exception,
// as in the context: a disabled entry is not there until its expression
// holds.
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
	eval := func(src string) (bool, uint64) {
		r, _ := s.evalGate(ctx, src, vars)
		return r.on, r.cost
	}
	*entries = envelope.GateEntries(*entries, gated, state, rc.budget().spent, uint64(s.lim.EnabledCostPerRead), eval, mark)
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
