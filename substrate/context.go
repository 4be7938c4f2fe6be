// The context read and its envelope: what a context contains, assembled
// from the reader's context (readpath.go) section by section (the
// messages and actions sections are envelopesections.go's), then cut to
// the read's budget.

package substrate

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

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
	if len(req.Only) == 0 && !req.paged() && req.MessagesAfter == nil && req.Thread == 0 {
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

	if req.wants("state") {
		if err := s.stateSection(ctx, q, rc, roomID, req, env); err != nil {
			return nil, err
		}
	}
	section("state", req.wants("state"))
	if req.wants("views") {
		env.Views = viewsSection(rc, req)
	}
	section("views", req.wants("views"))
	if req.wants("agents") {
		env.Agents = rc.vars.Agents
		if env.Agents == nil {
			env.Agents = map[string]any{}
		}
	}
	section("agents", req.wants("agents"))
	custom := len(rc.snap.actions)
	withActions := req.wants("actions") && !req.NoActions
	if withActions {
		var err error
		if custom, err = s.actionsInto(ctx, q, rc, roomID, req, env); err != nil {
			return nil, err
		}
	}
	section("actions", withActions)
	withMessages := req.wants("messages") && !req.NoMessages
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
		expand = append(expand, rc.p.say(errs.Step{Op: errs.OpReadContext, Room: roomID,
			Args: map[string]any{"only": strings.Join(elided, ",")}}))
	}
	meta.Expand, meta.Help = expand, help
	meta.Request = req.echo()
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
				if env.shared == nil {
					env.shared = map[string]sharedScope{}
				}
				env.shared[scope] = sharedScope{live: live, name: name, m: r}
			}
		} else {
			st[scope] = v
		}
		if req.KeysAfter != "" || req.Prefix != "" {
			st[scope] = keyRange(st[scope], req)
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
	env.setVersions(rc, req)
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

// keyRange is a scope's entries narrowed to the request's key range (a
// copy: the snapshot's maps are shared between reads).
func keyRange(v any, req ContextRequest) any {
	switch m := v.(type) {
	case map[string]json.RawMessage:
		out := map[string]json.RawMessage{}
		for k, raw := range m {
			if req.keyWanted(k) {
				out[k] = raw
			}
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, val := range m {
			if req.keyWanted(k) {
				out[k] = val
			}
		}
		return out
	}
	return v
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
