package substrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Features built on rooms (the loom, and whatever comes next) reach room
// state only through a RoomTx: one room, one transaction, reads that are
// bounded by construction (exact keys, a key prefix with a limit, a chain
// of links with a limit) and writes that go through the core's write path
// (sequences, audit, notification). The SQL over state stays here, so
// one rule (what is live, what an entry is) holds for every reader.

// RoomTx is a feature's handle on one room inside one transaction: a
// read (ReadRoom) or a mutation (MutateRoom).
type RoomTx struct {
	s    *Service
	ctx  context.Context
	q    querier
	m    *mutation // nil for a read
	p    *Principal
	room string
	now  time.Time
	seq  int64 // a read's: the room's sequence number it saw
}

// Context is the transaction's context.
func (t *RoomTx) Context() context.Context { return t.ctx }

// Now is the transaction's time: the database's now() in a read, the
// time once the room lock is held in a mutation; Get, GetMany and List
// judge timers by it.
func (t *RoomTx) Now() time.Time { return t.now }

// Principal is who acts: in a mutation, with grants re-read under the
// room lock.
func (t *RoomTx) Principal() *Principal { return t.p }

// Room is the room's id.
func (t *RoomTx) Room() string { return t.room }

// Writes reports whether this is a mutation (Apply may be called).
func (t *RoomTx) Writes() bool { return t.m != nil }

// Base is the room's sequence number before this mutation (0 in a
// read): with a counter, a key suffix unique to the mutation.
func (t *RoomTx) Base() int64 {
	if t.m == nil {
		return 0
	}
	return t.m.base
}

// Seq is the room's sequence number as this transaction saw it: a read's
// at its start, a mutation's before it (Base). A page drawn from a read
// gives it to its live stream, which then tells the page of any commit
// after it, not only of those after the stream began.
func (t *RoomTx) Seq() int64 {
	if t.m != nil {
		return t.m.base
	}
	return t.seq
}

// Actor is the principal's actor name as the audit records it.
func (t *RoomTx) Actor() string {
	if t.m != nil {
		return t.m.actor
	}
	return t.p.Actor()
}

// Get reads one live entry (mutable or append) by key.
func (t *RoomTx) Get(scope, key string) (json.RawMessage, bool, error) {
	var raw json.RawMessage
	err := t.q.QueryRow(t.ctx, `SELECT value FROM state WHERE room_id = $1 AND scope = $2 AND key = $3`+liveAt(4),
		t.room, scope, key, t.now).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return raw, true, nil
}

// liveAt is liveSQL judged at the RoomTx's time, bound as parameter $n:
// in a mutation that is its time once the room lock is held (what the
// write path judges timers by), not now(), the transaction's start,
// which precedes any wait for the lock.
func liveAt(n int) string {
	return strings.Replace(liveSQL, "now()", fmt.Sprintf("$%d::timestamptz", n), 1)
}

// MaxKeysPerRead bounds GetMany, List and Chain.
const MaxKeysPerRead = 100_000

// GetMany reads the live entries of scope with the given keys, by key;
// absent keys are absent from the map.
func (t *RoomTx) GetMany(scope string, keys []string) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	if len(keys) == 0 {
		return out, nil
	}
	if len(keys) > MaxKeysPerRead {
		return nil, errs.New(errs.InvalidField, "a read asks for %d keys, more than %d", len(keys), MaxKeysPerRead).WithHint("read fewer keys at a time")
	}
	rows, err := t.q.Query(t.ctx, `SELECT key, value FROM state WHERE room_id = $1 AND scope = $2 AND key = ANY($3)`+liveAt(4),
		t.room, scope, keys, t.now)
	if err != nil {
		return nil, err
	}
	kvs, err := scanKV(rows)
	for _, kv := range kvs {
		out[kv.Key] = kv.Value
	}
	return out, err
}

// KeyValue is one entry as List returns it.
type KeyValue struct {
	Key   string
	Value json.RawMessage
}

// ListQuery asks for the live entries of one scope whose keys start with
// Prefix (compared exactly, never by collation).
type ListQuery struct {
	Scope, Prefix string
	// Appended lists append entries, newest first; otherwise mutable
	// entries in key order.
	Appended bool
	// Limit is how many at most (1 … MaxKeysPerRead; 0 means the most).
	Limit int
}

// List reads entries by key prefix, bounded by q.Limit.
func (t *RoomTx) List(q ListQuery) ([]KeyValue, error) {
	if q.Limit <= 0 || q.Limit > MaxKeysPerRead {
		q.Limit = MaxKeysPerRead
	}
	sql := `SELECT key, value FROM state WHERE room_id = $1 AND scope = $2 AND left(key, char_length($3)) = $3` + liveAt(5)
	if q.Appended {
		sql += ` AND sort_key IS NOT NULL ORDER BY sort_key DESC LIMIT $4`
	} else {
		sql += ` AND sort_key IS NULL ORDER BY key LIMIT $4`
	}
	rows, err := t.q.Query(t.ctx, sql, t.room, q.Scope, q.Prefix, q.Limit, t.now)
	if err != nil {
		return nil, err
	}
	return scanKV(rows)
}

