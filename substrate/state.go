package substrate

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/errs"
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
	// IfVersion makes the write conditional: the entry's current version
	// must equal it (0: the entry must not exist).
	IfVersion *int64 `json:"if_version,omitempty"`
}

// WriteResult is what a write returns: the entries as written (a deleted
// entry has version 0 and no value) and the mutation's seq.
type WriteResult struct {
	Seq     int64   `json:"seq"`
	Entries []Entry `json:"entries"`
}

func hasJSON(raw json.RawMessage) bool { return len(raw) > 0 }

// validate checks a write's shape before any database work.
func (s *Service) validateWrite(p *Principal, i int, w *Write) error {
	at := func(e *errs.Error) error {
		if i >= 0 {
			e = e.With("write", i)
		}
		return e
	}
	scope, err := resolveScope(p, w.Scope)
	if err != nil {
		return at(err.(*errs.Error))
	}
	w.Scope = scope
	if err := validName("scope", w.Scope, s.lim.MaxScopeBytes, true); err != nil {
		return at(err.(*errs.Error))
	}
	if w.Key != "" || !w.Append {
		if err := validKey(w.Key, s.lim.MaxKeyBytes); err != nil {
			return at(err.(*errs.Error))
		}
	}
	n := 0
	for _, set := range []bool{hasJSON(w.Value), hasJSON(w.Merge), w.Delete} {
		if set {
			n++
		}
	}
	if n != 1 {
		return at(errs.New(errs.InvalidField, "a write needs exactly one of value, merge and delete").
			WithHint(`send {"scope": …, "key": …, "value": …} to replace, "merge": {…} to merge, or "delete": true`))
	}
	if hasJSON(w.Merge) && w.Merge[0] != '{' {
		return at(errs.New(errs.InvalidField, "merge must be a JSON object").WithHint(`use "value" to store a non-object`))
	}
	if w.Append && !hasJSON(w.Value) {
		return at(errs.New(errs.InvalidField, "an append write takes a value").WithHint("send append: true with value; merge into an existing append entry by key without append"))
	}
	if w.Append && w.IfVersion != nil {
		return at(errs.New(errs.InvalidField, "if_version does not apply to an append write").WithHint("drop if_version: an append always creates a new entry"))
	}
	if w.IfVersion != nil && *w.IfVersion < 0 {
		return at(errs.New(errs.InvalidField, "if_version must be ≥ 0").WithHint("use 0 for \"must not exist\" or the version you read"))
	}
	for _, raw := range []json.RawMessage{w.Value, w.Merge} {
		if len(raw) > s.lim.MaxValueBytes {
			return at(s.tooLarge(w.Scope, w.Key, len(raw)))
		}
	}
	return nil
}

func (s *Service) tooLarge(scope, key string, n int) *errs.Error {
	return errs.New(errs.ValueTooLarge, "value for %s/%s is %d bytes, over the limit of %d", scope, key, n, s.lim.MaxValueBytes).
		WithHint("store smaller values, or split the data over several keys").With("limit", s.lim.MaxValueBytes)
}

type entryKey struct{ scope, key string }

