package substrate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate/delta"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/internal/earliest"
	"github.com/syncsubstrate/sync/substrate/internal/waitbatch"
	"github.com/syncsubstrate/sync/substrate/internal/waitclock"
	"github.com/syncsubstrate/sync/substrate/timer"
)

// Wait blocks until condition (CEL, evaluated as p) holds or the timeout
// passes, then returns the context. It is driven by commit notifications
// (PostgreSQL LISTEN/NOTIFY through the process's hub), by the next timer
// that changes what is visible or moment at which now changes the outcome
// (clockFor), and by a slow safety-net re-check; it does
// not poll the database in a loop. While it waits, an agent's status is
// "waiting" and its waiting_on holds the condition.
//
// Wait itself only sleeps; the wait's state is a waiter on the heap, and
// its reads and answers are the waiter's methods, which have returned by
// the time it sleeps. A parked wait keeps its goroutine's stack, and what
// that stack holds where it parks is what ten thousand waits cost: with
// the reads' frames below the select (4.5 KiB in use), a stack grown to
// 16 KiB while the wait began never shrank, and every collection scanned
// them all.
func (s *Service) Wait(ctx context.Context, p *Principal, roomID, condition string, timeout time.Duration, creq ContextRequest) (*WaitResult, error) {
	w, err := s.beginWait(ctx, p, roomID, condition, timeout, creq)
	if err != nil {
		return nil, err
	}
	defer w.end()
	for {
		res, next, err := w.check()
		if res != nil || err != nil {
			return res, err
		}
		// One timer for both the next re-check and the timeout.
		last := w.alarm.Set(next)
		select {
		case <-w.sub.C:
			w.alarm.Stop()
		case <-w.alarm.C():
			if last {
				return w.timedOut()
			}
		case <-w.ctx.Done():
			return nil, w.ctx.Err()
		}
		if err := w.woken(); err != nil {
			return nil, err
		}
	}
}

// waiter is a wait in progress (see Wait).
type waiter struct {
	s *Service
	// ctx is the call's, admitted to the room's expression budget once:
	// the wait's re-reads are charged to the room, and a room that spent
	// its budget meanwhile delays others, not this.
	ctx  context.Context
	done func()

	p                       *Principal
	roomID, condition, note string
	creq                    ContextRequest
	prog                    *expr.Program
	sub                     *store.Sub
	start                   time.Time
	alarm                   *waitclock.Alarm // stopped while the wait reads
	agent                   bool             // shown waiting: shown active again at the end

	// startSeq is where the wait's delta starts for an agent that never
	// read the room (-1: at its first read).
	startSeq int64
	// Nothing of a read is kept while the wait sleeps (a room's context
	// can be large, and a thousand waits would hold a thousand of them):
	// only the last read's seq and evaluation error, for the timeout's
	// report.
	seq     int64
	lastErr error
}

// beginWait checks the call, subscribes to the room's changes and shows
// an agent waiting. Everything it set up is undone by end, or by itself
// when it fails.
func (s *Service) beginWait(ctx context.Context, p *Principal, roomID, condition string, timeout time.Duration, creq ContextRequest) (*waiter, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	if condition == "" && creq.Thread != 0 {
		// A wait on a thread: for a message in it after since (default:
		// now), a condition on its _threads record.
		after := int64(0)
		if creq.Since != nil {
			after = *creq.Since
		} else if seq, err := s.roomSeq(ctx, roomID); err != nil {
			return nil, err
		} else {
			after = seq
		}
		condition = envelope.ThreadCondition(creq.Thread, after)
	}
	if condition == "" {
		return nil, errs.New(errs.InvalidField, "wait needs a condition").WithHint(`give a CEL condition over the room, e.g. state._shared.phase == "done"`)
	}
	prog, err := s.cel.Compile(condition)
	if err != nil {
		return nil, err.(*errs.Error).With("field", "condition")
	}
	if t := prog.NotBoolean(); t != "" {
		return nil, delta.NotBoolean(condition, t)
	}
	w := &waiter{s: s, p: p, roomID: roomID, condition: condition, creq: creq, prog: prog, startSeq: -1}
	if w.ctx, w.done, err = s.work(ctx, p, roomID); err != nil {
		return nil, err
	}
	timeout, w.note = delta.Timeout(timeout, s.wait.DefaultTimeout, s.wait.MaxTimeout)
	w.start = time.Now()
	// Presence changes matter only to a condition that reads presence
	// (delta.ReadsWhole).
	if w.sub, err = s.hub.Subscribe(w.ctx, roomID, delta.ReadsWhole(prog)); err != nil {
		w.done()
		return nil, err
	}
	w.alarm = waitclock.NewAlarm(w.start.Add(timeout))
	if p.Kind == KindAgent {
		// The wait begins before anyone can see it waiting: another
		// agent may write as soon as it does, and that write, which may
		// land before the wait's first read, is what the wait's delta is
		// for. Started at that read, the delta of an agent that never
		// read the room left it out (the wait triggered at once, with
		// "changed": {}). The seq comes with the status, from the
		// statement that sets it: no extra round trip.
		w.agent = true
		if seq, ok := s.showWaiting(w.ctx, roomID, p.AgentID, condition); ok {
			w.startSeq = seq
		}
		if s.shownWaiting != nil {
			s.shownWaiting(roomID, p.AgentID)
		}
	}
	// Counted once in place, with the seq its delta starts from taken:
	// Stats().OpenWaits reaching n says n waits would see any write
	// made from then on (tests wait on it instead of sleeping).
	s.waits.Add(1)
	return w, nil
}

