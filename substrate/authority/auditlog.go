package authority

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// ReadsAuditLog refuses p unless it is room authority of roomID: the
// audit log records every scope a mutation wrote, private ones included,
// so no narrower credential reads it whole.
func ReadsAuditLog(p *Principal, roomID string) error {
	if p == nil || p.RoomID != roomID || !p.Admin() {
		return errs.New(errs.Forbidden, "the audit log holds every scope, private ones included: only the room token reads it").
			WithHint("read it with the room token")
	}
	return nil
}

// ScopeKey names one entry.
type ScopeKey struct {
	Scope string `json:"scope"`
	Key   string `json:"key"`
}

// AuditSeen is what a reader of the room may know of one audit entry:
// who did what and which keys it moved. Values and params are never
// here: the state shows what a key holds, to whoever may read it.
type AuditSeen struct {
	Seq     int64
	TS      time.Time
	By      string
	Kind    string
	Action  string
	Command string // a loom entry's verb
	// Agent is the agent an agent_* entry is about (By may be whoever
	// made it); "" for other kinds.
	Agent string
	OK    *bool // whether an invocation went through; nil for other kinds
	// Error is a refused invocation's error as recorded (a code, or an
	// object with one): room authority only.
	Error any
	// Keys are the keys the entry moved, each once: for a reader who is
	// not room authority only those it may read now.
	Keys []ScopeKey
}

// auditRec is the part of an audit entry AuditSeen tells of.
type auditRec struct {
	TS     time.Time  `json:"ts"`
	By     string     `json:"by"`
	Kind   string     `json:"kind"`
	Action string     `json:"action"`
	Cmd    string     `json:"command"`
	Agent  string     `json:"agent"`
	OK     *bool      `json:"ok"`
	Error  any        `json:"error"`
	Delta  []ScopeKey `json:"delta"`
}

// AuditSeenOf is what room authority (admin) knows of the audit entry at
// seq recorded as raw, or what any reader does before its keys are
// decided (AuditNarrowed): no error, which may name what it cannot read.
// ok is false for a record that does not decode.
func AuditSeenOf(seq int64, raw []byte, admin bool) (a AuditSeen, ok bool) {
	var r auditRec
	if json.Unmarshal(raw, &r) != nil {
		return a, false
	}
	a = AuditSeen{Seq: seq, TS: r.TS, By: r.By, Kind: r.Kind, Action: r.Action, Command: r.Cmd, OK: r.OK}
	if strings.HasPrefix(r.Kind, "agent_") {
		a.Agent = r.Agent
	}
	if admin {
		a.Error = r.Error
	}
	for _, k := range r.Delta {
		if !slices.Contains(a.Keys, k) {
			a.Keys = append(a.Keys, k)
		}
	}
	return a, true
}

// AuditNarrowed is what a reader who is not room authority may know of
// the entries all, given which of their keys it may read now (seen): only
// those keys, and no entry that moved none of them, not even that
// something happened. It reuses all's storage.
func AuditNarrowed(all []AuditSeen, seen map[ScopeKey]bool) []AuditSeen {
	out := all[:0]
	for _, a := range all {
		var keys []ScopeKey
		for _, k := range a.Keys {
			if seen[k] {
				keys = append(keys, k)
			}
		}
		if len(keys) > 0 {
			a.Keys = keys
			out = append(out, a)
		}
	}
	return out
}

// AuditEntry is one _audit entry as stored: its seq and its record.
type AuditEntry struct {
	Seq   int64
	Value json.RawMessage
}

// AuditPageBytes bounds the entries read per statement, so a trajectory
// or replay holds a bounded part of the log at a time, and no connection
// while it decodes or writes.
const AuditPageBytes = 4 << 20

// MaxAuditPageRows bounds the rows of one page of the log, whatever n a
// caller asks for: the statement's own LIMIT, so that stopping at the byte
// bound never leaves a large result to drain.
const MaxAuditPageRows = 1000

// AuditPageRows is the rows a page of the log asked for n holds at most:
// n, or MaxAuditPageRows for n out of 1 … MaxAuditPageRows.
func AuditPageRows(n int) int {
	if n <= 0 || n > MaxAuditPageRows {
		return MaxAuditPageRows
	}
	return n
}

// AuditPageEnds reports whether a page read for n rows ends the log up to
// its bound: it is short, and not because the page reached its size
// bound. A reader stops there, without another statement.
func AuditPageEnds(page []AuditEntry, n int) bool {
	size := 0
	for _, r := range page {
		size += len(r.Value)
	}
	return len(page) < AuditPageRows(n) && size <= AuditPageBytes
}
