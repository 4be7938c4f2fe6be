package substrate

// Trajectory export (seed 000 §7.7, Phase 9): every _audit entry written
// by a mutation carries the state delta it made, so the audit log reads as
// ⟨state, action, next-state⟩ triplets. From the deltas the substrate
// streams the trajectory, lists one key's versions and replays the room's
// mutable state at any seq.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// DeltaValueCap is the most a delta stores of one value (its before or
// its after, and an action's result), as JSON. A larger value is recorded
// as {"_truncated": true, "bytes": n, "sha256": "<hex>"}: its size and the
// SHA-256 of its canonical JSON (object keys sorted), enough to tell
// whether two recorded values are the same.
const DeltaValueCap = 16 << 10

// Trajectory pages.
const (
	TrajectoryDefaultLimit = 1000
	TrajectoryMaxLimit     = 10_000
	HistoryDefaultLimit    = 100
	HistoryMaxLimit        = 1000
)

// Delta is one entry a mutation changed: its value and version before
// and after. Before is absent when the entry did not exist (or was not
// live: its timer had run out); After is absent when the mutation deleted
// it. An append entry has SortKey and no before.
type Delta struct {
	Scope         string          `json:"scope"`
	Key           string          `json:"key"`
	SortKey       *int64          `json:"sort_key,omitempty"`
	Before        json.RawMessage `json:"before,omitempty"`
	After         json.RawMessage `json:"after,omitempty"`
	VersionBefore int64           `json:"version_before"`
	VersionAfter  int64           `json:"version_after"`
	// RevisionBefore is the seq of the mutation that wrote the row this
	// one replaced (0: there was none), linking a key's versions.
	RevisionBefore int64 `json:"revision_before,omitempty"`
	// Timer is the entry's lifecycle after the write, when it has one.
	Timer *DeltaTimer `json:"timer,omitempty"`
	// Gated: the entry had an enabled expression after the write (before
	// it, for a delete), so its values are not everyone's to read back.
	Gated bool `json:"gated,omitempty"`
	// Gate is that enabled expression: a key's history shows a gated
	// version to a reader the current gate admits only when it was the
	// same gate (another may have hidden it from them).
	Gate string `json:"gate,omitempty"`
}

