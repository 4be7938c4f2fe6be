package envelope

// The messages section's shaping: whom a message is for, which thread it
// is in, the thread list, and which messages a delta keeps.

import (
	"encoding/json"
	"slices"
	"sort"
)

// AddressedTo reports a message directed to agent.
func AddressedTo(msg map[string]any, agent string) bool {
	if agent == "" {
		return false
	}
	switch to := msg["to"].(type) {
	case string:
		return to == agent
	case []string:
		return slices.Contains(to, agent)
	case []any:
		return slices.Contains(to, any(agent))
	}
	return false
}

// maxThreadsShown bounds the context's thread list.
const maxThreadsShown = 8

// Threads is the thread list of a context: of all (the room's live
// threads), the most recently active, unread ones first; unread counts
// come from the messages the read returned (recent), after the reader's
// last read (seenBefore), and read words the read of one thread whole.
func Threads(all []ThreadSummary, recent []map[string]any, self string, seenBefore int64, read func(thread int64) string) []ThreadSummary {
	unread := map[int64]int{}
	for _, m := range recent {
		if self == "" {
			break // only an agent has read marks
		}
		seq, _ := m["seq"].(int64)
		from, _ := m["from"].(string)
		if seq <= seenBefore || from == self {
			continue
		}
		if t := threadOfMsg(m, seq); t != 0 {
			unread[t]++
		}
	}
	out := all
	for i := range out {
		out[i].Unread = unread[out[i].Thread]
	}
	sort.Slice(out, func(i, j int) bool {
		if (out[i].Unread > 0) != (out[j].Unread > 0) {
			return out[i].Unread > 0
		}
		return out[i].Latest > out[j].Latest
	})
	if len(out) > maxThreadsShown {
		out = out[:maxThreadsShown]
	}
	for i := range out {
		out[i].Read = read(out[i].Thread)
	}
	return out
}

// threadOfMsg is the thread a shown message belongs to (0: none).
func threadOfMsg(m map[string]any, seq int64) int64 {
	switch t := m["thread"].(type) {
	case float64:
		return int64(t)
	case json.Number:
		n, _ := t.Int64()
		return n
	case int64:
		return t
	}
	if _, ok := m["subject"]; ok {
		return seq
	}
	return 0
}

// MessageThread is the thread a message of the context's messages.recent
// belongs to (0: none): its thread, or its own seq when it starts one.
func MessageThread(m map[string]any) int64 {
	seq, _ := m["seq"].(int64)
	return threadOfMsg(m, seq)
}

// KeptMessages are the indexes of others a delta of limit messages keeps:
// the oldest addressed to self, then the newest.
func KeptMessages(others []map[string]any, self string, limit int) map[int]bool {
	keep := map[int]bool{}
	for i := 0; i < len(others) && len(keep) < limit; i++ {
		if AddressedTo(others[i], self) {
			keep[i] = true
		}
	}
	for i := len(others) - 1; i >= 0 && len(keep) < limit; i-- {
		keep[i] = true
	}
	return keep
}
