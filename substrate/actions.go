package substrate

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Registration and removal of actions and views. Both are state entries
// (_actions/<id>, _views/<id>) written through the one write path, so they
// carry versions, timers and audit like everything else.

// checks are what validating a definition needs of this server.
func (s *Service) checks() defs.Checks {
	return defs.Checks{CEL: s.cel, MaxIDBytes: s.lim.MaxScopeBytes, ValidName: authority.ValidName,
		Builtin: defs.IsBuiltin}
}

// RegisterResult is what a registration returns (defs.RegisterResult).
type RegisterResult = defs.RegisterResult

// RegisterAction registers or replaces an action.
func (s *Service) RegisterAction(ctx context.Context, p *Principal, roomID string, def ActionDef) (*RegisterResult, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	// The registration evaluates the room's actions under the lock (the
	// per-read budget).
	ctx, done, err := s.work(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	defer done()
	var res *RegisterResult
	seq, err := s.mutate(ctx, p, roomID, func(m *mutation) error {
		var err error
		res, err = s.registerAction(m, def)
		return err
	})
	if err != nil {
		return nil, err
	}
	res.Seq = seq
	return res, nil
}

func (s *Service) registerAction(m *mutation, def ActionDef) (*RegisterResult, error) {
	scope, err := authority.Registrar(m.p, def.Scope)
	if err != nil {
		return nil, err
	}
	def.Scope = scope
	def.RegisteredBy = m.actor
	if err := defs.ValidateAction(&def, s.checks()); err != nil {
		return nil, err
	}
	snap, err := s.lockedSnapshot(m)
	if err != nil {
		return nil, err
	}
	res := &RegisterResult{Definition: def, Created: true}
	if live := liveDefs(snap.actions, m.now, def.ID); live >= s.lim.MaxActions {
		return nil, errs.New(errs.ScopeFull, "the room has %d actions, the limit", live).
			With("limit", s.lim.MaxActions).WithHint("delete actions nobody uses, or replace one by registering its id again")
	}
	if old := snap.actions[def.ID]; old != nil && old.r.timer.live(m.now) {
		if err := authority.MayRedefine(m.p, "action", def.ID, old.def.Scope, old.def.RegisteredBy); err != nil {
			return nil, err
		}
		res.Created = false
		// The intent is the action's purpose, which outlives its
		// implementation (seed 000 §7.2): a replacement that does not
		// restate it keeps it.
		if def.Intent == "" {
			def.Intent = old.def.Intent
		}
		res.Changed = defs.ChangedFields(*old.def, def)
	}
	res.Warnings = defs.ActionWarnings(&def, snap.actionDefs(), func(scope string) error { return actionMayWrite(&def, "", scope) })
	raw, _ := json.Marshal(def)
	o := op{Scope: scopeActions, Key: def.ID, Value: raw, Timer: def.Timer}
	if _, _, err := s.applyOps(m, []op{o}, "register"); err != nil {
		return nil, err
	}
	// Every read evaluates every action for availability: refuse the
	// action that would take them past the per-read budget now, rather
	// than leave readers with actions that are not evaluated.
	agents, err := m.presence()
	if err != nil {
		return nil, err
	}
	if after := s.build(m.ctx, snap.advance(s, m.pending, snap.seq, snap.messageCount), nil, agents, msgCounts{Count: snap.messageCount}, m.now, nil); len(after.actionsCut) > 0 {
		return nil, errs.New(errs.ActionBudget, "with this action the room's actions would cost more than %d per read (cel-go cost) to tell which are available", s.lim.ActionCostPerRead).
			With("limit", s.lim.ActionCostPerRead).
			WithHint("simplify enabled and if (avoid large comprehensions), read a key another action precomputes, or delete actions nobody uses")
	}
	m.audit = map[string]any{"kind": "register_action", "action": def.ID, "definition": def, "created": res.Created, "changed": res.Changed}
	m.vocab, m.decay = append(m.vocab, vocabTouch{"action", def.ID, false}), s.decayOf(snap)
	return res, nil
}

// DeleteAction removes an action (its registrar, its scope's agent or room
// authority).
func (s *Service) DeleteAction(ctx context.Context, p *Principal, roomID, id string) (int64, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return 0, err
	}
	return s.mutate(ctx, p, roomID, func(m *mutation) error { return s.deleteDef(m, scopeActions, id) })
}

// DeleteView removes a view, with the same authority as DeleteAction.
func (s *Service) DeleteView(ctx context.Context, p *Principal, roomID, id string) (int64, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return 0, err
	}
	return s.mutate(ctx, p, roomID, func(m *mutation) error { return s.deleteDef(m, scopeViews, id) })
}

