package substrate

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// The room's recent activity, as a person watching the room reads it (the
// room page's feed): who did what and which keys moved, from the audit
// log, for any reader of the room. Room authority reads every entry; any
// other reader only the keys it may read now (its scopes, features' read
// rules, and enabled gates, as a read of each key would decide), and only
// the entries that moved at least one of them. Values and params never
// appear: the feed says what moved, the state shows what it holds.

// Activity is one audit entry as the feed shows it.
type Activity struct {
	Seq    int64     `json:"seq"`
	TS     time.Time `json:"ts"`
	By     string    `json:"by"`
	Kind   string    `json:"kind"`
	Action string    `json:"action,omitempty"`
	// Command is a loom entry's verb (add, continue, fulfil, …).
	Command string `json:"command,omitempty"`
	// Agent is the agent an agent_join, agent_update or agent_embody is
	// about (By may be whoever made it).
	Agent string `json:"agent,omitempty"`
	// OK is whether an invocation went through (nil for other kinds).
	OK *bool `json:"ok,omitempty"`
	// Error is a refused invocation's error code (room authority only).
	Error string     `json:"error,omitempty"`
	Keys  []ScopeKey `json:"keys,omitempty"`
}

// ScopeKey names one entry.
type ScopeKey struct {
	Scope string `json:"scope"`
	Key   string `json:"key"`
}

// MaxActivity bounds one RecentActivity read.
const MaxActivity = 100

// RecentActivity reads the newest n (1 … MaxActivity) audit entries of
// roomID with seq ≤ upTo (0: now) that p may know of, newest first.
func (s *Service) RecentActivity(ctx context.Context, p *Principal, roomID string, upTo int64, n int) ([]Activity, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	if n <= 0 || n > MaxActivity {
		n = MaxActivity
	}
	if upTo <= 0 {
		upTo = 1<<63 - 1
	}
	admin := p.Admin()
	// A reader who sees little may need to look further back to fill n:
	// at most 4n entries are read.
	limit := n
	if !admin {
		limit = 4 * n
	}
	all, err := s.readActivity(ctx, roomID, upTo, limit, admin)
	if err != nil {
		return nil, err
	}
	if admin {
		return all, nil
	}
	seen, err := s.activityKeysSeen(ctx, p, roomID, all)
	if err != nil {
		return nil, err
	}
	return activitySeen(all, seen, n), nil
}

// auditRec is the part of an audit entry the feed reads.
type auditRec struct {
	TS     time.Time `json:"ts"`
	By     string    `json:"by"`
	Kind   string    `json:"kind"`
	Action string    `json:"action"`
	Cmd    string    `json:"command"`
	Agent  string    `json:"agent"`
	OK     *bool     `json:"ok"`
	Error  any       `json:"error"`
	Delta  []struct {
		Scope string `json:"scope"`
		Key   string `json:"key"`
	} `json:"delta"`
}