// end undoes beginWait.
func (w *waiter) end() {
	if w.agent {
		w.s.endWaiting(context.WithoutCancel(w.ctx), w.roomID, w.p.AgentID)
	}
	w.s.waits.Add(-1)
	w.sub.Close()
	w.alarm.Stop()
	w.done()
}

// check reads the room and evaluates the condition, reading again at once
// when what it read calls for it. It returns the wait's answer, or how
// long to sleep before the next safety-net re-check.
func (w *waiter) check() (*WaitResult, time.Duration, error) {
	s := w.s
	for {
		// What now changes (see clockFor), found by this read's
		// evaluations.
		clk := &expr.Clock{Reads: w.reads}
		ctx := expr.WithClock(w.ctx, clk)
		rc, err := s.waitRead(ctx, w.p, w.roomID, w.prog)
		if err != nil {
			return nil, 0, err
		}
		if !rc.partial && !w.sub.Presence() {
			// The room has entries gated by `enabled`, and a gate may
			// read agents: presence changes may now change what the
			// condition sees. Read again once subscribed to them, so
			// that none between that read and now is missed.
			w.sub.WantPresence()
			continue
		}
		rc, ok, evalErr, err := w.evaluate(ctx, rc)
		if err != nil {
			return nil, 0, err
		}
		again, err := w.recheckAccess(ctx)
		if err != nil {
			return nil, 0, err
		}
		if again {
			continue
		}
		if evalErr == nil && ok {
			res, err := w.triggered(rc)
			return res, 0, err
		}
		// An evaluation error (a key that does not exist yet, say) counts
		// as "not yet"; it is reported if the wait times out, with the
		// clause that did not hold.
		w.lastErr = evalErr
		w.seq = rc.snap.seq
		return nil, w.sleep(rc, clk), nil
	}
}

// evaluate evaluates the condition on rc, and once it holds on a partial
// read, on the whole read the wait answers with (which it returns).
func (w *waiter) evaluate(ctx context.Context, rc *roomCtx) (_ *roomCtx, ok bool, evalErr, err error) {
	s := w.s
	ok, evalErr = s.cel.EvalBool(ctx, w.prog, &rc.vars)
	if evalErr != nil && errs.From(evalErr).Details["gave"] != nil {
		// Not a boolean now means not a boolean ever: say so now
		// rather than after the whole timeout.
		return nil, false, nil, delta.NotBoolean(w.condition, fmt.Sprint(errs.From(evalErr).Details["gave"]))
	}
	if w.startSeq < 0 {
		w.startSeq = rc.snap.seq
	}
	if evalErr == nil && ok && rc.partial && !w.creq.NoContext {
		// The condition and the context come from one read: the
		// whole one now, with the condition checked again on it.
		if rc, err = s.readCtx(ctx, w.p, w.roomID, w.prog.UsesMessages); err != nil {
			return nil, false, nil, err
		}
		ok, evalErr = s.cel.EvalBool(ctx, w.prog, &rc.vars)
	}
	return rc, ok, evalErr, nil
}

