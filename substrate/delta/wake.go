package delta

import (
	"fmt"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
)

// The rule of a wait's wake-up, beside the delta it answers with: what a
// condition's outcome depends on, where the delta starts, and how a wait
// words what it did with the call.

// Marks are a reader's marks in the room (its presence row): how many
// context reads it made and the seq of the last, and the last message it
// was shown.
type Marks struct {
	ContextReads, LastContextSeq, LastSeenSeq int64
}

// WakeRequest is the context a wait answers with: the delta since the
// waiter's last read unless the call asked for the whole context. An
// agent that never read the room gets the changes since its wait began
// (startSeq), the others since the wait's first read. self are the
// reader's marks (nil: a reader without any, a token's).
func WakeRequest(creq envelope.ContextRequest, self *Marks, startSeq int64) envelope.ContextRequest {
	if creq.Full || creq.Since != nil {
		return creq
	}
	since := startSeq
	if self != nil {
		if self.ContextReads > 0 {
			since = self.LastContextSeq
		}
		// Messages: the unread ones, which may be older than the last
		// read (a read that did not show them).
		if creq.MessagesAfter == nil {
			after := min(since, self.LastSeenSeq)
			creq.MessagesAfter = &after
		}
	}
	creq.Since = &since
	return creq
}

// Reads reports whether the outcome of a wait on condition (compiled as
// prog) depends on part of a read (messages, agents, actions, views,
// state.<scope>): directly, or through views and action availability,
// which may read each other, messages, agents and any scope.
// "state.<scope>" is a scope's gated entries: read by name (state.self as
// agent's own; agent is "" for a reader that is not one), whole or by a
// computed name.
func Reads(prog *expr.Program, condition, agent, part string) bool {
	indirect := prog.Uses("views") || prog.Uses("actions")
	if scope, ok := strings.CutPrefix(part, "state."); ok {
		f := defs.FactsOf(condition)
		if indirect || f.WholeState {
			return true
		}
		for _, sc := range f.Scopes {
			if sc == scope || sc == defs.ScopeSelf && agent != "" && scope == agent {
				return true
			}
		}
		return false
	}
	switch part {
	case "messages":
		return prog.UsesMessages || indirect
	case "agents":
		return prog.Uses("agents") || indirect
	}
	return indirect // views, actions
}

// NotBoolean is the refusal of a condition that does not give a boolean.
func NotBoolean(condition, gave string) error {
	return errs.New(errs.InvalidField, "the condition gives %s, and a wait needs true or false", gave).With("field", "condition").With("gave", gave).
		WithHint("compare or test the value, e.g. %s > 0 or %s != null; try it with sync_eval_cel first", condition, condition)
}

// CappedNote is a wait's note when the timeout asked is over the cap.
func CappedNote(asked, limit time.Duration) string {
	return fmt.Sprintf("timeout shortened to the cap of %d ms (asked %d ms): wait again to wait longer", limit.Milliseconds(), asked.Milliseconds())
}
