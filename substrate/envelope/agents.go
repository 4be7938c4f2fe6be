package envelope

// The agents a read shows, and the variables the reader's expressions
// see of agents and messages: the envelope's agents section is CEL's
// agents, so both come from here.

import "time"

// Presence is an agent's public presence, as a read loads it.
type Presence struct {
	ID            string
	Name, Role    string
	Status        string
	WaitingOn     *string
	LastHeartbeat time.Time
	LastSeenSeq   int64
	// LastContextSeq and ContextReads are the agent's context reads
	// (adaptive salience).
	LastContextSeq, ContextReads int64
	// Enabled is the agent's enabled expression (nil: always shown).
	Enabled *string
	// Account is the username of the person whose account drives the
	// agent (nil: an agent joined with a token). See the core's
	// Agent.Account.
	Account *string
}

// AgentsVar is the agents map (CEL agents, the context's agents
// section) of agents, id → presence; which agents a reader sees is the
// core's.
func AgentsVar(agents []Presence) map[string]any {
	out := make(map[string]any, len(agents))
	for _, a := range agents {
		m := map[string]any{"name": a.Name, "role": a.Role, "status": a.Status,
			"last_heartbeat": a.LastHeartbeat.UTC().Format(time.RFC3339Nano), "waiting_on": nil}
		if a.WaitingOn != nil {
			m["waiting_on"] = *a.WaitingOn
		}
		if a.Account != nil {
			m["account"] = *a.Account
		}
		out[a.ID] = m
	}
	return out
}

// MessagesVar is CEL's messages: the reader's message counters.
func MessagesVar(count, unread, directedUnread int64) map[string]any {
	return map[string]any{"count": count, "unread": unread, "directed_unread": directedUnread}
}