func (s *Service) deleteDef(m *mutation, scope, id string) error {
	if err := authority.ViewDeleter(m.p); err != nil {
		return err
	}
	snap, err := s.lockedSnapshot(m)
	if err != nil {
		return err
	}
	kind, notFound := "action", errs.ActionNotFound
	var defScope, by string
	found := false
	if scope == scopeActions {
		if a := snap.actions[id]; a != nil && a.r.timer.live(m.now) {
			found, defScope, by = true, a.def.Scope, a.def.RegisteredBy
		}
	} else {
		kind, notFound = "view", errs.ViewNotFound
		for _, v := range snap.views {
			if v.def.ID == id && v.r.timer.live(m.now) {
				found, defScope, by = true, v.def.Scope, v.def.RegisteredBy
			}
		}
	}
	if !found {
		return errs.New(notFound, "no %s %q in this room", kind, id).WithHint("the context lists the room's %ss", kind).
			WithNext(errs.Step{Op: errs.OpReadContext, Room: m.room, Args: map[string]any{"only": kind + "s", "depth": "full"}})
	}
	if err := authority.MayUndefine(m.p, kind, id, defScope, by); err != nil {
		return err
	}
	if _, _, err := s.applyOps(m, []op{{Scope: scope, Key: id, Delete: true}}, "delete"); err != nil {
		return err
	}
	m.audit = map[string]any{"kind": "delete_" + kind, kind: id}
	return nil
}