// recheckAccess checks the waiter's access again after a read; again is true
// when its grants changed, and the wait must read again with them.
//
// Access is checked again after each read, once (with the other waits of
// the room woken at the same time: recheckBatched): one lost since the
// call began or since the last wake-up (while the agent was being marked
// waiting, say) must not answer with what was written after the loss, and
// whatever the read saw was written while the caller still had access. A
// principal its surface refreshes (Refresh) was refreshed before the
// read, at the wake-up.
func (w *waiter) recheckAccess(ctx context.Context) (again bool, err error) {
	np, err := w.s.recheckBatched(ctx, w.p)
	if err != nil {
		return false, err
	}
	if w.p.Refresh != nil {
		return false, nil
	}
	changed := !slices.Equal(np.Grants, w.p.Grants)
	w.p = np
	return changed, nil
}

// triggered is the answer of a wait whose condition holds on rc.
func (w *waiter) triggered(rc *roomCtx) (*WaitResult, error) {
	res := &WaitResult{Triggered: true, Condition: w.condition, ElapsedMS: time.Since(w.start).Milliseconds(), Seq: rc.snap.seq, Note: w.note}
	if w.creq.NoContext {
		return res, nil
	}
	env, err := w.s.envelopeOf(w.ctx, rc, w.roomID, w.shape(rc))
	if err != nil {
		return nil, err
	}
	res.Context = env
	return res, nil
}

// sleep is how long the wait sleeps after a read at which its condition
// did not hold: until the next timer that changes what it read, or the
// next moment at which now changes what it evaluated, or the safety net's
// re-check.
func (w *waiter) sleep(rc *roomCtx, clk *expr.Clock) time.Duration {
	s := w.s
	timers := rc.nextChange(delta.TimersMatter(w.prog))
	next := waitclock.Sleep(rc.now, s.wait.Recheck, timers, s.nowNext(rc.now, clk))
	if s.waitSleeps != nil {
		s.waitSleeps(w.roomID, next)
	}
	return next
}

// woken refreshes, after a wake-up, a principal its surface refreshes.
func (w *waiter) woken() error {
	if w.p.Refresh == nil {
		return nil
	}
	p, err := w.s.recheck(w.ctx, w.p)
	if err != nil {
		return err
	}
	w.p = p
	return nil
}

// timedOut is the answer of a wait whose timeout passed.
func (w *waiter) timedOut() (*WaitResult, error) {
	s, ctx := w.s, w.ctx
	// The credential and the caller's access are checked again at
	// every wake-up, this one included: a wait never outlives a
	// revocation with the room's context.
	p, err := s.recheckBatched(ctx, w.p)
	if err != nil {
		return nil, err
	}
	out := &WaitResult{Timeout: true, Condition: w.condition, ElapsedMS: time.Since(w.start).Milliseconds(), Seq: w.seq, Note: w.note}
	if w.lastErr != nil {
		out.ConditionError = errs.From(w.lastErr).Body()
	}
	// What did not hold, from a read made now; a timeout answers
	// with the condition alone unless the call asked for a
	// context (nothing the waiter was waiting for happened), then
	// from the same read, a delta since the agent's last read as
	// a wake-up's.
	creq := w.creq
	withCtx := creq.Full || creq.Delta
	rc, err := s.readCtx(context.WithoutCancel(ctx), p, w.roomID, w.prog.UsesMessages || withCtx && !creq.NoMessages)
	if err == nil {
		out.Unmet = s.cel.Explain(ctx, w.prog, &rc.vars)
	} else if withCtx {
		return nil, err
	}
	if withCtx {
		env, err := s.envelopeOf(context.WithoutCancel(ctx), rc, w.roomID, w.shape(rc))
		if err != nil {
			return nil, err
		}
		out.Context, out.Seq = env, env.Context.Seq
	}
	if err := s.afterRead(context.WithoutCancel(ctx), p); err != nil {
		return nil, err
	}
	return out, nil
}

// afterRead checks p's access again after a read a wait answers with
// (its new principal is not needed: the read is done).
func (s *Service) afterRead(ctx context.Context, p *Principal) error {
	_, err := s.recheckBatched(ctx, p)
	return err
}

// recheckBatched is recheck for a principal authenticated by a token of
// its own: the credential is read with those of the other waits of the
// room woken at the same time, in one query, and the token holds when it
// is still the one stored.
func (s *Service) recheckBatched(ctx context.Context, p *Principal) (*Principal, error) {
	if p.Refresh != nil || p.TokenHash() == nil {
		return s.recheck(ctx, p)
	}
	kind := waitbatch.AgentToken
	switch p.Kind {
	case KindRoom:
		kind = waitbatch.RoomToken
	case KindView:
		kind = waitbatch.ViewToken
	}
	c, err := s.waitq.Cred(ctx, p.RoomID, kind, p.AgentID)
	if err != nil {
		return nil, err
	}
	if c.Hash == nil || !bytes.Equal(c.Hash, p.TokenHash()) {
		// The long way, for its error: deleted room or revoked token.
		return s.recheck(ctx, p)
	}
	np := *p
	if p.Kind == KindAgent {
		np.Grants = c.Grants
	}
	return &np, nil
}

