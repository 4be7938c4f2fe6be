package trajectory

// Package trajectory reads a room's history back (seed 000 §7.7, Phase
// 9): every _audit entry written by a mutation carries the state delta it
// made, so the audit log reads as ⟨state, action, next-state⟩ triplets.
// From the deltas it streams the trajectory, lists one key's versions and
// replays the room's mutable state at any seq, over the core's audit
// operations (Service.AuditPage, Service.AdmitKeyLog): it has no SQL.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Trajectory pages.
const (
	DefaultLimit        = 1000
	MaxLimit            = 10_000
	HistoryDefaultLimit = 100
	HistoryMaxLimit     = 1000
)

// auditRecord is an _audit entry as the trajectory reads it.
type auditRecord struct {
	Seq     int64              `json:"seq"`
	PrevSeq *int64             `json:"prev_seq"`
	TS      string             `json:"ts"`
	By      string             `json:"by"`
	Kind    string             `json:"kind"`
	Action  string             `json:"action"`
	OK      *bool              `json:"ok"`
	Error   string             `json:"error"`
	Params  json.RawMessage    `json:"params"`
	Result  json.RawMessage    `json:"result"`
	Delta   *[]substrate.Delta `json:"delta"`
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

// auditPageRows bounds the entries read per page (the core bounds the
// bytes).
const auditPageRows = 500

func decodeAudit(r substrate.AuditEntry) (*auditRecord, error) {
	a := &auditRecord{}
	if err := json.Unmarshal(r.Value, a); err != nil {
		return nil, err
	}
	a.Seq = r.Seq
	return a, nil
}

// Step is one line of the trajectory: what acted, how, and the
// state it changed (each delta's before is the state, its after the next
// state).
type Step struct {
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
	OK     *bool             `json:"ok,omitempty"`
	Error  string            `json:"error,omitempty"`
	Params json.RawMessage   `json:"params,omitempty"`
	Result json.RawMessage   `json:"result,omitempty"`
	Delta  []substrate.Delta `json:"delta"`
	// Unrecorded marks an entry written before audit entries carried
	// deltas (its delta is then empty, whatever it changed).
	Unrecorded bool `json:"delta_unrecorded,omitempty"`
}

func stepOf(r substrate.AuditEntry) (*Step, error) {
	a, err := decodeAudit(r)
	if err != nil {
		return nil, err
	}
	st := &Step{Seq: a.Seq, TS: a.TS, By: a.By, Kind: a.Kind, Action: a.Action, Result: a.Result, Delta: []substrate.Delta{}}
	if a.Kind == "invoke" {
		st.OK, st.Error, st.Params = a.OK, a.Error, a.Params
	} else {
		st.Action = "_" + a.Kind
		var all map[string]json.RawMessage
		if err := json.Unmarshal(r.Value, &all); err != nil {
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
func requireTrajectory(ctx context.Context, s *substrate.Service, p *substrate.Principal, roomID, what string) error {
	if err := s.RequireRoom(ctx, p, roomID); err != nil {
		return err
	}
	if !p.Admin() {
		return errs.New(errs.Forbidden, "the %s holds every scope, private ones included: only the room token reads it", what).
			WithHint("read it with the room token; a key's versions (its history) are readable by whoever may read its scope")
	}
	return nil
}

// Query pages the trajectory.
type Query struct {
	// After starts after this seq (0: from the room's creation).
	After int64
	// Limit caps the steps. Default DefaultLimit, at most
	// MaxLimit.
	Limit int64
}

// Stream calls emit with the room's audit entries after q.After, in
// seq order, archived ones included. It reads the log a bounded page at a
// time and holds no connection while emit runs. An error before the first
// emit means nothing was sent.
func Stream(ctx context.Context, s *substrate.Service, p *substrate.Principal, roomID string, q Query, emit func(*Step) error) error {
	if q.After < 0 {
		return errs.New(errs.InvalidField, "after=%d is negative", q.After).WithHint("send after as a seq (0: from the start)").With("field", "after")
	}
	switch {
	case q.Limit == 0:
		q.Limit = DefaultLimit
	case q.Limit < 0 || q.Limit > MaxLimit:
		return errs.New(errs.InvalidField, "limit=%d is outside 1–%d", q.Limit, MaxLimit).
			WithHint("page with after=<last seq> and limit ≤ %d", MaxLimit).With("field", "limit").With("max", MaxLimit)
	}
	if err := requireTrajectory(ctx, s, p, roomID, "trajectory"); err != nil {
		return err
	}
	after, left := q.After, q.Limit
	for left > 0 {
		want := int(min(left, auditPageRows))
		page, err := s.AuditPage(ctx, p, roomID, after, math.MaxInt64, want)
		if err != nil {
			return err
		}
		ends := substrate.AuditPageEnds(page, want)
		for _, r := range page {
			st, err := stepOf(r)
			if err != nil {
				return err
			}
			if err := emit(st); err != nil {
				return err
			}
			after = r.Seq
			left--
		}
		if ends {
			return nil
		}
	}
	return nil
}

// ReplayResult is the room's mutable state rebuilt at a seq, shaped as a
// whole-room state read.
type ReplayResult struct {
	substrate.StateRead
	// Truncated names the entries whose value was over DeltaValueCap when
	// written: theirs is the truncation marker, not the value.
	Truncated []string `json:"truncated,omitempty"`
}

// replayRow is an entry as the replay rebuilds it.
type replayRow struct {
	substrate.Entry
	timer *substrate.DeltaTimer
}

// entryKey names an entry.
type entryKey struct{ scope, key string }

// Replay rebuilds the room's mutable state (every scope, as the room
// token's state read returns it) as it was at seq: from an empty room, the
// deltas of the audit entries up to seq applied in order, logical timers
// ticked as the writes ticked them, and entries whose timer hides them at
// that entry's time left out. It refuses (409 history_incomplete) when an
// entry up to seq is missing or predates deltas.
func Replay(ctx context.Context, s *substrate.Service, p *substrate.Principal, roomID string, seq int64) (*ReplayResult, error) {
	if seq < 1 {
		return nil, errs.New(errs.InvalidField, "seq=%d is not a seq of the room", seq).
			WithHint("send seq as a positive whole number: the room's seq at the state you want (the room's current seq is the latest)").With("field", "seq")
	}
	if err := requireTrajectory(ctx, s, p, roomID, "replay"); err != nil {
		return nil, err
	}
	room, err := s.GetRoom(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	roomSeq := room.Seq
	if seq > roomSeq {
		return nil, errs.New(errs.InvalidField, "seq=%d is past the room's seq %d", seq, roomSeq).
			WithHint("replay at a seq ≤ %d", roomSeq).With("field", "seq").With("room_seq", roomSeq)
	}
	rp := &replayer{seq: seq, state: map[entryKey]*replayRow{}}
	for ends := false; !ends; {
		page, err := s.AuditPage(ctx, p, roomID, rp.last, seq, auditPageRows)
		if err != nil {
			return nil, err
		}
		ends = substrate.AuditPageEnds(page, auditPageRows)
		for _, r := range page {
			if err := rp.record(r); err != nil {
				return nil, err
			}
		}
	}
	if rp.last == 0 {
		return nil, rp.incomplete("the room has no audit entries up to seq %d", seq)
	}
	return rp.result(s.Limits().MaxReadEntries), nil
}

// replayer is a replay under way: the state rebuilt up to last.
type replayer struct {
	seq   int64 // the seq replayed to
	state map[entryKey]*replayRow
	// ticking counts the entries whose logical timer counts writes.
	ticking int
	last    int64     // the seq of the last audit entry applied
	at      time.Time // its time
}

// incomplete is the refusal at a gap: a replay starts from the empty
// room, so nothing after a gap can be rebuilt, only what comes before it.
func (rp *replayer) incomplete(format string, args ...any) *errs.Error {
	hint := "the room's state past this point cannot be rebuilt; the trajectory shows what was recorded"
	if rp.last > 0 {
		hint = fmt.Sprintf("replay at seq %d or earlier; the trajectory shows what was recorded after", rp.last)
	}
	return errs.New(errs.HistoryIncomplete, format, args...).With("seq", rp.seq).WithHint("%s", hint)
}

// record applies one audit entry, refusing one that does not follow the
// last or predates deltas.
func (rp *replayer) record(r substrate.AuditEntry) error {
	a, err := decodeAudit(r)
	if err != nil {
		return err
	}
	// Each mutation records the seq it started from; an entry
	// that does not follow the one before means entries between
	// them are gone.
	if (a.PrevSeq != nil && *a.PrevSeq != rp.last) || (a.PrevSeq == nil && rp.last == 0 && a.Seq != 1) {
		return rp.incomplete("the room's history between seq %d and %d is not in the audit log", rp.last, a.Seq).With("missing_after", rp.last)
	}
	if a.Delta == nil && !a.changesNothing() {
		return rp.incomplete("the audit entry at seq %d (%s) predates state deltas, so the state it made is unknown", a.Seq, a.Kind).With("unrecorded", a.Seq)
	}
	rp.at, err = time.Parse(time.RFC3339Nano, a.TS)
	if err != nil {
		return err
	}
	rp.last = a.Seq
	if a.Delta == nil {
		return nil
	}
	for _, d := range *a.Delta {
		rp.apply(a, d)
	}
	if rp.ticking > 0 {
		tickReplay(rp.state, *a.Delta)
	}
	return nil
}

// apply applies one change of the audit entry a to the state.
func (rp *replayer) apply(a *auditRecord, d substrate.Delta) {
	if d.SortKey != nil {
		return // a log entry: not mutable state
	}
	k := entryKey{d.Scope, d.Key}
	if old := rp.state[k]; old != nil && old.timer != nil && old.timer.TicksLeft != nil {
		rp.ticking--
	}
	if d.After == nil {
		delete(rp.state, k)
		return
	}
	nr := &replayRow{Entry: substrate.Entry{Scope: d.Scope, Key: d.Key, Value: d.After, Version: d.VersionAfter,
		Revision: a.Seq, Writer: a.By, UpdatedAt: rp.at.Local()}}
	if t := d.Timer; t != nil {
		c := *t // ticked below: the replay's own copy
		nr.timer = &c
		if t.TicksLeft != nil {
			rp.ticking++
		}
	}
	rp.state[k] = nr
}

// result is the state rebuilt: the entries live at the last entry's time,
// sorted by scope and key, at most max of them.
func (rp *replayer) result(max int) *ReplayResult {
	out := &ReplayResult{StateRead: substrate.StateRead{Seq: rp.last, Entries: []substrate.Entry{}}}
	for _, r := range rp.state {
		if !r.timer.Live(rp.at) {
			continue
		}
		e := r.Entry
		e.Timer = r.timer.Describe(rp.at)
		out.Entries = append(out.Entries, e)
		if isTruncated(e.Value) {
			out.Truncated = append(out.Truncated, e.Scope+"."+e.Key)
		}
	}
	slices.SortFunc(out.Entries, func(a, b substrate.Entry) int {
		if c := strings.Compare(a.Scope, b.Scope); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	if len(out.Entries) > max {
		out.Entries, out.More = out.Entries[:max], true
	}
	slices.Sort(out.Truncated)
	return out
}

// tickReplay does what a mutation's tick statement did: every entry whose
// logical timer counts writes to one of the entries just written loses a
// tick.
func tickReplay(state map[entryKey]*replayRow, delta []substrate.Delta) {
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
// to whoever may read the key (the core admits: Service.AdmitKeyLog). It
// follows each version to the one it replaced (a primary-key lookup per
// version, in one statement); only across a deletion does it search the
// log for the key's previous write.
func History(ctx context.Context, s *substrate.Service, p *substrate.Principal, roomID string, q HistoryQuery) (*KeyHistory, error) {
	if err := checkHistoryQuery(&q); err != nil {
		return nil, err
	}
	kl, err := s.AdmitKeyLog(ctx, p, roomID, q.Scope, q.Key)
	if err != nil {
		return nil, err
	}
	scope := kl.Scope
	out := &KeyHistory{Scope: scope, Key: q.Key, Versions: []KeyVersion{}}
	want := int(q.Limit) + 1
	err = kl.Read(ctx, func(tx *substrate.KeyLogTx) error { return readHistory(tx, kl, q, out, want) })
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

// checkHistoryQuery refuses a query without scope and key or with a limit
// or before out of range, and sets the default limit.
func checkHistoryQuery(q *HistoryQuery) error {
	if q.Scope == "" || q.Key == "" {
		return errs.New(errs.InvalidField, "history needs scope and key").WithHint("name the scope and the key whose versions you want").With("field", "scope")
	}
	switch {
	case q.Limit == 0:
		q.Limit = HistoryDefaultLimit
	case q.Limit < 0 || q.Limit > HistoryMaxLimit:
		return errs.New(errs.InvalidField, "limit=%d is outside 1–%d", q.Limit, HistoryMaxLimit).
			WithHint("page with before=<next_before> and limit ≤ %d", HistoryMaxLimit).With("field", "limit").With("max", HistoryMaxLimit)
	}
	if q.Before < 0 {
		return errs.New(errs.InvalidField, "before=%d is negative", q.Before).WithHint("send before as a seq, or omit it").With("field", "before")
	}
	return nil
}

// readHistory appends to out, in tx, the key's versions before q.Before
// (newest first) until it holds want or the log has no more.
func readHistory(tx *substrate.KeyLogTx, kl *substrate.KeyLog, q HistoryQuery, out *KeyHistory, want int) error {
	var start int64
	before := q.Before
	if before == 0 {
		before = math.MaxInt64
		var err error
		if start, err = tx.Revision(); err != nil {
			return err
		}
	}
	for len(out.Versions) < want {
		if start == 0 {
			// No link to follow: search the log (state, then the
			// archive) for the key's newest write before `before`.
			var err error
			if start, err = tx.LastWrite(before); err != nil {
				return err
			}
			if start == 0 {
				return nil
			}
		}
		chain, err := tx.Chain(start, want-len(out.Versions))
		if err != nil {
			return err
		}
		link, got, err := appendChain(chain, kl, q.Key, out, &before)
		if err != nil {
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
}

// appendChain appends the versions of one chain of audit entries to out
// and moves before to the oldest; link is the revision the last replaced
// (-1: an entry predates deltas), got the entries read.
func appendChain(chain []substrate.AuditEntry, kl *substrate.KeyLog, key string, out *KeyHistory, before *int64) (link int64, got int, err error) {
	for _, r := range chain {
		got++
		a, err := decodeAudit(r)
		if err != nil {
			return 0, got, err
		}
		d := a.deltaOf(kl.Scope, key)
		if d == nil {
			// The entry the row names predates deltas.
			out.Incomplete, link = true, -1
			break
		}
		v := KeyVersion{Seq: a.Seq, TS: a.TS, By: a.By, Action: a.Action, Version: d.VersionAfter, Value: d.After, Deleted: d.After == nil}
		if kl.Withhold && d.Gated && (kl.Admitted == nil || d.Gate != *kl.Admitted) {
			v.Value, v.Withheld = nil, true
		}
		if a.Kind != "invoke" {
			v.Action = "_" + a.Kind
		}
		out.Versions = append(out.Versions, v)
		link, *before = d.RevisionBefore, a.Seq
	}
	return link, got, nil
}

// deltaOf is the entry's change to scope/key, nil if it made none.
func (a *auditRecord) deltaOf(scope, key string) *substrate.Delta {
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
