package substrate

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/write"
)

// InvokeResult is what an invocation returns.
type InvokeResult struct {
	Invoked bool           `json:"invoked"`
	Action  string         `json:"action"`
	Agent   string         `json:"agent"`
	Params  map[string]any `json:"params"`
	Seq     int64          `json:"seq"`
	Writes  []Entry        `json:"writes"`
	Result  any            `json:"result,omitempty"`
	// Builtin carries a builtin's own answer (a registration, help text…).
	Builtin any `json:"builtin_result,omitempty"`

	// written are the entries as the mutation wrote them; their revision
	// is known only once it commits.
	written []*Entry
	// hidden: gated entries the invocation merged into or incremented,
	// whose values the invoker is not answered with (see withheldKeys).
	hidden map[entryKey]bool
}

// WriteRef names what an invocation wrote, without the value (write.Ref).
type WriteRef = write.Ref

// InvokeSummary is an invocation's result with references instead of the
// written values (write.Summary).
type InvokeSummary = write.Summary

// Summary is r with references in place of the written values.
func (r *InvokeResult) Summary() *InvokeSummary {
	return &InvokeSummary{Invoked: r.Invoked, Action: r.Action, Agent: r.Agent, Seq: r.Seq, Result: r.Result, Builtin: r.Builtin, Writes: write.Refs(r.Writes)}
}

// fill copies the written entries into Writes after the commit.
func (r *InvokeResult) fill(seq int64) {
	r.Seq = seq
	for _, e := range r.written {
		c := *e
		if r.hidden[entryKey{c.Scope, c.Key}] && c.Version > 0 {
			c.Value, c.Withheld = nil, true
		}
		r.Writes = append(r.Writes, c)
	}
}

// decodeParams reads an invocation's params object (write.Params).
func (s *Service) decodeParams(raw json.RawMessage) (map[string]any, error) {
	return write.Params(raw, s.writeLimits())
}

// celParams converts params (json.Number numbers) to expression values.
func celParams(params map[string]any) map[string]any {
	raw, _ := expr.MarshalJSON(params)
	m, _ := expr.MustDecode(raw).(map[string]any)
	return m
}

// Invoke runs an action (or a builtin) as p.
func (s *Service) Invoke(ctx context.Context, p *Principal, roomID, actionID string, rawParams json.RawMessage) (_ *InvokeResult, err error) {
	defer func() { s.countInvocation(err) }()
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	params, err := s.decodeParams(rawParams)
	if err != nil {
		if dead := s.deadRemembered(ctx, p); dead != nil {
			return nil, dead
		}
		s.auditFailure(ctx, p, roomID, actionID, map[string]any{"_unreadable": true, "bytes": len(rawParams)}, err)
		return nil, err
	}
	if actionID == "help" {
		if res, handled, err := s.invokeHelp(ctx, p, roomID, params); handled {
			return res, err
		}
	}
	// The builtin help is answered above: a read-only credential may
	// invoke nothing else.
	if err := authority.MayInvoke(p); err != nil {
		s.auditFailure(ctx, p, roomID, actionID, params, err) // the refusal is audited; nothing else is written
		return nil, err
	}
	var done func()
	if ctx, done, err = s.work(ctx, p, roomID); err != nil {
		if dead := s.deadRemembered(ctx, p); dead != nil {
			return nil, dead
		}
		return nil, err
	}
	defer done()
	if _, ok := builtinDescriptions[actionID]; ok && actionID != "help" {
		return s.invokeBuiltin(ctx, p, roomID, actionID, rawParams, params)
	}
	res := &InvokeResult{Invoked: true, Action: actionID, Agent: p.Actor(), Params: params}
	seq, err := s.mutateWith(ctx, p, roomID, mutateOpts{withPresence: true, grouped: true}, func(m *mutation) error {
		// A group transaction may evaluate an invocation again (another
		// one's statement refused before it): nothing of a first
		// evaluation stays in the answer.
		*res = InvokeResult{Invoked: true, Action: actionID, Agent: p.Actor(), Params: params}
		return s.invoke(m, actionID, params, res)
	})
	if err != nil {
		if errs.Is(err, errs.Unauthorized) || errs.Is(err, errs.RoomNotFound) {
			s.forgetToken(p) // found dead under the lock: look it up next time
		}
		s.auditFailure(ctx, p, roomID, actionID, params, err)
		if errs.Is(err, errs.ActionNotFound) {
			err = s.suggestActions(ctx, p, roomID, actionID, err)
			// The suggested call carries the parameters given: the same
			// call with the name corrected.
			if e, ok := err.(*errs.Error); ok && e.Next != nil && e.Next.Op == errs.OpInvoke && len(params) > 0 {
				e.Next.Args["params"] = params
			}
		}
		return nil, err
	}
	res.fill(seq)
	return res, nil
}