// shape is the context the wait answers with, from rc
// (delta.WakeRequest): the delta since the waiter's last read, by its
// marks in the room.
func (w *waiter) shape(rc *roomCtx) ContextRequest {
	var marks *delta.Marks
	if rc != nil {
		marks = delta.MarksOf(rc.agents, rc.self)
	}
	return delta.WakeRequest(w.creq, marks, w.startSeq)
}

// waitRead reads what a wait's condition needs: a partial read
// (roomCtx.partial: state, self, now, messages) unless the condition
// reads presence (delta.ReadsWhole) or the room has entries gated by
// `enabled` (a gate may read agents).
func (s *Service) waitRead(ctx context.Context, p *Principal, roomID string, prog *expr.Program) (*roomCtx, error) {
	if delta.ReadsWhole(prog) {
		return s.readCtx(ctx, p, roomID, prog.UsesMessages)
	}
	r, err := s.readRoom(ctx, p, roomID, prog.UsesMessages, false)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	// Unread gated messages are counted only once their gates are
	// evaluated for the reader, and a gate may read agents.
	if len(r.snap.live(now).deferred) > 0 || len(r.msgs.gated) > 0 || len(r.msgs.hidden) > 0 {
		return s.readCtx(ctx, p, roomID, prog.UsesMessages)
	}
	rc := &roomCtx{now: now, snap: r.snap, p: p, msgs: r.msgs, counted: r.counted, partial: true}
	if p != nil && p.Kind == KindAgent {
		rc.self = p.AgentID
	}
	rc.state, rc.gatesHidden = s.stateFor(ctx, rc, rc.visible)
	rc.vars = expr.Vars{
		State:    rc.state,
		Messages: envelope.MessagesVar(r.msgs.Count, r.msgs.Unread, r.msgs.Directed),
		Self:     rc.self,
		Now:      now,
	}
	return rc, nil
}

// showWaiting marks an agent waiting on condition and tells the room's
// other waiters, who may be waiting on presence. It returns the room's
// seq as the statement setting the status saw it, before its commit made
// the status visible: no write made by someone who saw the agent waiting
// comes at or before it. ok is false when the status was not set (the
// agent is gone, or the write failed: logged, as the status is advice);
// then nobody saw it, and the wait starts at its first read.
func (s *Service) showWaiting(ctx context.Context, roomID, agentID, condition string) (seq int64, ok bool) {
	// In one statement with the waits of the room starting together (a
	// thousand agents told to wait at once made a thousand round trips
	// for their statuses, and as many notifications, each holding a
	// connection the others queued for).
	seq, ok, err := s.waitq.Start(ctx, roomID, agentID, condition)
	if err != nil {
		s.log.Warn("could not update waiting status", "room", roomID, "agent", agentID, "err", err)
		return 0, false
	}
	return seq, ok
}

// endWaiting marks an agent active again at the end of its wait, in one
// statement for the waits of the room ending together, and tells the
// room's other waiters.
func (s *Service) endWaiting(ctx context.Context, roomID, agentID string) {
	if err := s.waitq.Done(ctx, roomID, agentID); err != nil {
		s.log.Warn("could not update waiting status", "room", roomID, "agent", agentID, "err", err)
	}
}

