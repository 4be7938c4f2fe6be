// The context read and its envelope: what a context contains, assembled
// from the reader's context (readpath.go) section by section (state,
// views, agents, actions, messages), then cut to the read's budget.

package substrate

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// Context is the envelope of GET /rooms/:id/context (ARCHITECTURE §7):
// everything the caller perceives, shaped for a language model.
func (s *Service) Context(ctx context.Context, p *Principal, roomID string, q ContextRequest) (*Envelope, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	// Admitted here, not only in readCtx: the envelope's own evaluations
	// (the gates of the messages it shows and of the unread ones it takes
	// out of the counts) are charged to the room too.
	ctx, done, err := s.work(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	defer done()
	rc, err := s.readCtx(ctx, p, roomID, !q.NoMessages)
	if err != nil {
		return nil, err
	}
	return s.envelopeOf(ctx, rc, roomID, q)
}

// envelopeOf assembles the envelope of a context read: the unread counts
// first when the read did not take them and the envelope shows messages,
// then the sections, whose own statements (messages, logs, usage) run one
// at a time on pooled connections and stop at the read's seq, so they
// agree with its state. Messages it returns to an agent are then marked
// read.
func (s *Service) envelopeOf(ctx context.Context, rc *roomCtx, roomID string, req ContextRequest) (*Envelope, error) {
	if !rc.counted && !req.NoMessages {
		if err := s.countUnread(ctx, rc, roomID); err != nil {
			return nil, err
		}
	}
	sl, err := s.salienceFor(ctx, rc, roomID)
	if err != nil {
		return nil, err
	}
	note, shown := deltaRequest(rc, &req)
	if sl != nil && sl.FirstReadFull() && req.Depth == "lean" && req.Since == nil && !req.Peek && note == "" {
		req.Depth = "full"
		note = "your first read of this room is at depth full, once, so you see the whole vocabulary; later reads are lean unless you ask"
	}
	env, err := s.envelope(ctx, s.db, rc, roomID, req)
	if err != nil {
		return nil, err
	}
	env.Context.Note = note
	if sl != nil {
		sl.Annotate(ctx, env, req)
	}
	if od := rc.overdueAcks(roomID, s.ackOverdue); len(od) > 0 {
		if env.Context.Attention == nil {
			env.Context.Attention = &Attention{}
		}
		env.Context.Attention.OverdueAcks = od
	}
	if req.Since != nil {
		unseen, err := s.unseenAt(ctx, rc.snap, *req.Since)
		if err != nil {
			return nil, err
		}
		deltaOf(env, rc, roomID, *req.Since, *req.MessagesAfter, shown, unseen)
		env.Context.Request.MessagesLimit = shown
	}
	if req.MaxBytes > 0 {
		fitBudget(env, rc, roomID, req)
		youElided(env, sl)
	}
	if rc.self != "" && !req.Peek {
		err = s.markRead(ctx, roomID, rc)
	}
	return env, err
}

// countUnread takes the reader's unread counts for an envelope that shows
// messages when the read did not take them.
func (s *Service) countUnread(ctx context.Context, rc *roomCtx, roomID string) error {
	mc, err := countMessages(ctx, s.db, roomID, rc.p, rc.agents, rc.msgs.Count, rc.snap.seq)
	if err != nil {
		return err
	}
	// The hidden messages were taken out of the count when the context
	// was built: which they are, and when a timer next changes them, stay
	// the read's.
	mc.unseen, mc.next = rc.msgs.unseen, rc.msgs.next
	rc.msgs, rc.counted = mc, true
	s.hideGated(ctx, rc)
	return nil
}

// deltaRequest shapes a read since a seq: the whole context, with a note
// that says so, when most of what the reader sees changed since; else a
// delta, which reads the messages since (up to the most a read returns)
// to show the newest of them. shown is the number of messages the read
// shows.
func deltaRequest(rc *roomCtx, req *ContextRequest) (note string, shown int) {
	if req.Since != nil && mostlyChanged(rc, *req.Since) {
		note = fmt.Sprintf("most of what you see changed since seq %d: this is the whole context, not a delta", *req.Since)
		req.Since = nil
	}
	shown = req.MessagesLimit
	if req.Since != nil {
		if req.MessagesAfter == nil {
			req.MessagesAfter = req.Since
		}
		// A delta shows the newest of the messages since (deltaOf), so it
		// reads them all, up to the most a read returns.
		req.MessagesLimit = 500
	}
	return note, shown
}

// youElided adds to the envelope's attention the sections salience says
// the reader should see that the budget cut (sections and scopes, not
// single keys).
func youElided(env *Envelope, sl SalienceRead) {
	at := env.Context.Attention
	if at == nil || env.Context.Budget == nil || at.SinceYourLastRead == nil {
		return
	}
	var cut []string
	for _, c := range env.Context.Budget.Cuts {
		if strings.Count(c.Section, ".") <= 1 {
			cut = append(cut, c.Section)
		}
	}
	for _, sec := range sl.YouElided(at.SinceYourLastRead, cut) {
		if !slices.Contains(at.YouElided, sec) {
			at.YouElided = append(at.YouElided, sec)
		}
	}
}

// envelope assembles the context: this is the one place the envelope is
// put together (adaptive salience, seed 000, annotates it afterwards in
// envelopeOf).
func (s *Service) envelope(ctx context.Context, q querier, rc *roomCtx, roomID string, req ContextRequest) (*Envelope, error) {
	env := &Envelope{Self: rc.self, Params: rc.vars.Params}
	if len(req.Only) == 0 && !req.Paged() && req.MessagesAfter == nil && req.Thread == 0 {
		// A whole read says what the room is for; its pages need not.
		env.About = rc.snap.about
	}
	if env.Params == nil {
		env.Params = map[string]any{}
	}
	meta := &env.Context
	meta.Depth = req.Depth
	var present, elided, expand, help []string
	section := func(name string, shown bool) {
		if shown {
			present = append(present, name)
		} else {
			elided = append(elided, name)
		}
	}

	if req.Wants("state") {
		if err := s.stateSection(ctx, q, rc, roomID, req, env); err != nil {
			return nil, err
		}
	}
	section("state", req.Wants("state"))
	if req.Wants("views") {
		env.Views = viewsSection(rc, req)
	}
	section("views", req.Wants("views"))
	if req.Wants("agents") {
		env.Agents = rc.vars.Agents
		if env.Agents == nil {
			env.Agents = map[string]any{}
		}
	}
	section("agents", req.Wants("agents"))
	custom := len(rc.snap.actions)
	withActions := req.Wants("actions") && !req.NoActions
	if withActions {
		var err error
		if custom, err = s.actionsInto(ctx, q, rc, roomID, req, env); err != nil {
			return nil, err
		}
	}
	section("actions", withActions)
	withMessages := req.Wants("messages") && !req.NoMessages
	if withMessages {
		msgs, truncated, err := s.messagesSection(ctx, q, rc, roomID, req)
		if err != nil {
			return nil, err
		}
		env.Messages = msgs
		if truncated {
			help = append(help, "context_shaping")
			meta.MessagesTruncated = msgs.Elided
		}
	}
	section("messages", withMessages)
	help = append(help, envelopeHelp(rc, custom)...)
	meta.Sections = present
	if len(elided) > 0 {
		meta.Elided = elided
		// What was left out, read on its own.
		expand = append(expand, rc.p.Say(errs.Step{Op: errs.OpReadContext, Room: roomID,
			Args: map[string]any{"only": strings.Join(elided, ",")}}))
	}
	meta.Expand, meta.Help = expand, help
	meta.Request = req.Echo()
	meta.Seq = rc.snap.seq
	meta.EntriesUnevaluated = rc.gatesHidden
	return env, nil
}

// stateSection fills the envelope's state: the scopes the reader's
// context shows that the request names (its key range applied, a scope
// the snapshot holds as it is shown passed as its stored JSON), the log
// scopes it includes, and on a read of single scopes their versions.
func (s *Service) stateSection(ctx context.Context, q querier, rc *roomCtx, roomID string, req ContextRequest, env *Envelope) error {
	st := map[string]any{}
	live := rc.snap.live(rc.now)
	raw := live.raw
	for scope, v := range rc.state {
		if rc.self != "" && scope == rc.self {
			continue // shown as self
		}
		if len(req.Only) > 0 && !slices.Contains(req.Only, "state") && !slices.Contains(req.Only, "state."+scope) {
			continue
		}
		// The stored JSON, when the scope is the shared one: encoding it
		// is far cheaper than re-encoding decoded values.
		name := scope
		if scope == ScopeSelf {
			name = rc.self
		}
		if r, ok := raw[name]; ok && !rc.modified[name] {
			st[scope] = r
			if req.KeysAfter == "" && req.Prefix == "" {
				env.Share(scope, name, r, live)
			}
		} else {
			st[scope] = v
		}
		if req.KeysAfter != "" || req.Prefix != "" {
			st[scope] = req.KeyRange(st[scope])
		}
	}
	for _, inc := range req.Include {
		if !rc.visible(inc) {
			continue
		}
		logs, err := s.loadLog(ctx, q, rc, roomID, inc, req.MessagesLimit, rc.snap.seq)
		if err != nil {
			return err
		}
		st[inc] = logs
	}
	env.State = st
	setVersions(env, rc, req)
	return nil
}

// viewsSection is the views the reader's context evaluated, narrowed to
// those the request names when it names views.<id> (and not views).
func viewsSection(rc *roomCtx, req ContextRequest) map[string]any {
	var ids []string
	for _, o := range req.Only {
		if id, ok := strings.CutPrefix(o, "views."); ok {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 || slices.Contains(req.Only, "views") {
		return rc.views
	}
	out := map[string]any{}
	for _, id := range ids {
		if v, ok := rc.views[id]; ok {
			out[id] = v
		}
	}
	return out
}

// actionsInto fills the envelope's actions (and, at the lean depth, the
// line of builtins) and counts the room's own actions the reader is shown.
func (s *Service) actionsInto(ctx context.Context, q querier, rc *roomCtx, roomID string, req ContextRequest, env *Envelope) (custom int, _ error) {
	acts, err := s.actionsSection(ctx, q, rc, roomID, req.Depth)
	if err != nil {
		return 0, err
	}
	for id := range acts {
		if _, builtin := builtinDescriptions[id]; !builtin {
			custom++
		}
	}
	env.Actions = acts
	if req.Depth == "lean" {
		env.Builtins = builtinsLine
		if rc.p != nil && rc.p.ReadOnly() {
			env.Builtins = "help {key?} (read-only: no other action)"
		}
	}
	return custom, nil
}

// envelopeHelp are the help keys the room's state calls for: how to
// begin a vocabulary (no action of the room's own), what a directed
// message asks, how contested actions are settled.
func envelopeHelp(rc *roomCtx, custom int) []string {
	var help []string
	if custom == 0 {
		help = append(help, "vocabulary_bootstrap")
	}
	if rc.msgs.Directed > 0 {
		help = append(help, "directed_messages")
	}
	if _, ok := rc.views[viewContested]; ok {
		help = append(help, "contested_actions")
	}
	return help
}

// deltaWholeAt is the share of the entries a reader sees that, changed
// since a delta's start, make it answer with the whole context instead:
// the delta would repeat nearly the whole room, and its list of changed
// keys made it larger than the room (the 500-key room with every key
// changed since the reader's last read: 52,136 bytes as a delta, 43,404
// whole). Rooms with fewer entries than deltaWholeMin always get deltas.
const (
	deltaWholeAt  = 0.8
	deltaWholeMin = 20
)

// mostlyChanged reports whether at least deltaWholeAt of the state
// entries rc shows its reader changed after from.
func mostlyChanged(rc *roomCtx, from int64) bool {
	total, changed := 0, 0
	count := func(scope, key string) {
		total++
		if r := rc.snap.scopes[scope][key]; r != nil && r.Revision > from {
			changed++
		}
	}
	for scope, v := range rc.state {
		switch m := v.(type) {
		case map[string]any:
			for k := range m {
				count(scope, k)
			}
		case map[string]json.RawMessage:
			for k := range m {
				count(scope, k)
			}
		}
	}
	return total >= deltaWholeMin && float64(changed) >= deltaWholeAt*float64(total)
}

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
				Expand: rc.p.Say(errs.Step{Op: errs.OpReadContext, Room: roomID,
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
			Expand: rc.p.Say(errs.Step{Op: errs.OpReadContext, Room: roomID, Args: args})}
	}
	if req.MessagesAfter != nil && read == req.MessagesLimit && req.Since == nil {
		// A full page: the next one starts right after its last message.
		elided = &MessagesElided{Total: rc.msgs.Count, Returned: returned, OldestSeq: minSeq,
			Expand: rc.p.Say(errs.Step{Op: errs.OpReadContext, Room: roomID,
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