func (s *Service) invoke(m *mutation, id string, params map[string]any, res *InvokeResult) error {
	ctx := m.ctx
	snap, err := s.lockedSnapshot(m)
	if err != nil {
		return err
	}
	def, err := s.invocable(snap, id, m.now)
	if err != nil {
		return err
	}
	if err := defs.CheckParams(def, params); err != nil {
		return err
	}
	agents, err := m.presence()
	if err != nil {
		return err
	}
	mc := msgCounts{Count: snap.messageCount}
	if s.needMessages(snap, def) {
		if mc, err = countMessages(ctx, m.tx, m.room, m.p, agents, snap.messageCount, m.base); err != nil {
			return err
		}
	}
	// The parameters as expressions see them, converted once: nothing
	// that evaluates with them changes them.
	cp := celParams(params)
	rc := s.build(ctx, snap, m.p, agents, mc, m.now, cp)
	if rc.actionsCut[id] {
		// Past the read's action budget: this invocation evaluates it.
		rc.actEnabled[id] = def.Enabled == "" || s.evalBool(ctx, def.Enabled, rc.actionVars(ctx, s, def, cp))
	}
	if !rc.actEnabled[id] {
		return defs.Disabled(id, def.Enabled, m.room)
	}
	vars := rc.actionVars(ctx, s, def, cp)
	if def.If != "" && !rc.ifHeld[id] {
		ok, err := s.evalField(ctx, "if", def.If, vars)
		if err != nil {
			return err
		}
		if !ok.(bool) {
			return s.preconditionFailed(ctx, rc, m.room, id, def, params, vars)
		}
	}
	ops, userWrites, err := s.invocationOps(m, rc, vars, id, def, params)
	if err != nil {
		return err
	}
	written, audit, err := s.applyOps(m, ops, "action:"+id)
	if err != nil {
		return err
	}
	res.written = written[:userWrites]
	if !m.p.Admin() {
		res.hidden = withheldKeys(m, ops[:userWrites])
	}
	if def.Result != "" {
		after := s.build(ctx, snap.advance(s, m.pending, snap.seq, snap.messageCount), m.p, agents, mc, m.now, cp)
		res.Result = s.actionResult(ctx, after, def, cp)
	}
	m.audit = map[string]any{"kind": "invoke", "action": id, "agent": m.actor, "params": s.auditParams(params), "ok": true, "writes": audit}
	// Salience: the action was used, and so were the views it read.
	m.vocab = append(m.vocab, vocabTouch{"action", id, true})
	for _, v := range viewsReadBy(def) {
		m.vocab = append(m.vocab, vocabTouch{"view", v, true})
	}
	m.decay = s.decayOf(snap)
	if def.Result != "" {
		m.audit["result"] = capAny(res.Result)
	}
	return nil
}

// invocationOps are the writes an invocation makes: the action's own
// (the first userWrites), the timer its on_invoke sets, and the message
// that says it was invoked.
func (s *Service) invocationOps(m *mutation, rc *roomCtx, vars *expr.Vars, id string, def *ActionDef, params map[string]any) (ops []op, userWrites int, _ error) {
	r := &defs.Renderer{Params: params, Self: rc.self, Now: m.now.UTC().Format(time.RFC3339Nano)}
	ops = make([]op, 0, len(def.Writes)+2)
	for i, w := range def.Writes {
		o, err := s.renderWrite(m.ctx, rc, vars, r, def, w)
		if err != nil {
			if e, ok := err.(*errs.Error); ok {
				return nil, 0, e.With("write", i)
			}
			return nil, 0, err
		}
		ops = append(ops, o)
	}
	userWrites = len(ops)
	if t := def.OnInvoke; t != nil && t.Timer != nil {
		if t.Timer.Effect == "delete" {
			timer := *t.Timer
			raw, _ := json.Marshal(def)
			ops = append(ops, op{Scope: scopeActions, Key: id, Value: raw, Timer: &timer})
		} else {
			timer := *t.Timer
			timer.Effect = "delete" // the cooldown entry lives while the action rests
			v, _ := json.Marshal(map[string]any{"action": id, "by": m.actor})
			ops = append(ops, op{Scope: scopeCooldowns, Key: id, Value: v, Timer: &timer})
		}
	}
	msg, _ := expr.MarshalJSON(map[string]any{"from": m.actor, "kind": "action_invocation", "action": id, "params": s.auditParams(params), "body": defs.CallText(id, params)})
	return append(ops, op{Scope: ScopeMessages, Append: true, Value: msg}), userWrites, nil
}

