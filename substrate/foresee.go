package substrate

// What a live reader (a person's room page) must know to keep showing a
// room as it is: the next moment the room as it read it changes with no
// write behind it. No commit, and so no notification, marks an entry's,
// action's or view's timer starting or ending, a cooldown ending, a
// message's timer, or now passing a moment a gate, view or `enabled`
// compares it with. A reader that foresees reads with a context from
// Foresee: every read made with it notes those moments (the timers of the
// room it read, and, through an expr.Clock, the moments now changes a
// comparison of what it evaluated), as a wait's read does for the wait.

import (
	"context"
	"time"

	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/internal/earliest"
)

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
			if n := r.timer.nextChange(rc.now); !n.IsZero() && (t.IsZero() || n.Before(t)) {
				t = n
			}
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
		t = t.Add(clockMargin)
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}
