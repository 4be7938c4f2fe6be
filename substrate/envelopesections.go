// The envelope's messages and actions sections: what a reader is shown of
// the room's messages (counters, the recent or paged ones, threads) and of
// its actions (availability, signatures, the definitions beyond lean).

package substrate

import (
	"context"
	"encoding/json"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// sayInvocationOnce leaves out of an action_invocation message, as a read
// shows it, what its body and via already say: the action (via names it,
// from the system's record) and the params (the body is the call, unless
// it was cut short). The stored message keeps them, for expressions.
func sayInvocationOnce(m map[string]any) {
	action, _ := m["action"].(string)
	if m["kind"] != "action_invocation" || action == "" || m["via"] != "action:"+action {
		return
	}
	delete(m, "action")
	if body, _ := m["body"].(string); strings.HasPrefix(body, action+"(") && !strings.HasSuffix(body, "…)") {
		delete(m, "params")
	}
}

// messagesSection returns the message counters and recent messages, and
// marks what it returned as read for an agent caller.
func (s *Service) messagesSection(ctx context.Context, q querier, rc *roomCtx, roomID string, req ContextRequest) (*Messages, bool, error) {
	read, err := scanMsgRows(queryMessages(ctx, q, rc, roomID, req))
	if err != nil {
		return nil, false, err
	}
	// The rows read (gated ones included) decide paging: a page is full
	// when the query filled it, and the next starts after its last row,
	// whether or not the reader sees that one.
	var maxSeq, minSeq int64
	for _, r := range read {
		maxSeq = max(maxSeq, r.seq)
		if minSeq == 0 {
			minSeq = r.seq
		}
	}
	upTo := int64(-1) // no cap
	if rc.self != "" && req.Thread == 0 && rc.counted && rc.msgs.Directed > 0 && (req.MessagesAfter == nil || req.Since != nil) {
		if read, upTo, err = directedAhead(ctx, q, rc, roomID, req, read); err != nil {
			return nil, false, err
		}
	}
	shown := s.logGate(ctx, rc)
	recent := []map[string]any{}
	for _, r := range read {
		if shown(r.enabled) {
			recent = append(recent, rc.shownMessage(r))
		}
	}
	out := &Messages{Count: rc.msgs.Count, Unread: rc.msgs.Unread, DirectedUnread: rc.msgs.Directed, Recent: recent}
	if req.Thread != 0 {
		out.Thread = &req.Thread
		if len(read) == req.MessagesLimit {
			out.Elided = &MessagesElided{Total: rc.msgs.Count, Returned: len(recent), OldestSeq: minSeq,
				Expand: rc.p.say(errs.Step{Op: errs.OpReadContext, Room: roomID,
					Args: map[string]any{"only": "messages", "thread": req.Thread, "messages_after": maxSeq}})}
		}
		if rc.self != "" {
			rc.readUpTo = max(rc.readUpTo, maxSeq)
		}
		return out, false, nil
	}
	out.Threads = rc.threadsSection(roomID, recent, rc.seenBefore())
	var truncated bool
	out.Elided, truncated = rc.messagesElided(roomID, req, len(read), len(recent), minSeq, maxSeq)
	if rc.self != "" {
		rc.readUpTo = max(rc.readUpTo, maxSeq)
		if upTo >= 0 {
			rc.readUpTo = min(rc.readUpTo, upTo)
		}
	}
	return out, truncated, nil
}

// messagesElided says what a read of the newest messages (or a page of
// them) left out, and how to read on; truncated is set when the newest
// did not hold them all.
func (rc *roomCtx) messagesElided(roomID string, req ContextRequest, read, returned int, minSeq, maxSeq int64) (elided *MessagesElided, truncated bool) {
	truncated = req.MessagesAfter == nil && int64(read) < rc.msgs.Count
	if truncated {
		// The rest, read on: after a glimpse of the newest few (an
		// arrival's three), the newest hundred; after those, the whole
		// history from its start, page by page.
		args := map[string]any{"only": "messages", "messages_after": 0, "messages_limit": 500}
		if req.MessagesLimit < 100 {
			args = map[string]any{"only": "messages"}
		}
		elided = &MessagesElided{Total: rc.msgs.Count, Returned: returned, OldestSeq: minSeq,
			Expand: rc.p.say(errs.Step{Op: errs.OpReadContext, Room: roomID, Args: args})}
	}
	if req.MessagesAfter != nil && read == req.MessagesLimit && req.Since == nil {
		// A full page: the next one starts right after its last message.
		elided = &MessagesElided{Total: rc.msgs.Count, Returned: returned, OldestSeq: minSeq,
			Expand: rc.p.say(errs.Step{Op: errs.OpReadContext, Room: roomID,
				Args: map[string]any{"only": "messages", "messages_after": maxSeq}})}
	}
	return elided, truncated
}

// msgRow is a message as a messages statement reads it.
type msgRow struct {
	seq          int64
	raw          json.RawMessage
	writer       string
	via, enabled *string
}

// queryMessages runs the statement that reads the request's messages: a
// thread's page, the newest after a seq (a delta), a page after a seq,
// or the newest.
func queryMessages(ctx context.Context, q querier, rc *roomCtx, roomID string, req ContextRequest) (pgx.Rows, error) {
	switch {
	case req.Thread != 0:
		after := int64(0)
		if req.MessagesAfter != nil {
			after = *req.MessagesAfter
		}
		return q.Query(ctx, sqlThreadMessages, roomID, req.Thread, after, req.MessagesLimit, rc.snap.seq)
	case req.MessagesAfter != nil && req.Since != nil:
		// A delta shows the newest since (deltaOf); the older ones are
		// counted as read, with the read that returns them.
		return q.Query(ctx, sqlMessagesNewestAfter, roomID, *req.MessagesAfter, req.MessagesLimit, rc.snap.seq)
	case req.MessagesAfter != nil:
		return q.Query(ctx, sqlMessagesAfter, roomID, *req.MessagesAfter, req.MessagesLimit, rc.snap.seq)
	}
	return q.Query(ctx, sqlMessagesRecent, roomID, req.MessagesLimit, rc.snap.seq)
}

// scanMsgRows reads a messages statement's rows, and closes them before
// it returns (the next statement may run on the same connection).
func scanMsgRows(rows pgx.Rows, err error) ([]msgRow, error) {
	if err != nil {
		return nil, err
	}
	var read []msgRow
	for rows.Next() {
		var r msgRow
		if err := rows.Scan(&r.seq, &r.raw, &r.writer, &r.via, &r.enabled); err != nil {
			rows.Close()
			return nil, err
		}
		read = append(read, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return read, nil
}

// directedAhead puts the messages to the reader first, whatever the
// backlog: a read of the newest (or a delta) that marks older messages
// read must not pass over one addressed to it unshown. Those it has not
// read are added ahead of the page (they are older than it), oldest
// first; if there are more than a page holds, the read stops short of the
// first left out (upTo, -1 for no cap), which the next read shows. A page
// read in order (messages_after) reaches them in turn.
func directedAhead(ctx context.Context, q querier, rc *roomCtx, roomID string, req ContextRequest, read []msgRow) (_ []msgRow, upTo int64, _ error) {
	upTo = -1
	in := make(map[int64]bool, len(read))
	for _, r := range read {
		in[r.seq] = true
	}
	directed, err := scanMsgRows(q.Query(ctx, sqlDirectedUnread, roomID, rc.self, rc.msgs.seen, rc.snap.seq, req.MessagesLimit+1))
	if err != nil {
		return nil, 0, err
	}
	if len(directed) > req.MessagesLimit {
		if next := directed[req.MessagesLimit].seq; !in[next] {
			upTo = next - 1
		}
		directed = directed[:req.MessagesLimit]
	}
	var ahead []msgRow
	for _, r := range directed {
		if !in[r.seq] {
			ahead = append(ahead, r)
		}
	}
	return append(ahead, read...), upTo, nil
}

// shownMessage is a message as the reader is shown it.
func (rc *roomCtx) shownMessage(r msgRow) map[string]any {
	m := map[string]any{}
	if json.Unmarshal(r.raw, &m) != nil {
		m = map[string]any{"body": r.raw}
	}
	// The sender is who the system recorded as the writer, never a "from"
	// inside the value (an action can put anything there); a message an
	// action wrote says which action in via.
	m["from"] = r.writer
	delete(m, "via")
	if r.via != nil && strings.HasPrefix(*r.via, "action:") {
		m["via"] = *r.via
	}
	sayInvocationOnce(m)
	m["seq"] = r.seq
	if m["ack"] == true {
		if rcpt := rc.receiptsOf(r.seq); rcpt != nil {
			m["receipts"] = rcpt
		}
	}
	return m
}

// actionsSection lists enabled actions with availability, plus builtins.
func (s *Service) actionsSection(ctx context.Context, q querier, rc *roomCtx, roomID, depth string) (map[string]ActionView, error) {
	out := map[string]ActionView{}
	readOnly := rc.p != nil && rc.p.ReadOnly()
	var counts map[string]int
	if depth == "usage" {
		var err error
		if counts, err = invocationCounts(ctx, q, roomID); err != nil {
			return nil, err
		}
	}
	ids := make([]string, 0, len(rc.actEnabled))
	for id, on := range rc.actEnabled {
		if on {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		def := rc.snap.actions[id].def
		// Read-only callers (the view token, observers) can invoke nothing.
		a := ActionView{Signature: signature(id, def.Params), Available: rc.actAvail[id] && !readOnly, Description: def.Description}
		if cd := s.cooldownOf(rc.snap, id, rc.now); cd != nil {
			a.Cooldown = cd.describeCooldown(rc.now)
		}
		if depth != "lean" {
			enabled := true
			a.Params, a.Writes, a.If, a.Enabled = def.Params, def.Writes, def.If, &enabled
			a.Scope, a.RegisteredBy, a.Intent, a.Result = def.Scope, def.RegisteredBy, def.Intent, def.Result
		}
		if counts != nil {
			n := counts[id]
			a.InvocationCount = &n
		}
		out[id] = a
	}
	canAct := !readOnly
	if depth == "lean" {
		return out, nil // builtins are one line: Envelope.Builtins
	}
	for id, desc := range builtinDescriptions {
		if _, overridden := out[id]; overridden {
			continue
		}
		b := ActionView{Available: canAct || id == "help", Builtin: true, Description: desc}
		if depth != "lean" {
			b.Params = builtinParams[id]
		}
		out[id] = b
	}
	return out, nil
}

// invocationCounts counts successful invocations per action over the last
// 500 audit entries (bounded, whatever the room's history).
func invocationCounts(ctx context.Context, q querier, roomID string) (map[string]int, error) {
	rows, err := q.Query(ctx, sqlInvocationCounts, roomID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id *string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		if id != nil {
			out[*id]++
		}
	}
	return out, rows.Err()
}

// builtinsLine is the builtins at the lean depth, in one line.
const builtinsLine = "_send_message {body, to?, kind?}; _register_action {id, writes, params?, if?…}; _register_view {id, expr, scope?}; _delete_action {id}; _delete_view {id}; help {key?}"

// signature renders an action's call in brief, params sorted, required
// ones marked *: move(cell*: integer 0…8, note: string).
func signature(id string, params map[string]ParamSpec) string {
	names := make([]string, 0, len(params))
	for n := range params {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		p := params[n]
		t := p.Type
		if t == "" {
			t = "any"
		}
		mark := ""
		if p.Required {
			mark = "*"
		}
		part := n + mark + ": " + t
		if len(p.Enum) > 0 {
			vals := make([]string, 0, len(p.Enum))
			for _, v := range p.Enum {
				raw, _ := json.Marshal(v)
				vals = append(vals, string(raw))
			}
			if len(vals) > 6 {
				vals = append(vals[:2], "…", vals[len(vals)-1])
			}
			part += " " + strings.Join(vals, "|")
		}
		parts[i] = part
	}
	return id + "(" + strings.Join(parts, ", ") + ")"
}
