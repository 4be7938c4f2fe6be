package substrate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
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

// WriteRef names what an invocation wrote, without the value: what a
// caller needs to read it back or to write it again with if_version.
type WriteRef struct {
	Scope    string `json:"scope"`
	Key      string `json:"key"`
	Version  int64  `json:"version"`
	SortKey  *int64 `json:"sort_key,omitempty"`
	Revision int64  `json:"revision"`
	// Bytes is the value's size (0 for a deletion).
	Bytes int `json:"bytes"`
}

// InvokeSummary is an invocation's result with references instead of the
// written values: a model that invoked an action knows what it sent, and
// the values can be large.
type InvokeSummary struct {
	Invoked bool       `json:"invoked"`
	Action  string     `json:"action"`
	Agent   string     `json:"agent"`
	Seq     int64      `json:"seq"`
	Writes  []WriteRef `json:"writes"`
	Result  any        `json:"result,omitempty"`
	Builtin any        `json:"builtin_result,omitempty"`
}

// Summary is r with references in place of the written values.
func (r *InvokeResult) Summary() *InvokeSummary {
	out := &InvokeSummary{Invoked: r.Invoked, Action: r.Action, Agent: r.Agent, Seq: r.Seq, Result: r.Result, Builtin: r.Builtin, Writes: []WriteRef{}}
	for _, e := range r.Writes {
		out.Writes = append(out.Writes, WriteRef{Scope: e.Scope, Key: e.Key, Version: e.Version, SortKey: e.SortKey, Revision: e.Revision, Bytes: len(e.Value)})
	}
	return out
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

var builtinDescriptions = map[string]string{
	"_register_action": "Register or replace an action: {id, scope?, description?, intent?, params?, if?, enabled?, writes, result?, timer?, on_invoke?}.",
	"_delete_action":   "Delete an action you registered: {id}.",
	"_register_view":   "Register or replace a view, a public CEL projection: {id, expr, scope? (default: your own), description?, enabled?, render?, timer?}.",
	"_delete_view":     "Delete a view you registered: {id}.",
	"_send_message":    "Post to _messages: {body, kind? (default chat), to? (agent id or list: directed), reply_to? (seq: joins its thread), subject? (starts a thread), ack? (true: recipients acknowledge with _ack)}.",
	"_ack":             "Acknowledge a message that asked you (ack: true): {seq}.",
	"help":             "Read the help: {key?}. Without a key, the list of keys.",
}

var builtinParams = map[string]map[string]ParamSpec{
	"_register_action": {"id": {Type: "string", Required: true}, "writes": {Type: "array"}, "scope": {Type: "string"}, "if": {Type: "string"}},
	"_delete_action":   {"id": {Type: "string", Required: true}},
	"_register_view":   {"id": {Type: "string", Required: true}, "expr": {Type: "string", Required: true}, "scope": {Type: "string"}},
	"_delete_view":     {"id": {Type: "string", Required: true}},
	"_send_message": {"body": {Required: true}, "kind": {Type: "string"}, "to": {Description: "agent id or list of agent ids"},
		"reply_to": {Type: "integer", Description: "seq of the message answered"}, "subject": {Type: "string"}, "ack": {Type: "boolean"}},
	"_ack": {"seq": {Type: "integer", Required: true}},
	"help": {"key": {Type: "string"}},
}

// decodeParams reads an invocation's params object: a value like any
// other, so no deeper than Limits.MaxValueDepth (the object itself is
// one level).
func (s *Service) decodeParams(raw json.RawMessage) (map[string]any, error) {
	params := map[string]any{}
	if len(raw) == 0 || string(raw) == "null" {
		return params, nil
	}
	if err := CheckJSONText(raw); err != nil {
		return nil, err.(*errs.Error).With("field", "params")
	}
	if jsonDepth(raw, s.lim.MaxValueDepth) > s.lim.MaxValueDepth {
		return nil, s.tooDeep("params").With("field", "params")
	}
	if err := decodeNumber(raw, &params); err != nil || params == nil {
		return nil, errs.New(errs.InvalidParam, "params must be a JSON object").WithHint(`params is an object: {"name": value, …}`)
	}
	return params, nil
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
	// Read-only credentials never write, whatever the action: the builtin
	// help (answered above) is all they may invoke, not a room's own
	// action that took its name.
	if p.ReadOnly() {
		err := errs.New(errs.ReadOnlyToken, "a read-only credential (%s) cannot invoke actions", p.Kind).
			WithHint("invoke with an agent token or the room token; read-only callers may read the context and invoke the builtin help")
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
	a := snap.actions[id]
	if a == nil {
		return errs.New(errs.ActionNotFound, "no action %q in this room", id)
	}
	if !a.r.timer.live(m.now) {
		if a.r.timer != nil && *a.r.timer.Effect == "enable" {
			return errs.New(errs.ActionCooldown, "action %q is dormant until its timer runs out", id).
				With("timer", a.r.timer.describe(m.now)).WithHint("wait until then, or wait on actions.%s.available", id)
		}
		return errs.New(errs.ActionNotFound, "action %q has expired", id).WithHint("register it again if it is still needed")
	}
	if cd := s.cooldownOf(snap, id, m.now); cd != nil {
		return errs.New(errs.ActionCooldown, "action %q is cooling down", id).With("cooldown", cd.describeCooldown(m.now)).
			WithHint("try again after the cooldown, or wait with condition actions[%q].available", id)
	}
	def := a.def
	if err := checkParams(def, params); err != nil {
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
		return errs.New(errs.ActionDisabled, "action %q is disabled: its enabled expression is false", id).
			With("enabled", def.Enabled).WithHint("it cannot be invoked while its enabled expression (%s) is false: pick an available action, or wait until it holds", def.Enabled).
			WithNext(errs.Step{Op: errs.OpReadContext, Room: m.room, Args: map[string]any{"only": "actions"}})
	}
	vars := rc.actionVars(ctx, s, def, cp)
	if def.If != "" && !rc.ifHeld[id] {
		ok, err := s.evalField(ctx, "if", def.If, vars)
		if err != nil {
			return err
		}
		if !ok.(bool) {
			e := errs.New(errs.PreconditionFailed, "the precondition of %q does not hold", id).
				WithHint("change what the failing clause reads (another parameter value, or the state it reads), or wait until it holds; test it first")
			if prog, err := s.cel.Compile(def.If); err == nil {
				if ex := s.cel.Explain(ctx, prog, vars); ex != nil {
					e.Message = fmt.Sprintf("the precondition of %q does not hold: %s is false", id, ex.Clause)
					e = e.With("clause", ex.Clause).With("read", s.invokerMayRead(ctx, rc, ex.Read, vars))
					// The clause can be tried with other values, as the
					// invocation binds them.
					args := map[string]any{"expr": ex.Clause}
					if len(params) > 0 {
						args["params"] = params
					}
					e = e.WithNext(errs.Step{Op: errs.OpEval, Room: m.room, Args: args})
				}
			}
			return e
		}
	}
	r := &renderer{params: params, self: rc.self, now: m.now.UTC().Format(time.RFC3339Nano)}
	ops := make([]op, 0, len(def.Writes)+2)
	for i, w := range def.Writes {
		o, err := s.renderWrite(ctx, rc, vars, r, def, w)
		if err != nil {
			if e, ok := err.(*errs.Error); ok {
				return e.With("write", i)
			}
			return err
		}
		ops = append(ops, o)
	}
	userWrites := len(ops)
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
	msg, _ := expr.MarshalJSON(map[string]any{"from": m.actor, "kind": "action_invocation", "action": id, "params": s.auditParams(params), "body": callText(id, params)})
	ops = append(ops, op{Scope: ScopeMessages, Append: true, Value: msg})
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
		if v, err := s.evalField(ctx, "result", def.Result, after.actionVars(ctx, s, def, cp)); err != nil {
			res.Result = map[string]any{"_error": errorText(err)}
		} else if valueDepth(v, s.lim.MaxValueDepth) > s.lim.MaxValueDepth {
			// The audit log keeps the result: held to the depth limit,
			// as a view's value is.
			res.Result = map[string]any{"_error": fmt.Sprintf("the result nests arrays and objects more than %d levels deep, the server's limit (invalid_value): return a flatter value", s.lim.MaxValueDepth)}
		} else {
			res.Result = v
		}
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

// needMessages reports whether an invocation evaluates an expression that
// reads messages, so the per-agent unread counts must be computed.
func (s *Service) needMessages(snap *snapshot, def *ActionDef) bool {
	if snap.actionsUseMessages(s) {
		return true
	}
	srcs := []string{def.Result}
	for _, w := range def.Writes {
		if w.Expr {
			var code string
			src := w.Value
			if len(src) == 0 {
				src = w.Merge
			}
			_ = json.Unmarshal(src, &code)
			srcs = append(srcs, code)
		}
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

// evalField evaluates one of an action's expressions; "if" must be boolean.
func (s *Service) evalField(ctx context.Context, field, src string, vars *expr.Vars) (any, error) {
	p, err := s.cel.Compile(src)
	if err == nil {
		if field == "if" {
			var ok bool
			ok, err = s.cel.EvalBool(ctx, p, vars)
			if err == nil {
				return ok, nil
			}
		} else {
			var v any
			v, err = s.cel.Eval(ctx, p, vars)
			if err == nil {
				return v, nil
			}
		}
	}
	if e, ok := err.(*errs.Error); ok {
		return nil, e.With("field", field)
	}
	return nil, err
}

// renderWrite turns one write template into a concrete write, checked
// against the registrar's authority (seed 001 §Write authority model).
func (s *Service) renderWrite(ctx context.Context, rc *roomCtx, vars *expr.Vars, r *renderer, def *ActionDef, w WriteTemplate) (op, error) {
	scope := r.str(w.Scope)
	if scope == "" {
		scope = ScopeShared
	}
	if scope == ScopeSelf {
		scope = rc.self
	}
	o := op{Scope: scope, Key: r.str(w.Key), Append: w.Append, Delete: w.Delete, Deep: true, Timer: w.Timer, Enabled: w.Enabled}
	if err := validName("scope", o.Scope, s.lim.MaxScopeBytes, true); err != nil {
		return o, err
	}
	if o.Key != "" || !o.Append {
		if err := validKey(o.Key, s.lim.MaxKeyBytes); err != nil {
			return o, err
		}
	}
	if err := actionMayWrite(def, rc.self, o.Scope); err != nil {
		return o, err
	}
	var err error
	switch {
	case w.Expr:
		src := w.Value
		if len(src) == 0 {
			src = w.Merge
		}
		var code string
		_ = json.Unmarshal(src, &code)
		v, err := s.evalField(ctx, "writes.value", code, vars)
		if err != nil {
			return o, err
		}
		out, err := json.Marshal(v)
		if err != nil {
			return o, errs.New(errs.CELError, "write expression result cannot be stored: %v", err).WithHint("return JSON-shaped values")
		}
		if len(w.Merge) > 0 {
			if _, isMap := v.(map[string]any); !isMap {
				return o, errs.New(errs.CELError, "merge expression gave %s, not a map", expr.KindOf(v)).WithHint("return a map from a merge expression")
			}
			o.Merge = out
		} else {
			o.Value = out
		}
	case len(w.Value) > 0:
		o.Value, err = r.json(w.Value)
	case len(w.Merge) > 0:
		o.Merge, err = r.json(w.Merge)
	case len(w.Increment) > 0:
		var n json.Number
		n, err = r.number("increment", w.Increment)
		o.Increment = &n
	}
	if err != nil {
		return o, err
	}
	if len(w.IfVersion) > 0 {
		n, err := r.number("if_version", w.IfVersion)
		if err != nil {
			return o, err
		}
		v, err := n.Int64()
		if err != nil || v < 0 {
			return o, errs.New(errs.InvalidParam, "if_version rendered to %s, not a version", n).WithHint("pass the version you read (0: must not exist)")
		}
		o.IfVersion = &v
	}
	return o, nil
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

// callText renders an invocation as id(k=v, …) for the message log.
func callText(id string, params map[string]any) string {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		b, _ := json.Marshal(params[k])
		parts[i] = k + "=" + string(b)
	}
	text := id + "(" + strings.Join(parts, ", ") + ")"
	if len(text) > maxCallText {
		cut := maxCallText
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "…)"
	}
	return text
}

// maxCallText caps the text of an invocation message: the params are in
// the audit log (or summarised there), the message only says what happened.
const maxCallText = 500

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

// invokeBuiltin runs one of the underscore builtins.
func (s *Service) invokeBuiltin(ctx context.Context, p *Principal, roomID, id string, raw json.RawMessage, params map[string]any) (*InvokeResult, error) {
	res := &InvokeResult{Invoked: true, Action: id, Agent: p.Actor(), Params: params}
	strParam := func(name string) (string, error) {
		v, _ := params[name].(string)
		if v == "" {
			return "", errs.New(errs.InvalidParam, "%s needs the string parameter %q", id, name).With("param", name).WithHint("invoke %s with params {%q: …}", id, name)
		}
		return v, nil
	}
	var err error
	var seq int64
	switch id {
	case "_register_action":
		var def ActionDef
		if err = strictDecode(raw, &def); err == nil {
			var r *RegisterResult
			seq, err = s.mutate(ctx, p, roomID, func(m *mutation) error {
				r, err = s.registerAction(m, def)
				return err
			})
			if err == nil {
				r.Seq, res.Builtin = seq, r
			}
		}
	case "_register_view":
		var def ViewDef
		if err = strictDecode(raw, &def); err == nil {
			var r *RegisterResult
			seq, err = s.mutate(ctx, p, roomID, func(m *mutation) error {
				r, err = s.registerView(m, def)
				return err
			})
			if err == nil {
				r.Seq, res.Builtin = seq, r
				s.valueRegistered(ctx, p, roomID, def.ID, r)
			}
		}
	case "_delete_action", "_delete_view":
		var target string
		if target, err = strParam("id"); err == nil {
			scope := scopeActions
			if id == "_delete_view" {
				scope = scopeViews
			}
			seq, err = s.mutate(ctx, p, roomID, func(m *mutation) error { return s.deleteDef(m, scope, target) })
			res.Builtin = map[string]any{"deleted": true, "id": target}
		}
	case "_send_message":
		seq, err = s.mutate(ctx, p, roomID, func(m *mutation) error {
			written, sent, audit, err := s.sendMessage(m, params)
			if err == nil {
				res.written, res.Builtin = []*Entry{written}, sent
				m.audit = map[string]any{"kind": "invoke", "action": id, "builtin": true, "agent": m.actor, "params": s.auditParams(params), "ok": true, "writes": audit}
			}
			return err
		})
	case "_ack":
		seq, err = s.mutate(ctx, p, roomID, func(m *mutation) error {
			out, audit, err := s.ack(m, params)
			if err == nil {
				res.Builtin = out
				if audit == nil {
					audit = []map[string]any{}
				}
				m.audit = map[string]any{"kind": "invoke", "action": id, "builtin": true, "agent": m.actor, "params": s.auditParams(params), "ok": true, "writes": audit}
			}
			return err
		})
	}
	if err != nil {
		s.auditFailure(ctx, p, roomID, id, params, err)
		return nil, err
	}
	res.fill(seq)
	return res, nil
}

func strictDecode(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errs.New(errs.InvalidParam, "params do not fit the definition: %v", err).WithHint("see help key guide for the fields")
	}
	return nil
}

// SentMessage is what _send_message answers: the message's own seq, the
// one number reply_to, _ack and the context's messages name it by (the
// invocation's seq is the room's, one or more past it: a thread or an ack
// record is written after the message).
type SentMessage struct {
	Seq int64 `json:"seq"`
	// Thread is the thread the message is in (its first message's seq),
	// 0 for none.
	Thread int64 `json:"thread,omitempty"`
}

// sendMessage appends a message from the caller to _messages.
func (s *Service) sendMessage(m *mutation, params map[string]any) (*Entry, *SentMessage, []map[string]any, error) {
	body, ok := params["body"]
	if !ok || body == nil {
		return nil, nil, nil, errs.New(errs.InvalidParam, "_send_message needs a body").With("param", "body").WithHint(`invoke _send_message with {"body": "…"}`)
	}
	kind := "chat"
	if k, ok := params["kind"]; ok {
		if kind, ok = k.(string); !ok || kind == "" || kind == "action_invocation" {
			return nil, nil, nil, errs.New(errs.InvalidParam, "kind must be a non-empty string other than action_invocation").With("param", "kind").WithHint(`e.g. "chat", "proposal", "status"`)
		}
	}
	msg := map[string]any{"from": m.actor, "kind": kind, "body": body}
	if to, ok := params["to"]; ok && to != nil {
		var list []string
		switch x := to.(type) {
		case string:
			list = []string{x}
		case []any:
			for _, e := range x {
				s, ok := e.(string)
				if !ok {
					return nil, nil, nil, errs.New(errs.InvalidParam, "to must be an agent id or a list of them").With("param", "to").WithHint(`e.g. "to": ["alice", "bob"]`)
				}
				list = append(list, s)
			}
		default:
			return nil, nil, nil, errs.New(errs.InvalidParam, "to must be an agent id or a list of them").With("param", "to").WithHint(`e.g. "to": "alice"`)
		}
		if err := s.checkRecipients(m, list); err != nil {
			return nil, nil, nil, err
		}
		msg["to"] = list
	}
	for k := range params {
		switch k {
		case "body", "kind", "to", "reply_to", "subject", "ack":
		default:
			return nil, nil, nil, errs.New(errs.InvalidParam, "_send_message has no parameter %q", k).With("param", k).WithHint("its parameters are body, kind, to, reply_to, subject and ack")
		}
	}
	thread, err := s.threadFields(m, params, msg)
	if err != nil {
		return nil, nil, nil, err
	}
	var ackTo []string
	if v, ok := params["ack"]; ok && v != nil {
		b, isBool := v.(bool)
		if !isBool {
			return nil, nil, nil, errs.New(errs.InvalidParam, "ack must be true or false").With("param", "ack").WithHint(`"ack": true asks the recipients to acknowledge with _ack`)
		}
		if b {
			to, _ := msg["to"].([]string)
			if ackTo, err = s.ackRecipients(m, to); err != nil {
				return nil, nil, nil, err
			}
			if len(ackTo) == 0 {
				return nil, nil, nil, errs.New(errs.InvalidParam, "ack: true asks nobody: the room has no other agent").With("param", "ack").WithHint("send it without ack, or once others have joined")
			}
			msg["ack"] = true
		}
	}
	raw, _ := json.Marshal(msg)
	written, audit, err := s.applyOps(m, []op{{Scope: ScopeMessages, Append: true, Value: raw}}, "builtin:_send_message")
	if err != nil {
		return nil, nil, nil, err
	}
	sent := *written[0].SortKey
	if err := s.recordThread(m, thread, sent, msg); err != nil {
		return nil, nil, nil, err
	}
	if ackTo != nil {
		if err := s.recordAck(m, sent, ackTo); err != nil {
			return nil, nil, nil, err
		}
	}
	if _, subject := msg["subject"]; thread == 0 && subject {
		thread = sent
	}
	return written[0], &SentMessage{Seq: sent, Thread: thread}, audit, nil
}

// checkRecipients refuses a directed message to an agent the room does
// not have: it would raise nobody's directed_unread, and the sender would
// never learn that it went nowhere (a misspelt or guessed agent id is the
// usual cause, so the error names the nearest one).
func (s *Service) checkRecipients(m *mutation, to []string) error {
	rows, err := m.tx.Query(m.ctx, `SELECT id FROM agents WHERE room_id = $1`, m.room)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	sort.Strings(ids)
	for _, id := range to {
		if _, ok := slices.BinarySearch(ids, id); ok {
			continue
		}
		e := errs.New(errs.InvalidParam, "to names %q, which is not an agent of this room", id).With("param", "to").With("not_agent", id).
			WithHint("send to agents listed in the context's agents section; nothing was sent")
		listed := ids
		if len(listed) > 50 {
			listed = listed[:50]
		}
		e.With("agents", listed)
		if near := nearest(id, slices.Clone(ids)); near != "" {
			e.With("did_you_mean", near)
		}
		return e
	}
	return nil
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
