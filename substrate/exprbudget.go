package substrate

import (
	"context"
	"sync"
	"time"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
)

// Work, not requests, is limited (issue 25 item 4). A request's cost to
// the server is mostly the expressions it makes it evaluate: a context
// read of a room full of entries gated on `now` evaluates every gate, up
// to the per-read budget (Limits.EnabledCostPerRead, tens of ms of CPU),
// and a handful of agent tokens reading at a modest rate kept two cores
// busy. So each room has a budget of expression cost per second
// (Limits.RoomCostPerSecond): every evaluation made for the room's reads
// and invocations is charged to it (at least gateMinCost each, its fixed
// overhead), and once it is spent those requests are refused with 429
// room_busy and Retry-After until it refills. Memoised results cost
// nothing, so a quiet room never meets the budget, and one room's flood
// cannot take another room's CPU.
//
// Those who only watch a room draw on budgets of their own in it: its
// signed-in observers (read-only principals the lobby makes: observers,
// owners reading with admin access) half the members' (guestShare), and
// its view link (the view token, on the room page or the API) a quarter
// (viewLinkShare). A view link can be handed to anyone; with one budget
// for all, its holder's reads would spend what the room's members need
// and lock the owner out of their own room, and with one for every
// watcher, what its signed-in observers need (issue 41 item 5). Separate
// buckets, not a reserve in one: requests are charged after they are
// admitted, so many admitted at once would overdraw a shared bucket far
// past any reserve.
// The budgets are per process: each protects its own process's CPU. The
// token buckets are substrate/internal/workmeter's; the rule (what is
// charged, to whose budget, and the refusal) is here.

// guestShare is the signed-in observers' budget in a room, and
// viewLinkShare its view link's, as shares of the members'
// (Limits.RoomCostPerSecond).
const (
	guestShare    = 0.5
	viewLinkShare = 0.25
)

// work admits a request of p that will evaluate expressions in roomID and
// returns the context that charges them to the room (its members' budget,
// its observers' or its view link's: budgetKey). Refused, it is 429
// room_busy with the wait in retry_after_ms (the REST adapter's
// Retry-After).
//
// A context already admitted for the same budget (a wait's re-reads, a
// read made inside an invocation) is not asked again: a request admitted
// finishes.
//
// done ends the request's use of the budget; the caller defers it. It is
// not tied to ctx's end: a live page or a collaborator makes call after
// call on one context that lives for hours, and a release registered on it
// per call (context.AfterFunc) piled up until it ended (the soak of issue
// 32 saw 9,700 goroutines start when four pages closed).
//
// Every public entry that evaluates expressions for a room admits once, at
// its start, and passes the returned context down; readCtx refuses a
// context that was not (admitted), so an entry that forgets is an error in
// every test that calls it, not an unmetered read.
func (s *Service) work(ctx context.Context, p *Principal, roomID string) (_ context.Context, done func(), _ error) {
	key, share, whose := budgetKey(p, roomID)
	if k, _ := ctx.Value(workKey{}).(string); k == key {
		return ctx, func() {}, nil
	}
	if s.workMeter == nil {
		// Marked all the same: with the budget off, admitted still tells
		// an entry that admitted from one that forgot to.
		return context.WithValue(ctx, workKey{}, key), func() {}, nil
	}
	b, wait, ok := s.workMeter.Admit(key, share, time.Now())
	if !ok {
		s.roomBusy.Add(1)
		secs := int(wait/time.Second) + 1
		limit := int(float64(s.lim.RoomCostPerSecond) * share)
		return ctx, func() {}, errs.New(errs.RoomBusy, "room %q has spent its expression budget for %s for now (%d cel-go cost per second, shared by all of them)", roomID, whose, limit).
			With("retry_after_ms", max(wait.Milliseconds(), 1)).With("limit", limit).
			WithHint("retry after %d s; wait for changes instead of polling, and keep gates and views that read now or agents few and cheap", secs)
	}
	var once sync.Once
	ctx = context.WithValue(ctx, workKey{}, key)
	return expr.WithMeter(ctx, func(cost uint64) {
		b.Charge(int64(max(cost, gateMinCost)))
	}), func() { once.Do(b.Release) }, nil
}

// workKey marks a context admitted (and metered) for a room's budget.
type workKey struct{}

// budgetKey is the budget p's requests in roomID draw on: the room's
// members', its view link's (a principal authenticated with the view
// token) or its observers' (every other read-only principal: the lobby's,
// which carry no token).
func budgetKey(p *Principal, roomID string) (key string, share float64, whose string) {
	switch {
	case p != nil && p.Kind == KindView && p.TokenHash() != nil:
		return roomID + "\x00view-link", viewLinkShare, "its view link (all who hold it)"
	case p != nil && p.ReadOnly():
		return roomID + "\x00read-only", guestShare, "its signed-in observers"
	}
	return roomID, 1, "its members"
}

// admitted reports whether ctx was admitted (work) for the budget p's
// requests in roomID draw on.
func admitted(ctx context.Context, p *Principal, roomID string) bool {
	key, _, _ := budgetKey(p, roomID)
	k, _ := ctx.Value(workKey{}).(string)
	return k == key
}

// notAdmitted is readCtx's answer to a context no entry admitted: a bug
// (an entry that reads a room without charging it), loud in every test
// that reaches it, and logged in production rather than served unmetered.
func (s *Service) notAdmitted(roomID string) error {
	s.log.Error("a room context was read on a request not admitted to the room's expression budget: its entry must call work first", "room", roomID)
	return errs.New(errs.Internal, "internal error: the read was not admitted to room %q's expression budget", roomID).
		WithHint("retry later; if it persists, report it with the time of the request")
}
