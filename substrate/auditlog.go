package substrate

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// The audit log read back (substrate/trajectory builds the trajectory,
// a key's history and the replay on these): whole pages for room
// authority, one key's versions for whoever may read the key.

// AuditEntry is one _audit entry as stored: its seq and its record.
type AuditEntry struct {
	Seq   int64
	Value json.RawMessage
}

// auditPageBytes bounds the entries read per statement, so a trajectory
// or replay holds a bounded part of the log at a time, and no connection
// while it decodes or writes.
const auditPageBytes = 4 << 20

// AuditPageEnds reports whether a page AuditPage returned for n rows ends
// the log up to its bound: it is short, and not because the page reached
// its size bound. A reader stops there, without another statement.
func AuditPageEnds(page []AuditEntry, n int) bool {
	if n <= 0 || n > MaxAuditPageRows {
		n = MaxAuditPageRows
	}
	size := 0
	for _, r := range page {
		size += len(r.Value)
	}
	return len(page) < n && size <= auditPageBytes
}

// MaxAuditPageRows bounds the rows of one AuditPage, whatever n a caller
// asks for: the statement's own LIMIT, so that stopping at the byte bound
// never leaves a large result to drain.
const MaxAuditPageRows = 1000

// AuditPage reads roomID's _audit entries with after < seq ≤ upTo, in seq
// order, from state and state_archive (where retention moved the old
// ones): at most n rows (1 … MaxAuditPageRows; others mean the most)
// and about 4 MiB. The log holds every scope,
// private ones included: only room authority of roomID reads it.
func (s *Service) AuditPage(ctx context.Context, p *Principal, roomID string, after, upTo int64, n int) ([]AuditEntry, error) {
	if p == nil || p.RoomID != roomID || !p.Admin() {
		return nil, errs.New(errs.Forbidden, "the audit log holds every scope, private ones included: only the room token reads it").
			WithHint("read it with the room token")
	}
	if n <= 0 || n > MaxAuditPageRows {
		n = MaxAuditPageRows
	}
	rows, err := s.db.Query(ctx, sqlAuditPage, roomID, after, upTo, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AuditEntry
	size := 0
	for rows.Next() {
		var r AuditEntry
		if err := rows.Scan(&r.Seq, &r.Value); err != nil {
			return nil, err
		}
		out = append(out, r)
		if size += len(r.Value); size > auditPageBytes {
			break
		}
	}
	return out, rows.Err()
}

// KeyLog is one key's versions in the audit log, for a reader the core
// admitted (AdmitKeyLog): it reads nothing of other keys.
type KeyLog struct {
	s     *Service
	room  string
	Scope string // resolved ("self" is the agent's id)
	Key   string
	// Withhold: gated versions' values are left out unless gated by
	// Admitted, the gate that has just admitted the reader (a deleted or
	// since ungated entry says nothing of whom its old gate admitted).
	Withhold bool
	Admitted *string
}

// AdmitKeyLog admits p to the versions of scope/key in roomID exactly
// when p may read the key now: the scope's rule, features' read rules,
// and an enabled gate evaluated for p as a state read would.
func (s *Service) AdmitKeyLog(ctx context.Context, p *Principal, roomID, scope, key string) (*KeyLog, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	scope, err := authority.ResolveScope(p, scope)
	if err != nil {
		return nil, err
	}
	if err := authority.ValidName("scope", scope, s.lim.MaxScopeBytes, true); err != nil {
		return nil, err
	}
	if err := authority.ValidKey(key, s.lim.MaxKeyBytes); err != nil {
		return nil, err
	}
	if !authority.CanRead(p, scope) {
		return nil, authority.ReadDenied(scope, "")
	}
	if vis, err := s.visibilityIn(ctx, s.db, p, roomID); err != nil {
		return nil, err
	} else if !vis.Entry(scope, key) {
		return nil, vis.Refuse(scope, key)
	}
	kl := &KeyLog{s: s, room: roomID, Scope: scope, Key: key, Withhold: !p.Admin()}
	if !p.Admin() {
		// A key whose enabled is false for the reader is not there for it
		// (GET /state says 404), and neither are its versions; room
		// authority reads the trajectory anyway.
		gateOf := func() (*string, error) {
			var gate *string
			err := s.db.QueryRow(ctx, `SELECT enabled_expr FROM state WHERE room_id = $1 AND scope = $2 AND key = $3`, roomID, scope, key).Scan(&gate)
			if errors.Is(err, pgx.ErrNoRows) {
				err = nil
			}
			return gate, err
		}
		gate, err := gateOf()
		if err != nil {
			return nil, err
		}
		if gate != nil {
			if _, err := s.ReadState(ctx, p, roomID, ReadQuery{Scope: scope, Key: key}); err != nil {
				return nil, err
			}
			// The gate the read evaluated, unless it changed meanwhile.
			if again, err := gateOf(); err != nil {
				return nil, err
			} else if again != nil && *again == *gate {
				kl.Admitted = gate
			}
		}
	}
	return kl, nil
}

// KeyLogTx reads the key's versions on one read-only transaction.
type KeyLogTx struct {
	k   *KeyLog
	ctx context.Context
	tx  pgx.Tx
	// starts are the seqs Revision and LastWrite found: the key's own
	// writes, the only places Chain starts from (an audit record holds
	// every scope its mutation wrote).
	starts map[int64]bool
}

// Read runs fn on one read-only, repeatable-read transaction.
func (k *KeyLog) Read(ctx context.Context, fn func(t *KeyLogTx) error) error {
	return k.s.db.ReadTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return fn(&KeyLogTx{k: k, ctx: ctx, tx: tx})
	})
}