// readActivity reads the newest limit audit entries of roomID with seq ≤
// upTo as the feed shows them to room authority (admin) or before the
// reader's keys are decided.
func (s *Service) readActivity(ctx context.Context, roomID string, upTo int64, limit int, admin bool) ([]Activity, error) {
	rows, err := s.db.Query(ctx, `SELECT sort_key, value FROM state WHERE room_id = $1 AND scope = '_audit' AND sort_key <= $2
		ORDER BY sort_key DESC LIMIT $3`, roomID, upTo, limit)
	if err != nil {
		return nil, err
	}
	var all []Activity
	for rows.Next() {
		var seq int64
		var raw json.RawMessage
		if err := rows.Scan(&seq, &raw); err != nil {
			rows.Close()
			return nil, err
		}
		var r auditRec
		if json.Unmarshal(raw, &r) != nil {
			continue
		}
		all = append(all, activityOf(seq, &r, admin))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return all, nil
}

// activityOf is audit entry seq as the feed shows it: a refused
// invocation's error code only to room authority, each key once.
func activityOf(seq int64, r *auditRec, admin bool) Activity {
	a := Activity{Seq: seq, TS: r.TS, By: r.By, Kind: r.Kind, Action: r.Action, Command: r.Cmd, OK: r.OK}
	if strings.HasPrefix(r.Kind, "agent_") {
		a.Agent = r.Agent
	}
	if admin {
		switch e := r.Error.(type) {
		case string:
			a.Error = e
		case map[string]any:
			a.Error, _ = e["code"].(string)
		}
	}
	for _, d := range r.Delta {
		if !slices.Contains(a.Keys, ScopeKey{d.Scope, d.Key}) {
			a.Keys = append(a.Keys, ScopeKey{d.Scope, d.Key})
		}
	}
	return a
}

// activityKeysSeen decides which of the keys all moved p may read now.
// Each key is decided once: the scope and the features' rules, then its
// gate (a gated key is read as p, as GET /state would). The gates of all
// the keys are looked up in one statement.
func (s *Service) activityKeysSeen(ctx context.Context, p *Principal, roomID string, all []Activity) (map[ScopeKey]bool, error) {
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
	gated, err := s.db.Query(ctx, `SELECT s.scope, s.key FROM state s JOIN unnest($2::text[], $3::text[]) AS k(scope, key)
			ON s.scope = k.scope AND s.key = k.key WHERE s.room_id = $1 AND s.enabled_expr IS NOT NULL`, roomID, scopes, keys)
	if err != nil {
		return nil, err
	}
	var check []ScopeKey
	for gated.Next() {
		var k ScopeKey
		if err := gated.Scan(&k.Scope, &k.Key); err != nil {
			gated.Close()
			return nil, err
		}
		check = append(check, k)
	}
	gated.Close()
	if err := gated.Err(); err != nil {
		return nil, err
	}
	return check, nil
}

// activitySeen is the newest n entries of all that moved a key the reader
// sees, each with only those keys. An entry that moved nothing the reader
// may read is not there for it: not even that something happened.
func activitySeen(all []Activity, seen map[ScopeKey]bool, n int) []Activity {
	var out []Activity
	for _, a := range all {
		var keys []ScopeKey
		for _, k := range a.Keys {
			if seen[k] {
				keys = append(keys, k)
			}
		}
		if len(keys) == 0 {
			continue
		}
		a.Keys = keys
		out = append(out, a)
		if len(out) == n {
			break
		}
	}
	return out
}

// AgentJoin is an agent as it first joined the room.
type AgentJoin struct {
	Seq  int64  `json:"seq"`
	ID   string `json:"agent"`
	Name string `json:"name"`
	Role string `json:"role,omitempty"`
}

// AgentsJoinedBy lists the agents roomID had at seq (agents are never
// removed: those that had joined by then), from the audit log, archived
// entries included. Room authority only, as the log is.
func (s *Service) AgentsJoinedBy(ctx context.Context, p *Principal, roomID string, seq int64) ([]AgentJoin, error) {
	if p == nil || p.RoomID != roomID || !p.Admin() {
		return nil, errs.New(errs.Forbidden, "the audit log holds every scope, private ones included: only the room token reads it").
			WithHint("read it with the room token")
	}
	rows, err := s.db.Query(ctx, `SELECT sort_key, value->>'agent', coalesce(value->>'name', ''), coalesce(value->>'role', '') FROM (
		SELECT sort_key, value FROM state WHERE room_id = $1 AND scope = '_audit' AND sort_key <= $2 AND value->>'kind' = 'agent_join'
		UNION ALL
		SELECT sort_key, value FROM state_archive WHERE room_id = $1 AND scope = '_audit' AND sort_key <= $2 AND value->>'kind' = 'agent_join') t
		ORDER BY sort_key LIMIT 1000`, roomID, seq)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AgentJoin
	seen := map[string]bool{}
	for rows.Next() {
		var a AgentJoin
		var id *string
		if err := rows.Scan(&a.Seq, &id, &a.Name, &a.Role); err != nil {
			return nil, err
		}
		if id == nil || seen[*id] {
			continue // a rejoin
		}
		a.ID, seen[*id] = *id, true
		out = append(out, a)
	}
	return out, rows.Err()
}
