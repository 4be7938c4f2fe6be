// Package activity is the room's recent activity as a person watching the
// room reads it (the room page's feed): who did what and which keys
// moved, from the audit log, for any reader of the room; and the agents a
// room had at a past seq, for the room's past (room authority only).
//
// What a reader may know of an entry is the core's (Service.AuditSeenBy
// applies the read rule: room authority reads every entry; any other
// reader only the keys it may read now, and only the entries that moved
// at least one of them); this package pages and shapes what it returns.
// Values and params never appear: the feed says what moved, the state
// shows what it holds.
package activity

import (
	"context"
	"encoding/json"
	"time"

	"github.com/syncsubstrate/sync/substrate"
)

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
	Error string               `json:"error,omitempty"`
	Keys  []substrate.ScopeKey `json:"keys,omitempty"`
}

// Max bounds one Recent read.
const Max = 100

// Recent reads the newest n (1 … Max) audit entries of roomID with seq ≤
// upTo (0: now) that p may know of, newest first.
func Recent(ctx context.Context, s *substrate.Service, p *substrate.Principal, roomID string, upTo int64, n int) ([]Activity, error) {
	if n <= 0 || n > Max {
		n = Max
	}
	// A reader who sees little may need to look further back to fill n:
	// at most 4n entries are read.
	limit := n
	if p != nil && !p.Admin() {
		limit = 4 * n
	}
	seen, err := s.AuditSeenBy(ctx, p, roomID, upTo, limit)
	if err != nil {
		return nil, err
	}
	if len(seen) > n {
		seen = seen[:n]
	}
	var out []Activity
	for _, a := range seen {
		out = append(out, activityOf(a))
	}
	return out, nil
}

// activityOf is an entry as the feed shows it: a refused invocation's
// error by its code.
func activityOf(a substrate.AuditSeen) Activity {
	act := Activity{Seq: a.Seq, TS: a.TS, By: a.By, Kind: a.Kind, Action: a.Action, Command: a.Command, Agent: a.Agent, OK: a.OK, Keys: a.Keys}
	switch e := a.Error.(type) {
	case string:
		act.Error = e
	case map[string]any:
		act.Error, _ = e["code"].(string)
	}
	return act
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
func AgentsJoinedBy(ctx context.Context, s *substrate.Service, p *substrate.Principal, roomID string, seq int64) ([]AgentJoin, error) {
	joins, err := s.AuditOfKind(ctx, p, roomID, "agent_join", seq)
	if err != nil {
		return nil, err
	}
	var out []AgentJoin
	seen := map[string]bool{}
	for _, e := range joins {
		var r struct {
			Agent *string `json:"agent"`
			Name  string  `json:"name"`
			Role  string  `json:"role"`
		}
		if json.Unmarshal(e.Value, &r) != nil || r.Agent == nil {
			continue // names no agent
		}
		if seen[*r.Agent] {
			continue // a rejoin
		}
		seen[*r.Agent] = true
		out = append(out, AgentJoin{Seq: e.Seq, ID: *r.Agent, Name: r.Name, Role: r.Role})
	}
	return out, nil
}