// WriteState applies writes as one mutation: all of them or none.
func (s *Service) WriteState(ctx context.Context, p *Principal, roomID string, writes []Write, batch bool) (*WriteResult, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	if len(writes) == 0 {
		return nil, errs.New(errs.InvalidField, "no writes").WithHint(`send {"writes": [{"scope": …, "key": …, "value": …}, …]}`)
	}
	if len(writes) > s.lim.MaxBatchWrites {
		return nil, errs.New(errs.InvalidField, "%d writes, over the limit of %d per batch", len(writes), s.lim.MaxBatchWrites).
			WithHint("split the batch; each batch is applied atomically on its own")
	}
	appends := 0
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
		if writes[i].Append {
			appends++
		}
	}
	res := &WriteResult{}
	seq, err := s.mutate(ctx, p, roomID, appends, func(m *mutation) error {
		// Authority again, against the grants read under the lock.
		for i := range writes {
			if err := checkWrite(m.p, writes[i].Scope); err != nil {
				return err
			}
		}
		cur, err := loadEntries(m, writes)
		if err != nil {
			return err
		}
		newKeys := map[string]int{}
		auditWrites := make([]map[string]any, 0, len(writes))
		touched := []entryKey{}
		for i := range writes {
			w := &writes[i]
			e, op, err := s.apply(m, cur, w)
			if err != nil {
				if batch {
					if ee, ok := err.(*errs.Error); ok {
						err = ee.With("write", i)
					}
				}
				return err
			}
			k := entryKey{e.Scope, e.Key}
			if op == "insert" && e.SortKey == nil {
				newKeys[e.Scope]++
			}
			if !containsKey(touched, k) {
				touched = append(touched, k)
			}
			aw := map[string]any{"op": op, "scope": e.Scope, "key": e.Key, "version": e.Version}
			if op != "delete" {
				aw["value"] = e.Value
			}
			auditWrites = append(auditWrites, aw)
		}
		if err := s.checkScopeCapacity(m, newKeys); err != nil {
			return err
		}
		for _, k := range touched {
			e := cur[k]
			if e == nil || e.Version == 0 {
				m.batch.Queue(`DELETE FROM state WHERE room_id = $1 AND scope = $2 AND key = $3`, m.room, k.scope, k.key)
				res.Entries = append(res.Entries, Entry{Scope: k.scope, Key: k.key, Revision: m.last, Writer: m.actor, UpdatedAt: m.now})
				continue
			}
			m.batch.Queue(`INSERT INTO state (room_id, scope, key, sort_key, value, version, revision, writer, via, created_at, updated_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'direct', $9, $9)
				ON CONFLICT (room_id, scope, key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version,
					revision = EXCLUDED.revision, writer = EXCLUDED.writer, via = EXCLUDED.via, updated_at = EXCLUDED.updated_at`,
				m.room, e.Scope, e.Key, e.SortKey, []byte(e.Value), e.Version, m.last, m.actor, m.now)
			e.Revision, e.Writer, e.UpdatedAt = m.last, m.actor, m.now
			res.Entries = append(res.Entries, *e)
		}
		m.audit = map[string]any{"kind": "state_write", "via": "direct", "writes": auditWrites}
		return nil
	})
	if err != nil {
		return nil, err
	}
	res.Seq = seq
	return res, nil
}

func containsKey(ks []entryKey, k entryKey) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

// loadEntries reads, under the room lock, the current entries the writes
// address. Absent entries are missing from the map.
func loadEntries(m *mutation, writes []Write) (map[entryKey]*Entry, error) {
	scopes := make([]string, 0, len(writes))
	keys := make([]string, 0, len(writes))
	for _, w := range writes {
		if w.Key != "" {
			scopes = append(scopes, w.Scope)
			keys = append(keys, w.Key)
		}
	}
	cur := map[entryKey]*Entry{}
	if len(keys) == 0 {
		return cur, nil
	}
	rows, err := m.tx.Query(m.ctx, `SELECT s.scope, s.key, s.value, s.version, s.sort_key
		FROM state s JOIN unnest($2::text[], $3::text[]) AS t(scope, key) ON s.scope = t.scope AND s.key = t.key
		WHERE s.room_id = $1`, m.room, scopes, keys)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		e := &Entry{}
		if err := rows.Scan(&e.Scope, &e.Key, &e.Value, &e.Version, &e.SortKey); err != nil {
			return nil, err
		}
		cur[entryKey{e.Scope, e.Key}] = e
	}
	return cur, rows.Err()
}