// RegisterView registers or replaces a view and returns its current value.
func (s *Service) RegisterView(ctx context.Context, p *Principal, roomID string, def ViewDef) (*RegisterResult, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	// The registration evaluates the room's views and actions under the
	// lock (the per-read budgets), then the view's value.
	ctx, done, err := s.work(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	defer done()
	var res *RegisterResult
	seq, err := s.mutate(ctx, p, roomID, func(m *mutation) error {
		var err error
		res, err = s.registerView(m, def)
		return err
	})
	if err != nil {
		return nil, err
	}
	res.Seq = seq
	s.valueRegistered(ctx, p, roomID, def.ID, res)
	return res, nil
}

// valueRegistered adds a just-registered view's value, as anyone now sees
// it (views are public), and a warning when it is an error. Both the
// route and the _register_view builtin answer so.
func (s *Service) valueRegistered(ctx context.Context, p *Principal, roomID, id string, res *RegisterResult) {
	rc, err := s.readCtx(ctx, p, roomID, false)
	if err != nil {
		return
	}
	res.Value = rc.views[id]
	if m, ok := res.Value.(map[string]any); ok && m["_error"] != nil {
		res.Warnings = append(res.Warnings, map[string]any{"warning": "view_error", "error": m["_error"],
			"hint": "the view is registered but its value is an error; fix the expression (try it with eval first)"})
	}
}

func (s *Service) registerView(m *mutation, def ViewDef) (*RegisterResult, error) {
	scope, err := authority.ViewRegistrar(m.p, def.Scope)
	if err != nil {
		return nil, err
	}
	def.Scope = scope
	def.RegisteredBy = m.actor
	if err := defs.ValidateView(&def, s.checks()); err != nil {
		return nil, err
	}
	snap, err := s.lockedSnapshot(m)
	if err != nil {
		return nil, err
	}
	res := &RegisterResult{Definition: def, Created: true}
	for _, v := range snap.views {
		if v.def.ID == def.ID && v.r.timer.live(m.now) {
			if err := authority.MayRedefine(m.p, "view", def.ID, v.def.Scope, v.def.RegisteredBy); err != nil {
				return nil, err
			}
			res.Created = false
		}
	}
	if live := liveViews(snap.views, m.now, def.ID); live >= s.lim.MaxViews {
		return nil, errs.New(errs.ScopeFull, "the room has %d views, the limit", live).
			With("limit", s.lim.MaxViews).WithHint("delete views nobody reads, or replace one by registering its id again")
	}
	raw, _ := json.Marshal(def)
	if _, _, err := s.applyOps(m, []op{{Scope: scopeViews, Key: def.ID, Value: raw, Timer: def.Timer}}, "register"); err != nil {
		return nil, err
	}
	// Every read evaluates every view: refuse the view that would take the
	// room's views past the per-read budget now, rather than leave readers
	// with views that are not evaluated.
	agents, err := m.presence()
	if err != nil {
		return nil, err
	}
	after := s.build(m.ctx, snap.advance(s, m.pending, snap.seq, snap.messageCount), nil, agents, msgCounts{Count: snap.messageCount}, m.now, nil)
	if after.viewsCut > 0 || after.viewCost > uint64(s.lim.ViewCostPerRead) {
		return nil, errs.New(errs.ViewBudget, "with this view the room's views would cost more than %d per read (cel-go cost)", s.lim.ViewCostPerRead).
			With("limit", s.lim.ViewCostPerRead).
			WithHint("simplify the expression (avoid large comprehensions), read a key another action precomputes, or delete views nobody reads")
	}
	m.audit = map[string]any{"kind": "register_view", "view": def.ID, "definition": def, "created": res.Created}
	m.vocab, m.decay = append(m.vocab, vocabTouch{"view", def.ID, false}), s.decayOf(snap)
	return res, nil
}

// liveDefs counts the live actions other than id.
func liveDefs(actions map[string]*actionRec, now time.Time, id string) int {
	n := 0
	for other, a := range actions {
		if other != id && a.r.timer.live(now) {
			n++
		}
	}
	return n
}

// liveViews counts the live views other than id.
func liveViews(views []*viewRec, now time.Time, id string) int {
	n := 0
	for _, v := range views {
		if v.def.ID != id && v.r.timer.live(now) {
			n++
		}
	}
	return n
}

// An action and a view as listed (defs.ActionInfo, defs.ViewInfo).
type (
	ActionInfo = defs.ActionInfo
	ViewInfo   = defs.ViewInfo
)

// ListActions lists the room's live actions with their availability to p.
func (s *Service) ListActions(ctx context.Context, p *Principal, roomID string) ([]ActionInfo, error) {
	_, rc, done, err := s.admittedRead(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	defer done()
	out := []ActionInfo{}
	for id, en := range rc.actEnabled {
		a := rc.snap.actions[id]
		info := ActionInfo{ActionDef: *a.def, Available: rc.actAvail[id], Enabled: en, Timer: a.r.timer.describe(rc.now)}
		if cd := s.cooldownOf(rc.snap, id, rc.now); cd != nil {
			info.Cooldown = cd.describeCooldown(rc.now)
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// GetAction returns one action.
func (s *Service) GetAction(ctx context.Context, p *Principal, roomID, id string) (*ActionInfo, error) {
	list, err := s.ListActions(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	for i := range list {
		if list[i].ID == id {
			return &list[i], nil
		}
	}
	return nil, errs.New(errs.ActionNotFound, "no action %q in this room", id).WithHint("the context lists the room's actions").
		WithNext(errs.Step{Op: errs.OpReadContext, Room: roomID, Args: map[string]any{"only": "actions", "depth": "full"}})
}

// ListViews lists live, enabled views with their values.
func (s *Service) ListViews(ctx context.Context, p *Principal, roomID string) ([]ViewInfo, error) {
	ctx, rc, done, err := s.admittedRead(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	defer done()
	out := []ViewInfo{}
	for _, v := range rc.snap.views {
		val, ok := rc.views[v.def.ID]
		if !ok {
			continue // dormant, expired or disabled
		}
		out = append(out, ViewInfo{ViewDef: *v.def, Value: val})
	}
	if c, ok := rc.views[viewContested]; ok {
		out = append(out, ViewInfo{ViewDef: ViewDef{ID: viewContested, Scope: ScopeShared, Description: "state keys written by more than one action (system)"}, Value: c})
	}
	if sl, err := s.salienceFor(ctx, rc, roomID); err == nil && sl != nil {
		out = append(out, ViewInfo{ViewDef: ViewDef{ID: ViewHealth, Scope: ScopeShared, Description: "the vocabulary's health: assessment, reasons, suggestions, message patterns (system)"},
			Value: sl.Health(ctx)})
	}
	return out, nil
}

// GetView returns one view.
func (s *Service) GetView(ctx context.Context, p *Principal, roomID, id string) (*ViewInfo, error) {
	list, err := s.ListViews(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	for i := range list {
		if list[i].ID == id {
			return &list[i], nil
		}
	}
	return nil, errs.New(errs.ViewNotFound, "no view %q in this room", id).WithHint("the context lists the room's views").
		WithNext(errs.Step{Op: errs.OpReadContext, Room: roomID, Args: map[string]any{"only": "views"}})
}

// BootstrapResult is one definition a role's first fill registered, or
// why it could not (defs.BootstrapResult).
type BootstrapResult = defs.BootstrapResult

// bootstrapRole registers a role's bootstrap_actions (standard-library
// ids or action definitions) and bootstrap_views (view definitions) as the
// role's agent, when the role is first filled (seed 003 §V: "it reads the
// definition, registers the expected actions and views").
//
// They are registered with the agent's own authority only (its scope and
// _shared), never its grants nor room authority: whoever defined the role
// (any agent who could invoke define_role) must not borrow the authority
// of whoever fills it, an owner included. So a definition naming another
// agent's scope, or replacing someone else's action, is refused like any
// registration by that agent would be.
func (s *Service) bootstrapRole(ctx context.Context, roomID, agentID string, actions, views []any) []BootstrapResult {
	p := authority.Bootstrapper(roomID, agentID)
	return defs.Bootstrap(actions, views,
		func(def ActionDef) error { _, err := s.RegisterAction(ctx, p, roomID, def); return err },
		func(def ViewDef) error { _, err := s.RegisterView(ctx, p, roomID, def); return err })
}
