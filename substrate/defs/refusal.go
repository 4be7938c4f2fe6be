package defs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// What an invocation is told when the action it names cannot run: the
// refusals' texts and the next step each offers. Which one applies is
// decided by the core, from the room (its snapshot, timers, cooldowns,
// the action's enabled and if as the invoker sees them).

// NoAction refuses an invocation of an action the room does not have.
func NoAction(id string) *errs.Error {
	return errs.New(errs.ActionNotFound, "no action %q in this room", id)
}

// Dormant refuses an action whose enable timer (timer, as shown) has not
// run out.
func Dormant(id string, timer map[string]any) *errs.Error {
	return errs.New(errs.ActionCooldown, "action %q is dormant until its timer runs out", id).
		With("timer", timer).WithHint("wait until then, or wait on actions.%s.available", id)
}

// Expired refuses an action its timer deleted.
func Expired(id string) *errs.Error {
	return errs.New(errs.ActionNotFound, "action %q has expired", id).WithHint("register it again if it is still needed")
}

// CoolingDown refuses an action resting after an invocation (cooldown,
// as shown).
func CoolingDown(id string, cooldown map[string]any) *errs.Error {
	return errs.New(errs.ActionCooldown, "action %q is cooling down", id).With("cooldown", cooldown).
		WithHint("try again after the cooldown, or wait with condition actions[%q].available", id)
}

// Disabled refuses an action whose enabled expression is false for the
// invoker, in roomID.
func Disabled(id, enabled, roomID string) *errs.Error {
	return errs.New(errs.ActionDisabled, "action %q is disabled: its enabled expression is false", id).
		With("enabled", enabled).WithHint("it cannot be invoked while its enabled expression (%s) is false: pick an available action, or wait until it holds", enabled).
		WithNext(errs.Step{Op: errs.OpReadContext, Room: roomID, Args: map[string]any{"only": "actions"}})
}

// PreconditionFailed refuses an invocation whose if is false; clause is
// the clause that failed, "" when it cannot be told.
func PreconditionFailed(id, clause string) *errs.Error {
	e := errs.New(errs.PreconditionFailed, "the precondition of %q does not hold", id).
		WithHint("change what the failing clause reads (another parameter value, or the state it reads), or wait until it holds; test it first")
	if clause != "" {
		e.Message = fmt.Sprintf("the precondition of %q does not hold: %s is false", id, clause)
	}
	return e
}

// Suggest completes notFound (an action_not_found refusal of asked, in
// roomID) with what the caller could invoke instead: avail, the actions
// available to it (the first 50, a list for a reader, not an index), and
// the id nearest to asked among seen (those it may see, builtins
// included), as a misspelling usually is.
func Suggest(notFound error, roomID, asked string, avail, seen []string) error {
	e := errs.From(notFound)
	sort.Strings(avail)
	const listed = 50
	if len(avail) > listed {
		avail = avail[:listed]
	}
	out := &errs.Error{Code: e.Code, Message: e.Message, Details: map[string]any{"available": avail}}
	if near := Nearest(asked, seen); near != "" {
		out.Details["did_you_mean"] = near
		out.Hint = fmt.Sprintf("did you mean %q? Otherwise pick one of the available actions, or register one", near)
		return out.WithNext(errs.Step{Op: errs.OpInvoke, Room: roomID, Args: map[string]any{"action": near}})
	}
	out.Hint = "pick one of the available actions (their parameters are in the context), or register the one you need"
	return out.WithNext(errs.Step{Op: errs.OpReadContext, Room: roomID, Args: map[string]any{"only": "actions", "depth": "full"}})
}

// Nearest is the id in ids (sorted in place) closest to asked by edit
// distance, if it is close enough to be a slip (at most a third of its
// length, at least 2), or "" when none is.
func Nearest(asked string, ids []string) string {
	best, bestD := "", max(2, len([]rune(asked))/3)+1
	sort.Strings(ids)
	for _, id := range ids {
		if d := EditDistance(strings.ToLower(asked), strings.ToLower(id)); d < bestD {
			best, bestD = id, d
		}
	}
	return best
}

// EditDistance is the Levenshtein distance between a and b, in runes:
// how every "did you mean" the server offers ranks its candidates.
func EditDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// ShownOf is what a refusal's explanation may show the invoker of the
// values read (by path), given what the invoker reads again at the same
// paths on its own state: a value only when the invoker reads the same,
// as it would be shown; "<not yours to read>" otherwise.
func ShownOf(read, again map[string]any) map[string]any {
	out := make(map[string]any, len(read))
	for path, v := range read {
		if w, ok := again[path]; ok && sameValue(v, w) {
			out[path] = v
			continue
		}
		out[path] = "<not yours to read>"
	}
	return out
}

// sameValue compares two explained values as they would be shown.
func sameValue(a, b any) bool {
	ra, err1 := json.Marshal(a)
	rb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ra, rb)
}