// apply computes one write against the entries as the earlier writes of the
// same mutation left them. A deleted entry stays in cur with Version 0.
func (s *Service) apply(m *mutation, cur map[entryKey]*Entry, w *Write) (*Entry, string, error) {
	if w.Append {
		sk := m.seq()
		if w.Key == "" {
			w.Key = strconv.FormatInt(sk, 10)
		}
		k := entryKey{w.Scope, w.Key}
		if old := cur[k]; old != nil && old.Version > 0 {
			return nil, "", errs.New(errs.KeyExists, "%s/%s already exists, and an append never overwrites", w.Scope, w.Key).
				WithHint("omit key to let the server number the entry, or choose a new key")
		}
		value, err := compact(w.Value)
		if err != nil {
			return nil, "", err
		}
		e := &Entry{Scope: w.Scope, Key: w.Key, Value: value, Version: 1, SortKey: &sk}
		cur[k] = e
		return e, "append", nil
	}
	k := entryKey{w.Scope, w.Key}
	old := cur[k]
	if old != nil && old.Version == 0 {
		old = nil
	}
	var curVersion int64
	if old != nil {
		curVersion = old.Version
	}
	if w.IfVersion != nil && *w.IfVersion != curVersion {
		return nil, "", errs.New(errs.VersionConflict, "%s/%s is at version %d, not %d", w.Scope, w.Key, curVersion, *w.IfVersion).
			WithHint("read the entry again and retry with if_version: %d", curVersion).
			With("scope", w.Scope).With("key", w.Key).With("current_version", curVersion)
	}
	switch {
	case w.Delete:
		if old == nil {
			return nil, "", errs.New(errs.KeyNotFound, "%s/%s does not exist", w.Scope, w.Key).WithHint("nothing to delete; read the scope to see its keys")
		}
		cur[k] = &Entry{Scope: w.Scope, Key: w.Key, Version: 0}
		return cur[k], "delete", nil
	case hasJSON(w.Value):
		if old != nil && old.SortKey != nil {
			return nil, "", errs.New(errs.AppendOnly, "%s/%s is an append entry and cannot be replaced", w.Scope, w.Key).
				WithHint("merge into it with \"merge\": {…}, or append a new entry")
		}
		value, err := compact(w.Value)
		if err != nil {
			return nil, "", err
		}
		if len(value) > s.lim.MaxValueBytes {
			return nil, "", s.tooLarge(w.Scope, w.Key, len(value))
		}
		e := &Entry{Scope: w.Scope, Key: w.Key, Value: value, Version: curVersion + 1}
		cur[k] = e
		if old == nil {
			return e, "insert", nil
		}
		return e, "set", nil
	default: // merge
		var patch map[string]json.RawMessage
		if err := json.Unmarshal(w.Merge, &patch); err != nil {
			return nil, "", errs.New(errs.InvalidField, "merge is not a JSON object: %v", err).WithHint("send merge as an object")
		}
		base := map[string]json.RawMessage{}
		var sortKey *int64
		if old != nil {
			if err := json.Unmarshal(old.Value, &base); err != nil || base == nil {
				return nil, "", errs.New(errs.NotMergeable, "%s/%s holds a %s, and merge needs an object", w.Scope, w.Key, jsonKind(old.Value)).
					WithHint("replace it with \"value\" instead")
			}
			sortKey = old.SortKey
		}
		for f, v := range patch {
			base[f] = v
		}
		value, err := json.Marshal(base)
		if err != nil {
			return nil, "", err
		}
		if len(value) > s.lim.MaxValueBytes {
			return nil, "", s.tooLarge(w.Scope, w.Key, len(value))
		}
		e := &Entry{Scope: w.Scope, Key: w.Key, Value: value, Version: curVersion + 1, SortKey: sortKey}
		cur[k] = e
		if old == nil {
			return e, "insert", nil
		}
		return e, "merge", nil
	}
}

