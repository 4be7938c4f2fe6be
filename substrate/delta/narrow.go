package delta

import (
	"time"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// A delta is a context of changes: what a reader who has read the room up
// to FromSeq has not seen yet. A wait's wake-up answers with one by
// default, so that waiting in a loop costs what changed, not the room
// again each time (a room of 500 tasks is ~10,000 tokens whole, and a
// change to one task ~200).

// Reader is who a delta is for: its agent id ("" for tokens and
// observers), the moment its read was made, and how to word a read for
// it (Principal.Say).
type Reader struct {
	Self string
	Now  time.Time
	Say  func(errs.Step) string
}

// Ask is a delta asked of a room: the changes after From, the messages
// after MessagesAfter (limit of them), with Unseen as the core read it
// from the audit log (nil: not known).
type Ask struct {
	Room          string
	From          int64
	MessagesAfter int64
	Limit         int
	Unseen        *Unseen
}

// Narrow narrows env, the whole context rd read of room, to what changed
// after ask.From: state entries written since (and those that may have
// become visible unwritten), the messages after ask.MessagesAfter (the
// read asked for those), the views whose value or gate may have changed
// and the actions (re)defined or possibly enabled since. Agents are left
// out (their presence is in _attention and a full read); _attention stays
// whole. readUpTo is the newest message the read counts as read, which
// Narrow returns, lowered when it leaves out a message addressed to the
// reader.
func Narrow[A any](env *envelope.Envelope[A], room Room, rd Reader, ask Ask, readUpTo int64) int64 {
	d := &envelope.ChangesSince{FromSeq: ask.From, Changed: map[string]int64{}}
	q := newSince(room, rd.Self, rd.Now, ask.From, ask.Unseen)
	narrowState(env, q, d)
	narrowDefs(env, q)
	env.Builtins = ""
	env.Agents = nil
	env.Params = nil
	if m := env.Messages; m != nil {
		readUpTo = narrowMessages(m, rd, d, ask, readUpTo)
	}
	env.Context.MessagesTruncated = nil
	env.About = nil // a delta is what changed; the room's purpose did not
	env.Context.Help = nil
	d.Full = rd.Say(errs.Step{Op: errs.OpReadContext, Room: ask.Room})
	env.Context.Delta = d
	var secs []string
	for _, s := range env.Context.Sections {
		if s != "agents" {
			secs = append(secs, s)
		}
	}
	env.Context.Sections = secs
	env.Context.Expand = nil
	env.Context.Elided = nil
	return readUpTo
}

// narrowState keeps of env's state the entries that are news
// (since.changed), listing each in d.Changed.
func narrowState[A any](env *envelope.Envelope[A], q *since, d *envelope.ChangesSince) {
	for scope, v := range env.State {
		name := scope
		if scope == defs.ScopeSelf {
			name = q.self
		}
		entries, ok := envelope.ScopeEntries(v)
		if !ok {
			delete(env.State, scope)
			continue
		}
		for k := range entries {
			rev, ok := q.changed(name, k)
			if !ok {
				delete(entries, k)
				continue
			}
			d.Changed[scope+"."+k] = rev
		}
		if len(entries) == 0 {
			delete(env.State, scope)
			continue
		}
		env.State[scope] = entries
	}
}

// narrowDefs keeps of env's views and actions those whose value, gate or
// availability may have changed after from.
func narrowDefs[A any](env *envelope.Envelope[A], q *since) {
	acts := q.actionsChanged()
	changed := q.viewsChanged(acts)
	for id := range env.Views {
		if !changed[id] {
			delete(env.Views, id)
		}
	}
	for id := range env.Actions {
		if a, ok := q.room.Action(id); !ok || !acts.ids[id] && !readsView(a.Def.Enabled, changed) && !q.availabilityMayHaveChanged(a, acts, changed) {
			delete(env.Actions, id)
		}
	}
	if len(env.Actions) == 0 {
		env.Actions = nil
	}
	if len(env.Views) == 0 {
		env.Views = nil
	}
}

// narrowMessages narrows m to the news: the reader's own messages are not
// news; of the others, those addressed to it (oldest first: they are a
// queue, and each wake-up moves on through it) and then the newest, limit
// in all. The delta counts the older ones and says how to read them.
func narrowMessages(m *envelope.Messages, rd Reader, d *envelope.ChangesSince, ask Ask, readUpTo int64) int64 {
	m.Elided = nil
	var others []map[string]any
	for _, msg := range m.Recent {
		if rd.Self == "" || msg["from"] != rd.Self {
			others = append(others, msg)
		}
	}
	if len(others) > ask.Limit {
		keep := envelope.KeptMessages(others, rd.Self, ask.Limit)
		var kept []map[string]any
		for i, msg := range others {
			if keep[i] {
				kept = append(kept, msg)
			}
		}
		d.OlderMessages = len(others) - len(kept)
		d.More = rd.Say(errs.Step{Op: errs.OpReadContext, Room: ask.Room, Args: map[string]any{"only": "messages", "messages_after": ask.MessagesAfter}})
		// What the delta read counts as read (the older messages it
		// left out are counted here, with the read that returns them),
		// except from the oldest message addressed to the reader that
		// it left out: that one stays unread, and the next wake-up
		// shows it. Marking nothing read instead left directed_unread
		// as it was, so a wait on it woke again at once, forever.
		for i, msg := range others {
			if !keep[i] && envelope.AddressedTo(msg, rd.Self) {
				seq, _ := msg["seq"].(int64)
				readUpTo = min(readUpTo, seq-1)
				break
			}
		}
		others = kept
	}
	// Messages to the reader come first in a wake-up: they are what
	// it waited for, whatever else arrived.
	ordered := make([]map[string]any, 0, len(others))
	for _, to := range []bool{true, false} {
		for _, msg := range others {
			if envelope.AddressedTo(msg, rd.Self) == to {
				ordered = append(ordered, msg)
			}
		}
	}
	m.Recent = ordered
	return readUpTo
}
