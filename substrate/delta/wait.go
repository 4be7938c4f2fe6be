package delta

import (
	"context"
	"time"

	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/expr"
)

// Timeout is how long a wait asked to wait timeout waits: def when it
// asked none, at most limit; note says so when the cap shortened it.
func Timeout(timeout, def, limit time.Duration) (_ time.Duration, note string) {
	if timeout <= 0 {
		timeout = def
	}
	if timeout > limit {
		note = CappedNote(timeout, limit)
	}
	return min(timeout, limit), note
}

// ReadsWhole reports whether a wait on prog needs the room's whole read
// (presence, views and action availability evaluated) at every wake-up.
// Most conditions read state only ("state._shared.phase == 'done'"):
// with a thousand agents waiting in one room, reading and evaluating a
// thousand agents for each waiter at each wake-up would make one write
// cost a million rows. A condition reading agents, views or actions
// reads presence, directly or through views and actions, which may; so
// only such a wait's presence changes (agents starting and ending waits,
// heartbeats) wake it.
func ReadsWhole(prog *expr.Program) bool {
	return prog.Uses("agents") || prog.Uses("views") || prog.Uses("actions")
}

// TimersMatter reports whether a wait on prog sleeps until a message's
// timer too: the condition reads messages, or views or actions, which may
// (a message's timer changes messages.count and the unread counts).
func TimersMatter(prog *expr.Program) bool {
	return prog.UsesMessages || prog.Uses("views") || prog.Uses("actions")
}

// A wait whose outcome depends on now: the condition, or a view, action,
// entry, agent or message gate that what it reads depends on, compares
// now with a moment. No write and no timer marks that moment, so the
// wait's read carries an expr.Clock: each evaluation of an expression
// reading now tells it when now next changes a comparison (solved from
// the expression), and the wait sleeps until then. A use of now whose
// changes cannot be foreseen makes the wait re-check on a cadence
// (WaitOptions.NowRecheck), aligned on the wall clock so the waits of a
// room re-read together and share their round trips (package waitclock).

// ClockFor is ctx for evaluating part (messages, agents, actions, views,
// state.<scope>) of a read: without the read's clock when its reader's
// outcome does not depend on that part (Reads), whose changes then must
// not wake it.
func ClockFor(ctx context.Context, part string) context.Context {
	if c := expr.ClockOf(ctx); c != nil && c.Reads != nil && !c.Reads(part) {
		return expr.WithClock(ctx, nil)
	}
	return ctx
}

// MarksOf are self's marks among the room's presences (nil: self has
// none, a reader that is not an agent of the room).
func MarksOf(agents []envelope.Presence, self string) *Marks {
	var marks *Marks
	for _, a := range agents {
		if a.ID == self {
			marks = &Marks{ContextReads: a.ContextReads, LastContextSeq: a.LastContextSeq, LastSeenSeq: a.LastSeenSeq}
		}
	}
	return marks
}