// DeltaTimer is a written entry's timer as stored: what a replay needs to
// decide whether the entry is live at a later seq.
type DeltaTimer struct {
	Effect    string     `json:"effect"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	TicksLeft *int64     `json:"ticks_left,omitempty"`
	TickOn    *string    `json:"tick_on,omitempty"`
}

// prior is a row as a mutation first read it.
type prior struct {
	r    *row
	live bool
}

// notePrior remembers the rows a mutation read before it changes them:
// the first read of an entry wins, so a delta spans the whole mutation.
func (m *mutation) notePrior(cur map[entryKey]*row, live func(*row) *row) {
	if len(cur) == 0 {
		return
	}
	if m.before == nil {
		m.before = make(map[entryKey]prior, len(cur))
	}
	for k, r := range cur {
		if _, seen := m.before[k]; !seen {
			m.before[k] = prior{r: r, live: live(r) != nil}
		}
	}
}

// delta is the change the pending writes make, in write order. It costs
// no statement: the old rows were read to compute the writes.
func (m *mutation) delta() []Delta {
	out := make([]Delta, 0, len(m.pending))
	for _, w := range m.pending {
		r := w.r
		d := Delta{Scope: r.Scope, Key: r.Key, SortKey: r.SortKey}
		if b, ok := m.before[entryKey{r.Scope, r.Key}]; ok && b.r != nil {
			d.RevisionBefore = b.r.Revision
			if b.live {
				d.Before, d.VersionBefore = capValue(b.r.Value), b.r.Version
			}
			if d.SortKey == nil {
				d.SortKey = b.r.SortKey
			}
		}
		if w.del {
			if b, ok := m.before[entryKey{r.Scope, r.Key}]; ok && b.r != nil && b.r.enabled != nil {
				d.Gated, d.Gate = true, *b.r.enabled
			}
		} else {
			if r.enabled != nil {
				d.Gated, d.Gate = true, *r.enabled
			}
			d.After, d.VersionAfter = capValue(r.Value), r.Version
			if t := r.timer; t != nil && t.Effect != nil {
				d.Timer = &DeltaTimer{Effect: *t.Effect, ExpiresAt: t.ExpiresAt, TicksLeft: t.TicksLeft, TickOn: t.TickOn}
			}
		}
		if loomMemory(r.Scope, r.Key) {
			d.Before, d.After = redactMemory(d.Before), redactMemory(d.After)
		}
		out = append(out, d)
	}
	return out
}

// loomMemory reports an agent's loom operational memory (trace, pins,
// stashes, thoughts): private to the agent, so the audit records that it
// changed, never what it holds (replay restores its shape, not its text).
func loomMemory(scope, key string) bool {
	return !strings.HasPrefix(scope, "_") && strings.HasPrefix(key, "loom:")
}

func redactMemory(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return v
	}
	out, _ := json.Marshal(map[string]any{"_private": "loom memory", "bytes": len(v)})
	return out
}

// capValue is v, or its truncation marker when v is over DeltaValueCap.
func capValue(v json.RawMessage) json.RawMessage {
	if len(v) <= DeltaValueCap {
		return v
	}
	canon := v
	var x any
	if decodeNumber(v, &x) == nil {
		if b, err := json.Marshal(x); err == nil {
			canon = b
		}
	}
	sum := sha256.Sum256(canon)
	out, _ := json.Marshal(map[string]any{"_truncated": true, "bytes": len(canon), "sha256": hex.EncodeToString(sum[:])})
	return out
}

// capAny is an action's result as the audit stores it.
func capAny(v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return capValue(raw)
}

// isTruncated reports a value recorded as a truncation marker.
func isTruncated(v json.RawMessage) bool {
	if len(v) == 0 || v[0] != '{' || !bytes.Contains(v, []byte(`"_truncated"`)) {
		return false
	}
	var m struct {
		T bool `json:"_truncated"`
	}
	return json.Unmarshal(v, &m) == nil && m.T
}

// auditRecord is an _audit entry as the trajectory reads it.
type auditRecord struct {
	Seq     int64           `json:"seq"`
	PrevSeq *int64          `json:"prev_seq"`
	TS      string          `json:"ts"`
	By      string          `json:"by"`
	Kind    string          `json:"kind"`
	Action  string          `json:"action"`
	OK      *bool           `json:"ok"`
	Error   string          `json:"error"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Delta   *[]Delta        `json:"delta"`
}

// auditFields are the fields every entry has or the trajectory lifts out;
// the others of a non-invocation entry are its params.
var auditFields = []string{"seq", "prev_seq", "ts", "by", "kind", "delta", "writes", "ok"}

// changesNothing reports an entry recorded without a delta that cannot
// have changed state: the room's creation, agents' joins and updates,
// refused invocations.
func (a *auditRecord) changesNothing() bool {
	return a.Kind == "room_create" || strings.HasPrefix(a.Kind, "agent_") || (a.OK != nil && !*a.OK)
}

// auditRow is one _audit entry as stored.
type auditRow struct {
	seq   int64
	value []byte
}

// auditPageBytes bounds the entries read per statement, so a trajectory
// or replay holds a bounded part of the log at a time, and no connection
// while it decodes or writes.
const (
	auditPageRows  = 500
	auditPageBytes = 4 << 20
)

