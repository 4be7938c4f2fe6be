// What an invocation says when it is refused or explained: the audit of a
// refusal, the values an explanation may show the invoker, the actions it
// could have meant.

package substrate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
)

// invocable is the definition of the action id if it may be invoked at
// now, or the refusal that says why not: no such action, dormant or
// expired by its timer, cooling down.
func (s *Service) invocable(snap *snapshot, id string, now time.Time) (*ActionDef, error) {
	a := snap.actions[id]
	if a == nil {
		return nil, errs.New(errs.ActionNotFound, "no action %q in this room", id)
	}
	if !a.r.timer.live(now) {
		if a.r.timer != nil && *a.r.timer.Effect == "enable" {
			return nil, errs.New(errs.ActionCooldown, "action %q is dormant until its timer runs out", id).
				With("timer", a.r.timer.describe(now)).WithHint("wait until then, or wait on actions.%s.available", id)
		}
		return nil, errs.New(errs.ActionNotFound, "action %q has expired", id).WithHint("register it again if it is still needed")
	}
	if cd := s.cooldownOf(snap, id, now); cd != nil {
		return nil, errs.New(errs.ActionCooldown, "action %q is cooling down", id).With("cooldown", cd.describeCooldown(now)).
			WithHint("try again after the cooldown, or wait with condition actions[%q].available", id)
	}
	return a.def, nil
}

// preconditionFailed is the refusal of an invocation whose if is false:
// the clause that failed, the values it read that the invoker may read
// itself, and the eval step that tries the clause with other values.
func (s *Service) preconditionFailed(ctx context.Context, rc *roomCtx, roomID, id string, def *ActionDef, params map[string]any, vars *expr.Vars) error {
	e := errs.New(errs.PreconditionFailed, "the precondition of %q does not hold", id).
		WithHint("change what the failing clause reads (another parameter value, or the state it reads), or wait until it holds; test it first")
	prog, err := s.cel.Compile(def.If)
	if err != nil {
		return e
	}
	ex := s.cel.Explain(ctx, prog, vars)
	if ex == nil {
		return e
	}
	e.Message = fmt.Sprintf("the precondition of %q does not hold: %s is false", id, ex.Clause)
	e = e.With("clause", ex.Clause).With("read", s.invokerMayRead(ctx, rc, ex.Read, vars))
	// The clause can be tried with other values, as the invocation binds
	// them.
	args := map[string]any{"expr": ex.Clause}
	if len(params) > 0 {
		args["params"] = params
	}
	return e.WithNext(errs.Step{Op: errs.OpEval, Room: roomID, Args: args})
}

// actionMayWrite applies the registrar's authority: communal scopes, the
// action's own scope, and the invoker's own scope.
func actionMayWrite(def *ActionDef, invoker, target string) error {
	if isSystemScope(target) {
		return errs.New(errs.ScopeDenied, "scope %q is written only by the system", target).WithHint("write to _shared or an agent scope")
	}
	if strings.HasPrefix(target, "_") || target == def.Scope || (invoker != "" && target == invoker) {
		return nil
	}
	return errs.New(errs.ScopeDenied, "action %q (scope %s) cannot write agent %q's scope", def.ID, def.Scope, target).
		With("scope", target).
		WithHint("an action writes communal scopes, its registrar's scope (%s) and the invoker's own scope (${self})", def.Scope)
}

// auditFailure records a refused invocation in _audit, in its own small
// mutation: the invocation itself changed nothing.
func (s *Service) auditFailure(ctx context.Context, p *Principal, roomID, id string, params map[string]any, cause error) {
	e, ok := cause.(*errs.Error)
	if !ok || e.Code == errs.RoomNotFound || e.Code == errs.Unauthorized {
		return
	}
	_, err := s.mutate(context.WithoutCancel(ctx), p, roomID, func(m *mutation) error {
		m.audit = map[string]any{"kind": "invoke", "action": id, "agent": m.actor, "params": s.auditParams(params), "ok": false,
			"error": string(e.Code), "message": e.Message}
		return nil
	})
	if err != nil {
		s.log.Warn("could not audit a failed invocation", "room", roomID, "action", id, "err", err)
	}
}

// invokerMayRead keeps the values an explanation read that the invoker
// could read itself. The if ran with its registrar's authority, which may
// include the registrar's private scope, a loom the invoker is denied or
// entries whose gate admits the registrar only: saying that the clause is
// false is the action's to say; showing the values it compared is not.
//
// Rather than tell from a path's spelling which scope and key it reads
// (state[params.s] or state["_lo" + "om"] defeat that), each path is read
// again on the invoker's own state, built by the one read rule (the
// core's scopes, the features' rules, entry gates), and a value is shown
// only when the invoker reads the same.
func (s *Service) invokerMayRead(ctx context.Context, rc *roomCtx, read map[string]any, vars *expr.Vars) map[string]any {
	if rc.p == nil {
		return read
	}
	paths := make([]string, 0, len(read))
	for path := range read {
		paths = append(paths, path)
	}
	mine := *vars
	mine.State = rc.readableState()
	again := s.cel.ReadAgain(ctx, paths, &mine)
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

// suggestActions completes an action_not_found error, outside the room
// lock, with what the caller could invoke instead: the actions available
// to it (those it may see: enabled for it) and the nearest id to the one it
// asked for, as a misspelling usually is.
func (s *Service) suggestActions(ctx context.Context, p *Principal, roomID, asked string, notFound error) error {
	e := errs.From(notFound)
	rc, err := s.readCtx(ctx, p, roomID, false)
	if err != nil {
		return notFound
	}
	var avail, seen []string
	for id := range rc.snap.actions {
		if rc.actEnabled[id] {
			seen = append(seen, id)
			if rc.actAvail[id] {
				avail = append(avail, id)
			}
		}
	}
	for id := range builtinDescriptions {
		seen = append(seen, id)
	}
	sort.Strings(avail)
	const listed = 50 // the list is for a reader, not an index
	if len(avail) > listed {
		avail = avail[:listed]
	}
	out := &errs.Error{Code: e.Code, Message: e.Message, Details: map[string]any{"available": avail}}
	if near := nearest(asked, seen); near != "" {
		out.Details["did_you_mean"] = near
		out.Hint = fmt.Sprintf("did you mean %q? Otherwise pick one of the available actions, or register one", near)
		return out.WithNext(errs.Step{Op: errs.OpInvoke, Room: roomID, Args: map[string]any{"action": near}})
	}
	out.Hint = "pick one of the available actions (their parameters are in the context), or register the one you need"
	return out.WithNext(errs.Step{Op: errs.OpReadContext, Room: roomID, Args: map[string]any{"only": "actions", "depth": "full"}})
}

// nearest is the id in ids closest to asked by edit distance, if it is
// close enough to be a slip (at most a third of its length, at least 2),
// or "" when none is.
func nearest(asked string, ids []string) string {
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