// actionResult is the action's result expression evaluated on the room
// after its writes (after), or the error it met, as the caller sees it.
func (s *Service) actionResult(ctx context.Context, after *roomCtx, def *ActionDef, cp map[string]any) any {
	v, err := s.evalField(ctx, "result", def.Result, after.actionVars(ctx, s, def, cp))
	switch {
	case err != nil:
		return map[string]any{"_error": errorText(err)}
	case valueDepth(v, s.lim.MaxValueDepth) > s.lim.MaxValueDepth:
		// The audit log keeps the result: held to the depth limit, as a
		// view's value is.
		return map[string]any{"_error": fmt.Sprintf("the result nests arrays and objects more than %d levels deep, the server's limit (invalid_value): return a flatter value", s.lim.MaxValueDepth)}
	}
	return v
}

// needMessages reports whether an invocation evaluates an expression that
// reads messages, so the per-agent unread counts must be computed.
func (s *Service) needMessages(snap *snapshot, def *ActionDef) bool {
	if snap.actionsUseMessages(s) {
		return true
	}
	srcs := []string{def.Result}
	for _, w := range def.Writes {
		srcs = append(srcs, w.ExprSource())
	}
	return s.usesMessages(srcs...)
}

func (s *Service) usesMessages(srcs ...string) bool {
	for _, src := range srcs {
		if src == "" {
			continue
		}
		if p, err := s.cel.Compile(src); err == nil && p.UsesMessages {
			return true
		}
	}
	return false
}

// renderWrite turns one write template into a concrete write, checked
// against the registrar's authority (write.Render).
func (s *Service) renderWrite(ctx context.Context, rc *roomCtx, vars *expr.Vars, r *defs.Renderer, def *ActionDef, w WriteTemplate) (op, error) {
	return write.Render(r, w, rc.self, s.writeLimits(),
		func(scope string) error { return actionMayWrite(def, rc.self, scope) },
		func(src string) (any, error) { return s.evalField(ctx, "writes.value", src, vars) })
}

// auditParams is what an audit entry or invocation message records of
// params, within this server's value limits (defs.AuditParams).
func (s *Service) auditParams(params map[string]any) any {
	return defs.AuditParams(params, s.lim.MaxValueBytes, s.lim.MaxValueDepth)
}

// When an invocation is refused or explained: which refusal applies, its
// audit, the values an explanation may show the invoker, the actions it
// could have meant. The refusals' texts are package defs'
// (defs/refusal.go).

// invocable is the definition of the action id if it may be invoked at
// now, or the refusal that says why not: no such action, dormant or
// expired by its timer, cooling down.
func (s *Service) invocable(snap *snapshot, id string, now time.Time) (*ActionDef, error) {
	a := snap.actions[id]
	if a == nil {
		return nil, defs.NoAction(id)
	}
	if !a.r.timer.live(now) {
		if a.r.timer != nil && *a.r.timer.Effect == "enable" {
			return nil, defs.Dormant(id, a.r.timer.describe(now))
		}
		return nil, defs.Expired(id)
	}
	if cd := s.cooldownOf(snap, id, now); cd != nil {
		return nil, defs.CoolingDown(id, cd.describeCooldown(now))
	}
	return a.def, nil
}

// preconditionFailed is the refusal of an invocation whose if is false:
// the clause that failed, the values it read that the invoker may read
// itself, and the eval step that tries the clause with other values.
func (s *Service) preconditionFailed(ctx context.Context, rc *roomCtx, roomID, id string, def *ActionDef, params map[string]any, vars *expr.Vars) error {
	prog, err := s.cel.Compile(def.If)
	if err != nil {
		return defs.PreconditionFailed(id, "")
	}
	ex := s.cel.Explain(ctx, prog, vars)
	if ex == nil {
		return defs.PreconditionFailed(id, "")
	}
	e := defs.PreconditionFailed(id, ex.Clause).With("clause", ex.Clause).With("read", s.invokerMayRead(ctx, rc, ex.Read, vars))
	// The clause can be tried with other values, as the invocation binds
	// them.
	args := map[string]any{"expr": ex.Clause}
	if len(params) > 0 {
		args["params"] = params
	}
	return e.WithNext(errs.Step{Op: errs.OpEval, Room: roomID, Args: args})
}

// actionMayWrite applies the registrar's authority (authority.ActionMayWrite,
// told which scopes are the system's).
func actionMayWrite(def *ActionDef, invoker, target string) error {
	return authority.ActionMayWrite(def.ID, def.Scope, invoker, target, isSystemScope(target))
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
	return defs.ShownOf(read, s.cel.ReadAgain(ctx, paths, &mine))
}

// suggestActions completes an action_not_found error, outside the room
// lock, with what the caller could invoke instead: the actions available
// to it (those it may see: enabled for it) and the nearest id to the one it
// asked for, as a misspelling usually is.
func (s *Service) suggestActions(ctx context.Context, p *Principal, roomID, asked string, notFound error) error {
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
	return defs.Suggest(notFound, roomID, asked, avail, seen)
}

// EditDistance is the Levenshtein distance between a and b, in runes
// (defs.EditDistance): how every "did you mean" the server offers ranks
// its candidates.
func EditDistance(a, b string) int { return defs.EditDistance(a, b) }