// nextChange is the earliest moment after the read at which a timer
// changes what it read (zero if none is pending): an entry's, an action's
// or a view's, and with msgs (the condition reads messages, or views or
// actions, which may) a message's, which changes messages.count and the
// unread counts.
func (rc *roomCtx) nextChange(msgs bool) time.Time {
	next := rc.snap.nextChange(rc.now)
	if msgs {
		next = timer.Earliest(next, rc.msgs.next)
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
	ps, err := s.decodeParams(params)
	if err != nil {
		return nil, err
	}
	ctx, done, err := s.work(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	defer done()
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

// clockFor is ctx for evaluating part of a read (delta.ClockFor).
func clockFor(ctx context.Context, part string) context.Context { return delta.ClockFor(ctx, part) }

// reads reports whether the wait's outcome depends on part of a read
// (delta.Reads).
func (w *waiter) reads(part string) bool {
	agent := ""
	if w.p.Kind == KindAgent {
		agent = w.p.AgentID
	}
	return delta.Reads(w.prog, w.condition, agent, part)
}

// nowNext is when a read at now must be made again for what the clock
// saw (zero: not for it): a moment foreseen, or the next step of the
// cadence when some use of now could not be foreseen.
func (s *Service) nowNext(now time.Time, clk *expr.Clock) time.Time {
	next, opaque := clk.Next()
	return waitclock.Next(now, next, opaque, s.wait.NowRecheck)
}

// What a live reader (a person's room page) must know to keep showing a
// room as it is: the next moment the room as it read it changes with no
// write behind it. No commit, and so no notification, marks an entry's,
// action's or view's timer starting or ending, a cooldown ending, a
// message's timer, or now passing a moment a gate, view or `enabled`
// compares it with. A reader that foresees reads with a context from
// Foresee: every read made with it notes those moments (the timers of the
// room it read, and, through an expr.Clock, the moments now changes a
// comparison of what it evaluated), as a wait's read does for the wait.

// Foresight collects, over the reads made with its context, when what
// they read next changes by the clock alone. It is safe for concurrent
// use.
type Foresight struct {
	s     *Service
	start time.Time
	clk   expr.Clock
	timer earliest.Moment // the earliest timer moment noted
}

type foresightKey struct{}

// Foresee returns ctx whose reads (Context, ReadState, Eval, …) note in
// the Foresight when what they read changes with no write. Their
// evaluations are the reads' own, charged to the room as any read's, and
// they show exactly what the same reads without it show.
func (s *Service) Foresee(ctx context.Context) (context.Context, *Foresight) {
	f := &Foresight{s: s, start: time.Now()}
	ctx = context.WithValue(ctx, foresightKey{}, f)
	return expr.WithClock(ctx, &f.clk), f
}

// foresightOf is the Foresight ctx's reads note in (nil: none).
func foresightOf(ctx context.Context) *Foresight {
	f, _ := ctx.Value(foresightKey{}).(*Foresight)
	return f
}

// noteRead notes when a timer next changes what rc's reader sees: the
// timers of the entries it may read, of actions, views and cooldowns
// (which every reader of the room sees), and of messages. A timer in a
// scope hidden from the reader is left out: its end changes nothing the
// reader is shown, and waking the reader then would tell when it ran out.
func (f *Foresight) noteRead(rc *roomCtx) {
	t := rc.msgs.next
	for scope, keys := range rc.snap.scopes {
		shown := scope == scopeActions || scope == scopeViews || scope == scopeCooldowns
		if !shown && !rc.visible(scope) {
			continue
		}
		for key, r := range keys {
			if !shown && rc.vis != nil && !rc.vis.Entry(scope, key) {
				continue
			}
			t = timer.Earliest(t, r.timer.nextChange(rc.now))
		}
	}
	f.timer.Note(t)
}

// Next is when the reads must be made again to show what the clock alone
// changed (zero: nothing they read changes with no write): the earliest
// timer or moment of now foreseen, or, when some use of now could not be
// foreseen (now.getHours(), say), the next step of the wait's cadence
// (WaitOptions.NowRecheck), aligned on the wall clock as the waits' are.
func (f *Foresight) Next() time.Time {
	next := f.s.nowNext(f.start, &f.clk)
	if t := f.timer.Get(); !t.IsZero() {
		// A timer's item changes at its moment exactly; read just after.
		next = timer.Earliest(next, t.Add(waitclock.Margin))
	}
	return next
}

// Watch signals changes to a room the principal may read: a value on the
// returned channel after each commit, presence change or deletion
// (coalesced: several may arrive as one), from this process or another
// (the hub's LISTEN). It is what a live page is fed by, as waits are; stop
// ends it and must be called.
func (s *Service) Watch(ctx context.Context, p *Principal, roomID string) (changes <-chan struct{}, stop func(), err error) {
	return s.watch(ctx, p, roomID, true)
}

// WatchCommits is Watch without presence-only changes (an agent's status
// or heartbeat, which commit nothing): for a watcher that reads no
// presence, which would otherwise read again on every heartbeat in the
// room (the loom's collaborator).
func (s *Service) WatchCommits(ctx context.Context, p *Principal, roomID string) (changes <-chan struct{}, stop func(), err error) {
	return s.watch(ctx, p, roomID, false)
}

func (s *Service) watch(ctx context.Context, p *Principal, roomID string, presence bool) (changes <-chan struct{}, stop func(), err error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, nil, err
	}
	sub, err := s.hub.Subscribe(ctx, roomID, presence)
	if err != nil {
		return nil, nil, err
	}
	return sub.C, sub.Close, nil
}

// waitStatements are the round trips the woken waits of a room share
// (package waitbatch batches them; the statements are the wait rule's).
func waitStatements(db *store.DB) waitbatch.Statements {
	return waitbatch.Statements{
		Head: func(ctx context.Context, roomID string) (h waitbatch.Head, err error) {
			err = db.QueryRow(ctx, `SELECT seq, message_count, created_at FROM rooms WHERE id = $1`, roomID).Scan(&h.Seq, &h.Count, &h.Born)
			return h, err
		},
		RoomCreds: func(ctx context.Context, roomID string) (room, view []byte, err error) {
			err = db.QueryRow(ctx, `SELECT token_hash, view_token_hash FROM rooms WHERE id = $1`, roomID).Scan(&room, &view)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil, nil, nil
			}
			return room, view, err
		},
		AgentCreds: func(ctx context.Context, roomID string, agents []string) (map[string]waitbatch.Cred, error) {
			rows, err := db.Query(ctx, `SELECT id, token_hash, grants FROM agents WHERE room_id = $1 AND id = ANY($2)`, roomID, agents)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			found := map[string]waitbatch.Cred{}
			for rows.Next() {
				var id string
				var c waitbatch.Cred
				if err := rows.Scan(&id, &c.Hash, &c.Grants); err != nil {
					return nil, err
				}
				found[id] = c
			}
			return found, rows.Err()
		},
		ShowWaiting: func(ctx context.Context, roomID string, ids, conds []string) (map[string]int64, error) {
			// An agent twice in one batch (two waits at once) is updated
			// once, with one of its conditions: as if the two had run one
			// after the other. The seq is read by the statement that sets
			// the status.
			var seqs map[string]int64
			err := againOnDeadlock(func() error {
				rows, err := db.Query(ctx, `UPDATE agents AS a SET status = 'waiting', waiting_on = u.cond, last_heartbeat = now()
					FROM (SELECT DISTINCT ON (id) id, cond FROM unnest($2::text[], $3::text[]) AS u(id, cond)) AS u
					WHERE a.room_id = $1 AND a.id = u.id
					RETURNING a.id, (SELECT seq FROM rooms WHERE id = $1)`, roomID, ids, conds)
				if err != nil {
					return err
				}
				defer rows.Close()
				seqs = map[string]int64{}
				for rows.Next() {
					var id string
					var seq int64
					if err := rows.Scan(&id, &seq); err != nil {
						return err
					}
					seqs[id] = seq
				}
				return rows.Err()
			})
			if err != nil {
				return nil, err
			}
			if len(seqs) > 0 {
				if err := db.Notify(ctx, roomID, store.PresenceNote); err != nil {
					return nil, err
				}
			}
			return seqs, nil
		},
		ShowActive: func(ctx context.Context, roomID string, ids []string) error {
			// A status set while the wait ran stays: idle when the person
			// stepped out of the agent or lost the room (the wait then
			// ended refused), busy from a heartbeat.
			var tag pgconn.CommandTag
			err := againOnDeadlock(func() (err error) {
				tag, err = db.Exec(ctx, `UPDATE agents SET status = 'active', waiting_on = NULL, last_heartbeat = now()
					WHERE room_id = $1 AND id = ANY($2) AND status = 'waiting'`, roomID, ids)
				return err
			})
			if err == nil && tag.RowsAffected() > 0 {
				err = db.Notify(ctx, roomID, store.PresenceNote)
			}
			return err
		},
	}
}

// againOnDeadlock runs one statement that sets many agents' statuses
// again when PostgreSQL aborted it as a deadlock's victim: it shares its
// rows with the other batches of the room (read marks, the waits starting
// and ending together), which lock them in the order each statement's
// plan meets them. Aborted, the statement changed nothing, so running it
// again is safe; without it an agent stayed "waiting" after its wait
// ended (TestManyWaitsTinyPoolEachItsOwnDelta under load).
func againOnDeadlock(run func() error) error {
	for attempt := 1; ; attempt++ {
		err := run()
		var pgErr *pgconn.PgError
		if attempt < 3 && errors.As(err, &pgErr) && pgErr.Code == "40P01" {
			continue
		}
		return err
	}
}