// auditPage reads the room's _audit entries with after < seq ≤ upTo, in
// seq order, from state and state_archive (where retention moved the old
// ones), at most n rows and about auditPageBytes.
func (s *Service) auditPage(ctx context.Context, roomID string, after, upTo int64, n int) ([]auditRow, error) {
	rows, err := s.db.Query(ctx, sqlAuditPage, roomID, after, upTo, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []auditRow
	size := 0
	for rows.Next() {
		var r auditRow
		if err := rows.Scan(&r.seq, &r.value); err != nil {
			return nil, err
		}
		out = append(out, r)
		if size += len(r.value); size > auditPageBytes {
			break
		}
	}
	return out, rows.Err()
}

func decodeAudit(r auditRow) (*auditRecord, error) {
	a := &auditRecord{}
	if err := json.Unmarshal(r.value, a); err != nil {
		return nil, err
	}
	a.Seq = r.seq
	return a, nil
}

// TrajectoryStep is one line of the trajectory: what acted, how, and the
// state it changed (each delta's before is the state, its after the next
// state).
type TrajectoryStep struct {
	Seq int64  `json:"seq"`
	TS  string `json:"ts"`
	By  string `json:"by"`
	// Kind is the audit entry's kind: invoke, state_write,
	// register_action, room_create, agent_join…
	Kind string `json:"kind"`
	// Action is the action invoked (a builtin's name for builtins), else
	// "_" + kind: "_state_write" for a direct write.
	Action string `json:"action"`
	// OK is false for a refused invocation (Error says why).
	OK     *bool           `json:"ok,omitempty"`
	Error  string          `json:"error,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Delta  []Delta         `json:"delta"`
	// Unrecorded marks an entry written before audit entries carried
	// deltas (its delta is then empty, whatever it changed).
	Unrecorded bool `json:"delta_unrecorded,omitempty"`
}

func stepOf(r auditRow) (*TrajectoryStep, error) {
	a, err := decodeAudit(r)
	if err != nil {
		return nil, err
	}
	st := &TrajectoryStep{Seq: a.Seq, TS: a.TS, By: a.By, Kind: a.Kind, Action: a.Action, Result: a.Result, Delta: []Delta{}}
	if a.Kind == "invoke" {
		st.OK, st.Error, st.Params = a.OK, a.Error, a.Params
	} else {
		st.Action = "_" + a.Kind
		var all map[string]json.RawMessage
		if err := json.Unmarshal(r.value, &all); err != nil {
			return nil, err
		}
		for _, f := range auditFields {
			delete(all, f)
		}
		if len(all) > 0 {
			st.Params, _ = json.Marshal(all)
		}
	}
	switch {
	case a.Delta != nil:
		st.Delta = *a.Delta
	case !a.changesNothing():
		st.Unrecorded = true
	}
	return st, nil
}

// requireTrajectory admits the room's own admin: the trajectory and the
// replay hold every scope, private ones included.
func (s *Service) requireTrajectory(ctx context.Context, p *Principal, roomID, what string) error {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return err
	}
	if !p.Admin() {
		return errs.New(errs.Forbidden, "the %s holds every scope, private ones included: only the room token reads it", what).
			WithHint("read it with the room token; a key's versions (its history) are readable by whoever may read its scope")
	}
	return nil
}

// TrajectoryQuery pages the trajectory.
type TrajectoryQuery struct {
	// After starts after this seq (0: from the room's creation).
	After int64
	// Limit caps the steps. Default TrajectoryDefaultLimit, at most
	// TrajectoryMaxLimit.
	Limit int64
}

// Trajectory calls emit with the room's audit entries after q.After, in
// seq order, archived ones included. It reads the log a bounded page at a
// time and holds no connection while emit runs. An error before the first
// emit means nothing was sent.
func (s *Service) Trajectory(ctx context.Context, p *Principal, roomID string, q TrajectoryQuery, emit func(*TrajectoryStep) error) error {
	if q.After < 0 {
		return errs.New(errs.InvalidField, "after=%d is negative", q.After).WithHint("send after as a seq (0: from the start)").With("field", "after")
	}
	switch {
	case q.Limit == 0:
		q.Limit = TrajectoryDefaultLimit
	case q.Limit < 0 || q.Limit > TrajectoryMaxLimit:
		return errs.New(errs.InvalidField, "limit=%d is outside 1–%d", q.Limit, TrajectoryMaxLimit).
			WithHint("page with after=<last seq> and limit ≤ %d", TrajectoryMaxLimit).With("field", "limit").With("max", TrajectoryMaxLimit)
	}
	if err := s.requireTrajectory(ctx, p, roomID, "trajectory"); err != nil {
		return err
	}
	after, left := q.After, q.Limit
	for left > 0 {
		page, err := s.auditPage(ctx, roomID, after, math.MaxInt64, int(min(left, auditPageRows)))
		if err != nil {
			return err
		}
		for _, r := range page {
			st, err := stepOf(r)
			if err != nil {
				return err
			}
			if err := emit(st); err != nil {
				return err
			}
			after = r.seq
			left--
		}
		if len(page) == 0 {
			return nil
		}
	}
	return nil
}

// ReplayResult is the room's mutable state rebuilt at a seq, shaped as a
// whole-room state read.
type ReplayResult struct {
	StateRead
	// Truncated names the entries whose value was over DeltaValueCap when
	// written: theirs is the truncation marker, not the value.
	Truncated []string `json:"truncated,omitempty"`
}

// replayRow is an entry as the replay rebuilds it.
type replayRow struct {
	Entry
	timer *timerState
}

// Replay rebuilds the room's mutable state (every scope, as the room
// token's state read returns it) as it was at seq: from an empty room, the
// deltas of the audit entries up to seq applied in order, logical timers
// ticked as the writes ticked them, and entries whose timer hides them at
// that entry's time left out. It refuses (409 history_incomplete) when an
// entry up to seq is missing or predates deltas.
func (s *Service) Replay(ctx context.Context, p *Principal, roomID string, seq int64) (*ReplayResult, error) {
	if seq < 1 {
		return nil, errs.New(errs.InvalidField, "seq=%d is not a seq of the room", seq).
			WithHint("send seq as a positive whole number: the room's seq at the state you want (the room's current seq is the latest)").With("field", "seq")
	}
	if err := s.requireTrajectory(ctx, p, roomID, "replay"); err != nil {
		return nil, err
	}
	var roomSeq int64
	if err := s.db.QueryRow(ctx, `SELECT seq FROM rooms WHERE id = $1`, roomID).Scan(&roomSeq); err != nil {
		return nil, err
	}
	if seq > roomSeq {
		return nil, errs.New(errs.InvalidField, "seq=%d is past the room's seq %d", seq, roomSeq).
			WithHint("replay at a seq ≤ %d", roomSeq).With("field", "seq").With("room_seq", roomSeq)
	}
	state := map[entryKey]*replayRow{}
	ticking := 0
	var last int64
	var at time.Time
	// A replay starts from the empty room: nothing after a gap can be
	// rebuilt, only what comes before it.
	incomplete := func(format string, args ...any) *errs.Error {
		hint := "the room's state past this point cannot be rebuilt; the trajectory shows what was recorded"
		if last > 0 {
			hint = fmt.Sprintf("replay at seq %d or earlier; the trajectory shows what was recorded after", last)
		}
		return errs.New(errs.HistoryIncomplete, format, args...).With("seq", seq).WithHint("%s", hint)
	}
	for {
		page, err := s.auditPage(ctx, roomID, last, seq, auditPageRows)
		if err != nil {
			return nil, err
		}
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			a, err := decodeAudit(r)
			if err != nil {
				return nil, err
			}
			// Each mutation records the seq it started from; an entry
			// that does not follow the one before means entries between
			// them are gone.
			if (a.PrevSeq != nil && *a.PrevSeq != last) || (a.PrevSeq == nil && last == 0 && a.Seq != 1) {
				return nil, incomplete("the room's history between seq %d and %d is not in the audit log", last, a.Seq).With("missing_after", last)
			}
			if a.Delta == nil && !a.changesNothing() {
				return nil, incomplete("the audit entry at seq %d (%s) predates state deltas, so the state it made is unknown", a.Seq, a.Kind).With("unrecorded", a.Seq)
			}
			at, err = time.Parse(time.RFC3339Nano, a.TS)
			if err != nil {
				return nil, err
			}
			last = a.Seq
			if a.Delta == nil {
				continue
			}
			for _, d := range *a.Delta {
				if d.SortKey != nil {
					continue // a log entry: not mutable state
				}
				k := entryKey{d.Scope, d.Key}
				if old := state[k]; old != nil && old.timer != nil && old.timer.TicksLeft != nil {
					ticking--
				}
				if d.After == nil {
					delete(state, k)
					continue
				}
				nr := &replayRow{Entry: Entry{Scope: d.Scope, Key: d.Key, Value: d.After, Version: d.VersionAfter,
					Revision: a.Seq, Writer: a.By, UpdatedAt: at.Local()}}
				if t := d.Timer; t != nil {
					eff := t.Effect
					nr.timer = &timerState{Effect: &eff, ExpiresAt: t.ExpiresAt, TicksLeft: t.TicksLeft, TickOn: t.TickOn}
					if t.TicksLeft != nil {
						ticking++
					}
				}
				state[k] = nr
			}
			if ticking > 0 {
				tickReplay(state, *a.Delta)
			}
		}
	}
	if last == 0 {
		return nil, incomplete("the room has no audit entries up to seq %d", seq)
	}
	out := &ReplayResult{StateRead: StateRead{Seq: last, Entries: []Entry{}}}
	for _, r := range state {
		if !r.timer.live(at) {
			continue
		}
		e := r.Entry
		e.Timer = r.timer.describe(at)
		out.Entries = append(out.Entries, e)
		if isTruncated(e.Value) {
			out.Truncated = append(out.Truncated, e.Scope+"."+e.Key)
		}
	}
	slices.SortFunc(out.Entries, func(a, b Entry) int {
		if c := strings.Compare(a.Scope, b.Scope); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	if max := s.lim.MaxReadEntries; len(out.Entries) > max {
		out.Entries, out.More = out.Entries[:max], true
	}
	slices.Sort(out.Truncated)
	return out, nil
}

// tickReplay does what a mutation's tick statement did: every entry whose
// logical timer counts writes to one of the entries just written loses a
// tick.
func tickReplay(state map[entryKey]*replayRow, delta []Delta) {
	targets := make(map[string]bool, len(delta))
	for _, d := range delta {
		targets[d.Scope+"."+d.Key] = true
	}
	for _, r := range state {
		t := r.timer
		if t == nil || t.TicksLeft == nil || t.TickOn == nil || *t.TicksLeft <= 0 || !targets[*t.TickOn] {
			continue
		}
		n := *t.TicksLeft - 1
		t.TicksLeft = &n
	}
}

// KeyVersion is one version of a key in its history.
type KeyVersion struct {
	Seq    int64  `json:"seq"`
	TS     string `json:"ts"`
	By     string `json:"by"`
	Action string `json:"action"`
	// Version is the entry's version after the write (0 when deleted).
	Version int64           `json:"version"`
	Value   json.RawMessage `json:"value,omitempty"`
	Deleted bool            `json:"deleted,omitempty"`
	// Withheld: the version was gated by an enabled expression the
	// reader cannot be shown to pass, so its value is left out.
	Withheld bool `json:"withheld,omitempty"`
}

// KeyHistory is a page of one key's versions, newest first.
type KeyHistory struct {
	Scope    string       `json:"scope"`
	Key      string       `json:"key"`
	Versions []KeyVersion `json:"versions"`
	// NextBefore pages on: pass it as before for the older versions.
	NextBefore int64 `json:"next_before,omitempty"`
	// Incomplete is set when older versions exist but predate deltas.
	Incomplete bool `json:"incomplete,omitempty"`
}

// HistoryQuery selects a key's versions.
type HistoryQuery struct {
	Scope, Key string
	// Before keeps versions written before this seq (0: all).
	Before int64
	// Limit caps the versions. Default HistoryDefaultLimit, at most
	// HistoryMaxLimit.
	Limit int64
}

// History lists one key's versions from the audit deltas, newest first,
// to whoever may read its scope. It follows each version to the one it
// replaced (a primary-key lookup per version, in one statement); only
// across a deletion does it search the log for the key's previous write.
func (s *Service) History(ctx context.Context, p *Principal, roomID string, q HistoryQuery) (*KeyHistory, error) {
	if q.Scope == "" || q.Key == "" {
		return nil, errs.New(errs.InvalidField, "history needs scope and key").WithHint("name the scope and the key whose versions you want").With("field", "scope")
	}
	switch {
	case q.Limit == 0:
		q.Limit = HistoryDefaultLimit
	case q.Limit < 0 || q.Limit > HistoryMaxLimit:
		return nil, errs.New(errs.InvalidField, "limit=%d is outside 1–%d", q.Limit, HistoryMaxLimit).
			WithHint("page with before=<next_before> and limit ≤ %d", HistoryMaxLimit).With("field", "limit").With("max", HistoryMaxLimit)
	}
	if q.Before < 0 {
		return nil, errs.New(errs.InvalidField, "before=%d is negative", q.Before).WithHint("send before as a seq, or omit it").With("field", "before")
	}
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	scope, err := resolveScope(p, q.Scope)
	if err != nil {
		return nil, err
	}
	if err := validName("scope", scope, s.lim.MaxScopeBytes, true); err != nil {
		return nil, err
	}
	if err := validKey(q.Key, s.lim.MaxKeyBytes); err != nil {
		return nil, err
	}
	if !canRead(p, scope) {
		return nil, scopeDenied(scope, "")
	}
	if vis, err := s.visibilityIn(ctx, s.db, p, roomID); err != nil {
		return nil, err
	} else if !vis.entry(scope, q.Key) {
		return nil, vis.refuse(scope, q.Key)
	}
	// withhold: gated versions' values are left out, for a reader who
	// has not just been shown the entry through its gate (a deleted or
	// since ungated entry says nothing of whom its old gate admitted).
	withhold := !p.Admin()
	// admitted is the gate that has just admitted the reader: versions
	// gated by it are shown, those gated by another are not.
	var admitted *string
	if !p.Admin() {
		// A key whose enabled is false for the reader is not there for it
		// (GET /state says 404), and neither are its versions; room
		// authority reads the trajectory anyway.
		gateOf := func() (*string, error) {
			var gate *string
			err := s.db.QueryRow(ctx, `SELECT enabled_expr FROM state WHERE room_id = $1 AND scope = $2 AND key = $3`, roomID, scope, q.Key).Scan(&gate)
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
			if _, err := s.ReadState(ctx, p, roomID, ReadQuery{Scope: scope, Key: q.Key}); err != nil {
				return nil, err
			}
			// The gate the read evaluated, unless it changed meanwhile.
			if again, err := gateOf(); err != nil {
				return nil, err
			} else if again != nil && *again == *gate {
				admitted = gate
			}
		}
	}
	out := &KeyHistory{Scope: scope, Key: q.Key, Versions: []KeyVersion{}}
	want := int(q.Limit) + 1
	touch, _ := json.Marshal([]map[string]string{{"scope": scope, "key": q.Key}})
	err = s.db.ReadTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var start int64
		before := q.Before
		if before == 0 {
			before = math.MaxInt64
			err := tx.QueryRow(ctx, `SELECT revision FROM state WHERE room_id = $1 AND scope = $2 AND key = $3`, roomID, scope, q.Key).Scan(&start)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
		}
		for len(out.Versions) < want {
			if start == 0 {
				// No link to follow: search the log (state, then the
				// archive) for the key's newest write before `before`.
				for _, sql := range []string{sqlKeyLastWrite, sqlKeyLastWriteArchived} {
					err := tx.QueryRow(ctx, sql, roomID, before, string(touch)).Scan(&start)
					if err != nil && !errors.Is(err, pgx.ErrNoRows) {
						return err
					}
					if start != 0 {
						break
					}
				}
				if start == 0 {
					return nil
				}
			}
			rows, err := tx.Query(ctx, sqlKeyChain, roomID, scope, q.Key, start, want-len(out.Versions))
			if err != nil {
				return err
			}
			var link int64
			got := 0
			for rows.Next() {
				var r auditRow
				if err := rows.Scan(&r.seq, &r.value); err != nil {
					rows.Close()
					return err
				}
				got++
				a, err := decodeAudit(r)
				if err != nil {
					rows.Close()
					return err
				}
				d := a.deltaOf(scope, q.Key)
				if d == nil {
					// The entry the row names predates deltas.
					out.Incomplete, link = true, -1
					break
				}
				v := KeyVersion{Seq: a.Seq, TS: a.TS, By: a.By, Action: a.Action, Version: d.VersionAfter, Value: d.After, Deleted: d.After == nil}
				if withhold && d.Gated && (admitted == nil || d.Gate != *admitted) {
					v.Value, v.Withheld = nil, true
				}
				if a.Kind != "invoke" {
					v.Action = "_" + a.Kind
				}
				out.Versions = append(out.Versions, v)
				link, before = d.RevisionBefore, a.Seq
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if link < 0 || got == 0 {
				return nil
			}
			// The chain ended at the limit, at an entry created afresh
			// (search on for an older incarnation), or at a link whose
			// entry is gone.
			start = 0
			if link > 0 && len(out.Versions) < want {
				out.Incomplete = true
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out.Versions) == 0 && !out.Incomplete && q.Before == 0 {
		return nil, errs.New(errs.KeyNotFound, "%s/%s has no recorded versions", scope, q.Key).WithHint("read the scope without key to see its keys")
	}
	if len(out.Versions) > int(q.Limit) {
		out.Versions = out.Versions[:q.Limit]
		out.NextBefore = out.Versions[len(out.Versions)-1].Seq
	}
	return out, nil
}

// deltaOf is the entry's change to scope/key, nil if it made none.
func (a *auditRecord) deltaOf(scope, key string) *Delta {
	if a.Delta == nil {
		return nil
	}
	for i := range *a.Delta {
		if d := &(*a.Delta)[i]; d.Scope == scope && d.Key == key {
			return d
		}
	}
	return nil
}