// ChainQuery follows links stored in the entries of one scope: from the
// entry at Start, the next entry's key is Prefix + the value's Field +
// Suffix, until an entry lacks Field, the next key is absent, or Max
// entries were read. Entries on a chain are immutable (append entries,
// read without timers), which is what trees are made of.
type ChainQuery struct {
	Scope, Start          string
	Prefix, Field, Suffix string
	// Emit, when set, returns for each entry walked the entry at Emit +
	// its Field instead (absent ones left out): the nodes a list of
	// links points at, in the same round trip.
	Emit string
	// Max bounds the walk (1 … MaxKeysPerRead; 0 means the most).
	Max int
}

// Chain walks q in one round trip and returns the values in walk order
// (Start first).
func (t *RoomTx) Chain(q ChainQuery) ([]json.RawMessage, error) {
	if q.Max <= 0 || q.Max > MaxKeysPerRead {
		q.Max = MaxKeysPerRead
	}
	sql := `WITH RECURSIVE walk(v, d) AS (
			SELECT value, 1 FROM state WHERE room_id = $1 AND scope = $2 AND key = $3
			UNION ALL
			SELECT s.value, walk.d + 1 FROM walk JOIN state s
			  ON s.room_id = $1 AND s.scope = $2 AND s.key = $4 || (walk.v->>$5) || $6
			WHERE (walk.v->>$5) IS NOT NULL AND walk.d < $7)`
	args := []any{t.room, q.Scope, q.Start, q.Prefix, q.Field, q.Suffix, q.Max}
	if q.Emit == "" {
		sql += ` SELECT v FROM walk ORDER BY d`
	} else {
		sql += ` SELECT e.value FROM walk JOIN state e ON e.room_id = $1 AND e.scope = $2 AND e.key = $8 || (walk.v->>$5) ORDER BY walk.d`
		args = append(args, q.Emit)
	}
	rows, err := t.q.Query(t.ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []json.RawMessage
	for rows.Next() {
		var v json.RawMessage
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func scanKV(rows pgx.Rows) ([]KeyValue, error) {
	defer rows.Close()
	var out []KeyValue
	for rows.Next() {
		var kv KeyValue
		if err := rows.Scan(&kv.Key, &kv.Value); err != nil {
			return nil, err
		}
		out = append(out, kv)
	}
	return out, rows.Err()
}

// HasAgent reports whether the room has agent id.
func (t *RoomTx) HasAgent(id string) (bool, error) {
	var exists bool
	err := t.q.QueryRow(t.ctx, `SELECT EXISTS (SELECT 1 FROM agents WHERE room_id = $1 AND id = $2)`, t.room, id).Scan(&exists)
	return exists, err
}

// Rows reads the room's mutable entries for a ReadRule on this
// transaction.
func (t *RoomTx) Rows() RowFunc { return dbRows(t.ctx, t.q, t.room) }

// Op is one write a feature queues for Apply.
type Op struct {
	Scope, Key string
	Value      json.RawMessage
	// Append adds an append entry (immutable, read by key).
	Append bool
	// Delete removes the entry.
	Delete bool
	// TTL, when set, deletes the entry that long after the write.
	TTL time.Duration
}

// Apply writes ops through the core's write path (validation, versions,
// sequences, the audit delta), naming via as the writer's path, and
// returns the audit record of each write. The feature's own scopes
// (Feature.Scopes) are written only this way; a reserved family no wired
// feature claims is not written at all.
func (t *RoomTx) Apply(ops []Op, via string) ([]map[string]any, error) {
	if t.m == nil {
		return nil, errs.New(errs.ReadOnlyToken, "this is a read, not a mutation")
	}
	in := make([]op, len(ops))
	for i, o := range ops {
		// The write rules every write obeys, whatever a feature composed:
		// names and keys as WriteState checks them, and the core's own
		// reserved scopes (the audit log, agents, definitions, cooldowns)
		// left to the core, whose snapshot trusts what they hold.
		if err := authority.ValidName("scope", o.Scope, t.s.lim.MaxScopeBytes, true); err != nil {
			return nil, err.(*errs.Error).With("write", i)
		}
		if slices.Contains(systemScopes, o.Scope) {
			return nil, errs.New(errs.ScopeDenied, "scope %q is written only by the core", o.Scope).With("write", i).
				WithHint("a feature writes its own scopes (Feature.Scopes), _shared, _messages or agents' scopes")
		}
		if err := t.s.wired.sealed(o.Scope); err != nil {
			return nil, err.(*errs.Error).With("write", i)
		}
		if !(o.Append && o.Key == "") {
			if err := authority.ValidKey(o.Key, t.s.lim.MaxKeyBytes); err != nil {
				return nil, err.(*errs.Error).With("write", i)
			}
		}
		in[i] = op{Scope: o.Scope, Key: o.Key, Value: o.Value, Append: o.Append, Delete: o.Delete}
		if o.TTL > 0 {
			in[i].Timer = &Timer{MS: max(1, o.TTL.Milliseconds()), Effect: "delete"}
		}
	}
	_, audit, err := t.s.applyOps(t.m, in, via)
	return audit, err
}

// Audit sets the mutation's audit record (required once per mutation;
// the core adds the delta, seq, time and actor).
func (t *RoomTx) Audit(a map[string]any) {
	if t.m != nil {
		t.m.audit = a
	}
}

// ReadRoom runs fn on one read-only, repeatable-read transaction of
// roomID as p. It checks only that p addresses roomID: the feature
// decides what fn may read for p (with its ReadRule, through RoomTx.Rows).
func (s *Service) ReadRoom(ctx context.Context, p *Principal, roomID string, fn func(t *RoomTx) error) error {
	// Whatever room id a feature passes along, p reads its own room only.
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return err
	}
	return s.db.ReadTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		t := &RoomTx{s: s, ctx: ctx, q: tx, p: p, room: roomID}
		// The room's row too: a room deleted since p authenticated has no
		// rows, and a feature would take it for an empty one.
		err := tx.QueryRow(ctx, `SELECT now(), seq FROM rooms WHERE id = $1`, roomID).Scan(&t.now, &t.seq)
		if errors.Is(err, pgx.ErrNoRows) {
			return errs.New(errs.RoomNotFound, "room %q does not exist", roomID).WithHint("the room was deleted; pick another room")
		}
		if err != nil {
			return err
		}
		return fn(t)
	})
}

