package substrate

import (
	"context"
	"encoding/json"
	"errors"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// The audit log read back (substrate/trajectory builds the trajectory,
// a key's history and the replay on these, substrate/activity the room's
// feed): whole pages for room authority, one key's versions for whoever
// may read the key, and what of the recent entries any reader of the room
// may know of.

// AuditEntry is one _audit entry as stored; a page of the log holds at
// most MaxAuditPageRows of them and about 4 MiB, and AuditPageEnds says
// when one ends the log (authority/auditlog.go).
type AuditEntry = authority.AuditEntry

// MaxAuditPageRows bounds the rows of one AuditPage (the statement's
// LIMIT), whatever n a caller asks for.
const MaxAuditPageRows = authority.MaxAuditPageRows

// AuditPageEnds reports whether a page AuditPage returned for n rows ends
// the log up to its bound.
func AuditPageEnds(page []AuditEntry, n int) bool { return authority.AuditPageEnds(page, n) }

// AuditPage reads roomID's _audit entries with after < seq ≤ upTo, in seq
// order, from state and state_archive (where retention moved the old
// ones): at most n rows (1 … MaxAuditPageRows; others mean the most)
// and about 4 MiB. The log holds every scope,
// private ones included: only room authority of roomID reads it.
func (s *Service) AuditPage(ctx context.Context, p *Principal, roomID string, after, upTo int64, n int) ([]AuditEntry, error) {
	if err := authority.ReadsAuditLog(p, roomID); err != nil {
		return nil, err
	}
	n = authority.AuditPageRows(n)
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
		if size += len(r.Value); size > authority.AuditPageBytes {
			break
		}
	}
	return out, rows.Err()
}

// AuditOfKind reads roomID's _audit entries of one kind with seq ≤ upTo,
// in seq order, from state and state_archive: the first
// MaxAuditPageRows. Room authority of roomID only, as AuditPage.
func (s *Service) AuditOfKind(ctx context.Context, p *Principal, roomID, kind string, upTo int64) ([]AuditEntry, error) {
	if err := authority.ReadsAuditLog(p, roomID); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, sqlAuditOfKind, roomID, upTo, kind, MaxAuditPageRows)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[AuditEntry])
}

// ScopeKey names one entry; AuditSeen is what a reader may know of one
// audit entry (authority/auditlog.go decides it).
type (
	ScopeKey  = authority.ScopeKey
	AuditSeen = authority.AuditSeen
)

// AuditSeenBy reads the newest n (1 … MaxAuditPageRows; others mean the
// most) audit entries of roomID with seq ≤ upTo (0: now), newest first,
// and returns what p may know of them. Room authority knows of every
// entry. Any other reader of the room knows only of the keys it may read
// now (its scopes, features' read rules, and enabled gates, as a read of
// each key would decide), and of no entry that moved none of them: not
// even that something happened.
func (s *Service) AuditSeenBy(ctx context.Context, p *Principal, roomID string, upTo int64, n int) ([]AuditSeen, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	n = authority.AuditPageRows(n)
	if upTo <= 0 {
		upTo = math.MaxInt64
	}
	admin := p.Admin()
	all, err := s.readAuditSeen(ctx, roomID, upTo, n, admin)
	if err != nil || admin {
		return all, err
	}
	seen, err := s.auditKeysSeen(ctx, p, roomID, all)
	if err != nil {
		return nil, err
	}
	return authority.AuditNarrowed(all, seen), nil
}

// readAuditSeen reads the newest n audit entries of roomID with seq ≤
// upTo as authority.AuditSeenOf tells of them. An entry that does not
// decode is left out.
func (s *Service) readAuditSeen(ctx context.Context, roomID string, upTo int64, n int, admin bool) ([]AuditSeen, error) {
	rows, err := s.db.Query(ctx, sqlAuditNewest, roomID, upTo, n)
	if err != nil {
		return nil, err
	}
	var all []AuditSeen
	var seq int64
	var raw json.RawMessage
	_, err = pgx.ForEachRow(rows, []any{&seq, &raw}, func() error {
		if a, ok := authority.AuditSeenOf(seq, raw, admin); ok {
			all = append(all, a)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return all, nil
}

// auditKeysSeen decides which of the keys all moved p may read now.
// Each key is decided once: the scope and the features' rules, then its
// gate (a gated key is read as p, as GET /state would). The gates of all
// the keys are looked up in one statement.
func (s *Service) auditKeysSeen(ctx context.Context, p *Principal, roomID string, all []AuditSeen) (map[ScopeKey]bool, error) {
	vis, err := s.visibilityIn(ctx, s.db, p, roomID)
	if err != nil {
		return nil, err
	}
	var scopes, keys []string
	seen := map[ScopeKey]bool{}
	for _, a := range all {
		for _, k := range a.Keys {
			if _, ok := seen[k]; ok {
				continue
			}
			seen[k] = vis.Entry(k.Scope, k.Key)
			if seen[k] {
				scopes, keys = append(scopes, k.Scope), append(keys, k.Key)
			}
		}
	}
	if len(keys) > 0 {
		check, err := s.gatedKeys(ctx, roomID, scopes, keys)
		if err != nil {
			return nil, err
		}
		// No connection is held while the gated keys are read.
		for _, k := range check {
			if _, err := s.ReadState(ctx, p, roomID, ReadQuery{Scope: k.Scope, Key: k.Key}); err != nil {
				if errs.From(err).Code == errs.Internal {
					return nil, err
				}
				seen[k] = false
			}
		}
	}
	return seen, nil
}

// gatedKeys is which of the keys (scopes[i], keys[i]) of roomID have an
// enabled expression.
func (s *Service) gatedKeys(ctx context.Context, roomID string, scopes, keys []string) ([]ScopeKey, error) {
	gated, err := s.db.Query(ctx, sqlGatedKeys, roomID, scopes, keys)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(gated, pgx.RowToStructByPos[ScopeKey])
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
	return pgx.CollectRows(rows, pgx.RowToStructByPos[AuditEntry])
}
