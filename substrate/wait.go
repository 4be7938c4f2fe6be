package substrate

import (
	"context"
	"encoding/json"
	"time"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
)

// Wait blocks until condition (CEL, evaluated as p) holds or the timeout
// passes, then returns the context. It is driven by commit notifications
// (PostgreSQL LISTEN/NOTIFY through the process's hub), by the next timer
// that changes what is visible, and by a slow safety-net re-check; it does
// not poll the database in a loop. While it waits, an agent's status is
// "waiting" and its waiting_on holds the condition.
func (s *Service) Wait(ctx context.Context, p *Principal, roomID, condition string, timeout time.Duration, creq ContextRequest) (*WaitResult, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	if condition == "" {
		return nil, errs.New(errs.InvalidField, "wait needs a condition").WithHint(`give a CEL condition over the room, e.g. state._shared.phase == "done"`)
	}
	prog, err := s.cel.Compile(condition)
	if err != nil {
		return nil, err.(*errs.Error).With("field", "condition")
	}
	if timeout <= 0 {
		timeout = s.wait.DefaultTimeout
	}
	timeout = min(timeout, s.wait.MaxTimeout)
	start := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()

	sub, err := s.hub.Subscribe(ctx, roomID)
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	s.waits.Add(1)
	defer s.waits.Add(-1)
	if p.Kind == KindAgent {
		s.setWaiting(ctx, roomID, p.AgentID, &condition)
		defer s.setWaiting(context.WithoutCancel(ctx), roomID, p.AgentID, nil)
	}

	var lastErr error
	var lastVars *expr.Vars
	for {
		// The condition and, once it holds, the context come from one read.
		rc, err := s.readCtx(ctx, p, roomID, prog.UsesMessages)
		if err != nil {
			return nil, err
		}
		ok, evalErr := s.cel.EvalBool(ctx, prog, &rc.vars)
		if evalErr == nil && ok && creq.NoContext {
			return &WaitResult{Triggered: true, Condition: condition, ElapsedMS: time.Since(start).Milliseconds(), Seq: rc.snap.seq}, nil
		}
		if evalErr == nil && ok {
			env, err := s.envelopeOf(ctx, rc, roomID, creq)
			if err != nil {
				return nil, err
			}
			return &WaitResult{Triggered: true, Condition: condition, ElapsedMS: time.Since(start).Milliseconds(), Context: env}, nil
		}
		// An evaluation error (a key that does not exist yet, say) counts
		// as "not yet"; it is reported if the wait times out, with the
		// clause that did not hold.
		lastErr, lastVars = evalErr, &rc.vars

		next := s.wait.Recheck
		if t := rc.snap.nextChange(rc.now); !t.IsZero() && t.Sub(rc.now) < next {
			next = max(t.Sub(rc.now), time.Millisecond)
		}
		recheck := time.NewTimer(next)
		select {
		case <-sub.C:
		case <-recheck.C:
		case <-deadline.C:
			recheck.Stop()
			out := &WaitResult{Timeout: true, Condition: condition, ElapsedMS: time.Since(start).Milliseconds(), Seq: rc.snap.seq}
			if !creq.NoContext {
				env, err := s.Context(context.WithoutCancel(ctx), p, roomID, creq)
				if err != nil {
					return nil, err
				}
				out.Context, out.Seq = env, env.Context.Seq
			}
			if lastErr != nil {
				out.ConditionError = errs.From(lastErr).Body()
			}
			if lastVars != nil {
				out.Unmet = s.cel.Explain(ctx, prog, lastVars)
			}
			return out, nil
		case <-ctx.Done():
			recheck.Stop()
			return nil, ctx.Err()
		}
		recheck.Stop()
	}
}

// setWaiting marks an agent waiting on a condition (or active again, with
// nil) and tells the room's other waiters, who may be waiting on presence.
func (s *Service) setWaiting(ctx context.Context, roomID, agentID string, condition *string) {
	status := "active"
	if condition != nil {
		status = "waiting"
	}
	if err := s.setPresence(ctx, roomID, agentID, status, condition, true); err != nil {
		s.log.Warn("could not update waiting status", "room", roomID, "agent", agentID, "err", err)
	}
}

// nextChange is the earliest moment after now at which a timer changes
// what the room shows (zero if none is pending).
func (snap *snapshot) nextChange(now time.Time) time.Time {
	var next time.Time
	for _, keys := range snap.scopes {
		for _, r := range keys {
			if t := r.timer.nextChange(now); !t.IsZero() && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
	}
	return next
}

// Eval evaluates an expression with exactly p's read authority (POST
// /rooms/:id/eval), with params bound as an invocation would bind them, so
// an action's if can be tried before invoking it. A false boolean result
// comes with the clause that did not hold.
func (s *Service) Eval(ctx context.Context, p *Principal, roomID, src string, params json.RawMessage) (*EvalResult, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	prog, err := s.cel.Compile(src)
	if err != nil {
		return nil, err
	}
	ps, err := decodeParams(params)
	if err != nil {
		return nil, err
	}
	rc, err := s.readCtx(ctx, p, roomID, prog.UsesMessages)
	if err != nil {
		return nil, err
	}
	rc.vars.Params = celParams(ps)
	v, err := s.cel.Eval(ctx, prog, &rc.vars)
	if err != nil {
		return nil, err
	}
	out := &EvalResult{Expression: src, Value: v, Seq: rc.snap.seq}
	if v == false {
		out.Unmet = s.cel.Explain(ctx, prog, &rc.vars)
	}
	return out, nil
}
