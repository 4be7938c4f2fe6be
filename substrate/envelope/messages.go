package envelope

// The messages section's shaping: whom a message is for, which thread it
// is in, the thread list, and which messages a delta keeps.

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
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

// ShownMessage is a stored message (its value, raw) as a reader is shown
// it. The sender is who the system recorded as the writer, never a
// "from" inside the value (an action can put anything there); a message
// an action wrote says which action in via.
func ShownMessage(raw json.RawMessage, writer string, via *string) map[string]any {
	m := map[string]any{}
	if json.Unmarshal(raw, &m) != nil {
		m = map[string]any{"body": raw}
	}
	m["from"] = writer
	delete(m, "via")
	if via != nil && strings.HasPrefix(*via, "action:") {
		m["via"] = *via
	}
	SayInvocationOnce(m)
	return m
}

// SayInvocationOnce leaves out of an action_invocation message, as a read
// shows it, what its body and via already say: the action (via names it,
// from the system's record) and the params (the body is the call, unless
// it was cut short). The stored message keeps them, for expressions.
func SayInvocationOnce(m map[string]any) {
	action, _ := m["action"].(string)
	if m["kind"] != "action_invocation" || action == "" || m["via"] != "action:"+action {
		return
	}
	delete(m, "action")
	if body, _ := m["body"].(string); strings.HasPrefix(body, action+"(") && !strings.HasSuffix(body, "…)") {
		delete(m, "params")
	}
}

// A Page is what a messages statement read for a context: how many rows
// and the seqs of its first and last (gated rows included: they decide
// paging, whether or not the reader sees them), of a history of Total
// messages the reader sees, Returned of them shown.
type Page struct {
	Read, Returned int
	MinSeq, MaxSeq int64
	Total          int64
}

// ThreadElided says how to read on in a thread whose page req filled (the
// next starts after its last row); nil when the page holds the rest.
func (p Page) ThreadElided(req ContextRequest, expand func(args map[string]any) string) *MessagesElided {
	if p.Read != req.MessagesLimit {
		return nil
	}
	return &MessagesElided{Total: p.Total, Returned: p.Returned, OldestSeq: p.MinSeq,
		Expand: expand(map[string]any{"only": "messages", "thread": req.Thread, "messages_after": p.MaxSeq})}
}

// Elided says what a read of the newest messages (or a page of them)
// left out, and how to read on; truncated is set when the newest did not
// hold them all.
func (p Page) Elided(req ContextRequest, expand func(args map[string]any) string) (elided *MessagesElided, truncated bool) {
	truncated = req.MessagesAfter == nil && int64(p.Read) < p.Total
	if truncated {
		// The rest, read on: after a glimpse of the newest few (an
		// arrival's three), the newest hundred; after those, the whole
		// history from its start, page by page.
		args := map[string]any{"only": "messages", "messages_after": 0, "messages_limit": 500}
		if req.MessagesLimit < 100 {
			args = map[string]any{"only": "messages"}
		}
		elided = &MessagesElided{Total: p.Total, Returned: p.Returned, OldestSeq: p.MinSeq, Expand: expand(args)}
	}
	if req.MessagesAfter != nil && p.Read == req.MessagesLimit && req.Since == nil {
		// A full page: the next one starts right after its last message.
		elided = &MessagesElided{Total: p.Total, Returned: p.Returned, OldestSeq: p.MinSeq,
			Expand: expand(map[string]any{"only": "messages", "messages_after": p.MaxSeq})}
	}
	return elided, truncated
}

// DirectedAhead puts the messages to the reader first, whatever the
// backlog: a read of the newest (or a delta) that marks older messages
// read must not pass over one addressed to it unshown. directed are the
// reader's unread directed messages, oldest first, at most limit+1 of
// them; those not in read (the page) go ahead of it, oldest first. When
// there are more than limit, the read stops short of the first left out
// (upTo, -1 for no cap), which the next read shows, unless the page holds
// it. A page read in order (messages_after) reaches them in turn.
func DirectedAhead[R any](read, directed []R, seq func(R) int64, limit int) (_ []R, upTo int64) {
	upTo = -1
	in := make(map[int64]bool, len(read))
	for _, r := range read {
		in[seq(r)] = true
	}
	if len(directed) > limit {
		if next := seq(directed[limit]); !in[next] {
			upTo = next - 1
		}
		directed = directed[:limit]
	}
	var ahead []R
	for _, r := range directed {
		if !in[seq(r)] {
			ahead = append(ahead, r)
		}
	}
	return append(ahead, read...), upTo
}