// MutateRoom runs fn as one mutation of roomID by p: the room is locked,
// an agent's grants are re-read under the lock, and what fn applies
// commits together with its audit entry and notification, or not at all.
// A read-only principal writes nothing (the core refuses at commit).
func (s *Service) MutateRoom(ctx context.Context, p *Principal, roomID string, fn func(t *RoomTx) error) (seq int64, err error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return 0, err
	}
	return s.mutate(ctx, p, roomID, func(m *mutation) error {
		if err := fn(&RoomTx{s: s, ctx: m.ctx, q: m.tx, m: m, p: m.p, room: roomID, now: m.now}); err != nil {
			return err
		}
		// The core's own paths always set a record (mutate panics on a
		// missing one); a feature that forgot gets an error and a
		// rollback, not a panic in the middle of a request.
		if m.audit == nil {
			return errors.New("substrate: a feature's mutation set no audit record (RoomTx.Audit)")
		}
		return nil
	})
}

// RequireRoom checks that p may address roomID: a principal of that room
// may (without a query: a room deleted since it authenticated is found by
// the read or write that follows), any other is refused, room_not_found
// when the room does not exist.
func (s *Service) RequireRoom(ctx context.Context, p *Principal, roomID string) error {
	return s.requireRoom(ctx, p, roomID)
}

// Logger is the service's logger, for features.
func (s *Service) Logger() *slog.Logger { return s.log }

// Features attach their state to a Service (one loom per service, with
// its options) under a key of their own.
type features struct {
	mu sync.Mutex
	m  map[any]any
}

// Feature returns the value attached under key, attaching mk()'s first
// when there is none (mk nil: nothing is attached, nil is returned).
func (s *Service) Feature(key any, mk func() any) any {
	s.feat.mu.Lock()
	defer s.feat.mu.Unlock()
	if v, ok := s.feat.m[key]; ok {
		return v
	}
	if mk == nil {
		return nil
	}
	if s.feat.m == nil {
		s.feat.m = map[any]any{}
	}
	v := mk()
	s.feat.m[key] = v
	return v
}

// featureScope reports scopes of a reserved family (reservedScopes),
// whether or not a wired feature claims it.
func featureScope(scope string) bool { return reservedFamily(scope) != nil }

// apartScope reports a reserved family's subscopes kept out of the
// snapshot.
func apartScope(scope string) bool {
	f := reservedFamily(scope)
	return f != nil && f.SubscopesApart && scope != f.Name
}

// ValidKey checks a key a feature composes (from a label a person gave)
// as the write path will: not empty, at most max bytes, UTF-8, no
// control characters.
func ValidKey(key string, max int) error { return authority.ValidKey(key, max) }
