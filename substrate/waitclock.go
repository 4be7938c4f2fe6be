package substrate

// A wait whose outcome depends on now: the condition, or a view, action,
// entry, agent or message gate that what it reads depends on, compares
// now with a moment. No write and no timer marks that moment, so the
// wait's read carries an expr.Clock: each evaluation of an expression
// reading now tells it when now next changes a comparison (solved from
// the expression), and the wait sleeps until then. A use of now whose
// changes cannot be foreseen makes the wait re-check on a cadence
// (WaitOptions.NowRecheck), aligned on the wall clock so the waits of a
// room re-read together and share their round trips.

import (
	"context"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate/expr"
)

// clockFor is ctx for evaluating part (messages, agents, actions, views,
// state.<scope>) of a read: without the read's clock when its reader's
// outcome does not depend on that part, whose changes then must not wake
// it.
func clockFor(ctx context.Context, part string) context.Context {
	if c := expr.ClockOf(ctx); c != nil && c.Reads != nil && !c.Reads(part) {
		return expr.WithClock(ctx, nil)
	}
	return ctx
}

// reads reports whether the wait's outcome depends on part of a read:
// directly, or through views and action availability, which may read
// each other, messages, agents and any scope. "state.<scope>" is a scope's
// gated entries: read by name (state.self as the agent's own), whole or
// by a computed name.
func (w *waiter) reads(part string) bool {
	p := w.prog
	indirect := p.Uses("views") || p.Uses("actions")
	if scope, ok := strings.CutPrefix(part, "state."); ok {
		f := factsOf(w.condition)
		if indirect || f.wholeState {
			return true
		}
		for _, sc := range f.scopes {
			if sc == scope || sc == ScopeSelf && w.p.Kind == KindAgent && scope == w.p.AgentID {
				return true
			}
		}
		return false
	}
	switch part {
	case "messages":
		return p.UsesMessages || indirect
	case "agents":
		return p.Uses("agents") || indirect
	}
	return indirect // views, actions
}

// clockMargin is how long after a foreseen moment the wait reads again:
// `now > t` holds only once t has passed.
const clockMargin = time.Millisecond

// nowNext is when a read at now must be made again for what the clock
// saw (zero: not for it): a moment foreseen, or the next step of the
// cadence when some use of now could not be foreseen.
func (s *Service) nowNext(now time.Time, clk *expr.Clock) time.Time {
	next, opaque := clk.Next()
	if !next.IsZero() {
		next = next.Add(clockMargin)
	}
	if opaque {
		step := s.wait.NowRecheck
		if t := now.Truncate(step).Add(step); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}