// Revision is the seq of the mutation that wrote the key's current row
// (0 when there is none).
func (t *KeyLogTx) Revision() (int64, error) {
	var rev int64
	err := t.tx.QueryRow(t.ctx, `SELECT revision FROM state WHERE room_id = $1 AND scope = $2 AND key = $3`, t.k.room, t.k.Scope, t.k.Key).Scan(&rev)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	t.start(rev)
	return rev, err
}

func (t *KeyLogTx) start(seq int64) {
	if seq <= 0 {
		return
	}
	if t.starts == nil {
		t.starts = map[int64]bool{}
	}
	t.starts[seq] = true
}

// LastWrite is the seq of the key's newest write before seq before (0:
// none), where no link leads to it (across a deletion): a backward search
// of the log, then of the archive.
func (t *KeyLogTx) LastWrite(before int64) (int64, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	touch, _ := json.Marshal([]map[string]string{{"scope": t.k.Scope, "key": t.k.Key}})
	for _, sql := range []string{sqlKeyLastWrite, sqlKeyLastWriteArchived} {
		var seq int64
		err := t.tx.QueryRow(t.ctx, sql, t.k.room, before, string(touch)).Scan(&seq)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return 0, err
		}
		if seq != 0 {
			t.start(seq)
			return seq, nil
		}
	}
	return 0, nil
}

// Chain reads the audit entries of the key's versions from the one at
// seq start back through each delta's revision_before, at most n, newest
// first (two primary-key lookups per version, in one statement). start
// is a seq Revision or LastWrite returned on this transaction: any other
// is refused, since it could name another key's write.
func (t *KeyLogTx) Chain(start int64, n int) ([]AuditEntry, error) {
	if !t.starts[start] {
		return nil, errs.New(errs.InvalidField, "seq %d is not a write of %s/%s found on this read", start, t.k.Scope, t.k.Key).
			WithHint("start from Revision or LastWrite")
	}
	rows, err := t.tx.Query(t.ctx, sqlKeyChain, t.k.room, t.k.Scope, t.k.Key, start, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var r AuditEntry
		if err := rows.Scan(&r.Seq, &r.Value); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// timer is d as a running timer.
func (d *DeltaTimer) timer() *timerState {
	if d == nil {
		return nil
	}
	eff := d.Effect
	return &timerState{Effect: &eff, ExpiresAt: d.ExpiresAt, TicksLeft: d.TicksLeft, TickOn: d.TickOn}
}

// Live reports whether an entry with timer d shows at time at (nil: it
// has no timer, always).
func (d *DeltaTimer) Live(at time.Time) bool { return d.timer().live(at) }

// Describe is timer d as a state read shows it at time at (nil: none).
func (d *DeltaTimer) Describe(at time.Time) map[string]any { return d.timer().describe(at) }