func compact(raw json.RawMessage) (json.RawMessage, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, errs.New(errs.InvalidJSON, "value is not valid JSON: %v", err).WithHint("send valid JSON")
	}
	return b.Bytes(), nil
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
// MaxKeysPerScope mutable keys.
func (s *Service) checkScopeCapacity(m *mutation, newKeys map[string]int) error {
	for scope, n := range newKeys {
		var have int
		if err := m.tx.QueryRow(m.ctx, `SELECT count(*) FROM state WHERE room_id = $1 AND scope = $2 AND sort_key IS NULL`,
			m.room, scope).Scan(&have); err != nil {
			return err
		}
		if have+n > s.lim.MaxKeysPerScope {
			return errs.New(errs.ScopeFull, "scope %q has %d keys; %d more would pass the limit of %d", scope, have, n, s.lim.MaxKeysPerScope).
				WithHint("delete keys you no longer need, or keep bulk data in fewer, larger values")
		}
	}
	return nil
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
	// Limit caps the append entries returned. Default 100, at most
	// Limits.MaxLogPage.
	Limit int
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

const entryCols = `SELECT scope, key, value, version, sort_key, revision, writer, updated_at FROM state `

// ReadState returns the state p may see, from one consistent snapshot.
func (s *Service) ReadState(ctx context.Context, p *Principal, roomID string, q ReadQuery) (*StateRead, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	if q.Limit <= 0 {
		q.Limit = 100
	}
	q.Limit = min(q.Limit, s.lim.MaxLogPage)
	if q.Key != "" && q.Scope == "" {
		return nil, errs.New(errs.InvalidField, "key needs scope").WithHint("send scope and key together")
	}
	if q.Scope != "" {
		scope, err := resolveScope(p, q.Scope)
		if err != nil {
			return nil, err
		}
		if !canRead(p, scope) {
			return nil, errs.New(errs.ScopeDenied, "scope %q is private to its agent", scope).
				WithHint("read your own scope, _shared and communal scopes, or ask the agent to publish a view")
		}
		q.Scope = scope
	}
	out := &StateRead{Entries: []Entry{}}
	err := pgx.BeginTxFunc(ctx, s.db.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT seq FROM rooms WHERE id = $1`, roomID).Scan(&out.Seq); err != nil {
			return err
		}
		switch {
		case q.Key != "":
			return collect(ctx, tx, &out.Entries, entryCols+`WHERE room_id = $1 AND scope = $2 AND key = $3`, roomID, q.Scope, q.Key)
		case q.Scope != "":
			if err := collect(ctx, tx, &out.Entries, entryCols+`WHERE room_id = $1 AND scope = $2 AND sort_key IS NULL ORDER BY key`, roomID, q.Scope); err != nil {
				return err
			}
			n := len(out.Entries)
			if err := collect(ctx, tx, &out.Entries, entryCols+`WHERE room_id = $1 AND scope = $2 AND sort_key > $3 ORDER BY sort_key LIMIT $4`,
				roomID, q.Scope, q.After, q.Limit+1); err != nil {
				return err
			}
			if len(out.Entries)-n > q.Limit {
				out.Entries, out.More = out.Entries[:n+q.Limit], true
			}
			return nil
		default:
			max := s.lim.MaxReadEntries
			var err error
			if p.Kind == KindAgent && !p.Admin() {
				err = collect(ctx, tx, &out.Entries, entryCols+`WHERE room_id = $1 AND sort_key IS NULL
					AND ((scope LIKE '\_%' AND scope <> '_audit') OR scope = $2 OR scope = ANY($3))
					ORDER BY scope, key LIMIT $4`, roomID, p.AgentID, p.Grants, max+1)
			} else {
				err = collect(ctx, tx, &out.Entries, entryCols+`WHERE room_id = $1 AND sort_key IS NULL ORDER BY scope, key LIMIT $2`, roomID, max+1)
			}
			if len(out.Entries) > max {
				out.Entries, out.More = out.Entries[:max], true
			}
			return err
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

func collect(ctx context.Context, tx pgx.Tx, into *[]Entry, sql string, args ...any) error {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var e Entry
		if err := rows.Scan(&e.Scope, &e.Key, &e.Value, &e.Version, &e.SortKey, &e.Revision, &e.Writer, &e.UpdatedAt); err != nil {
			return err
		}
		*into = append(*into, e)
	}
	return rows.Err()
}
