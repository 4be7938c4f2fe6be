// Package exprbudget is the rule of a room's expression budget: whose
// budget a request draws on, what is charged to it, and the refusal once
// it is spent. The token buckets beneath it are
// substrate/internal/workmeter's; who the reader is (its principal) is
// the core's, which asks Of for the reader's budget.
//
// Work, not requests, is limited (issue 25 item 4). A request's cost to
// the server is mostly the expressions it makes it evaluate: a context
// read of a room full of entries gated on `now` evaluates every gate, up
// to the per-read budget (Limits.EnabledCostPerRead, tens of ms of CPU),
// and a handful of agent tokens reading at a modest rate kept two cores
// busy. So each room has a budget of expression cost per second
// (Limits.RoomCostPerSecond): every evaluation made for the room's reads
// and invocations is charged to it (at least MinCost each, its fixed
// overhead), and once it is spent those requests are refused
// with 429 room_busy and Retry-After until it refills. Memoised results
// cost nothing, so a quiet room never meets the budget, and one room's
// flood cannot take another room's CPU.
//
// Those who only watch a room draw on budgets of their own in it: its
// signed-in observers (read-only principals the lobby makes: observers,
// owners reading with admin access) half the members' (GuestShare), and
// its view link (the view token, on the room page or the API) a quarter
// (ViewLinkShare). A view link can be handed to anyone; with one budget
// for all, its holder's reads would spend what the room's members need
// and lock the owner out of their own room, and with one for every
// watcher, what its signed-in observers need (issue 41 item 5). Separate
// buckets, not a reserve in one: requests are charged after they are
// admitted, so many admitted at once would overdraw a shared bucket far
// past any reserve.
// The budgets are per process: each protects its own process's CPU.
package exprbudget

import (
	"context"
	"sync"
	"time"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/internal/workmeter"
)

// MinCost is the least an evaluation counts against a budget, the
// room's or a read's, whatever its cel-go cost (which is 0 for a
// constant): the fixed cost of an evaluation (activation, deadline,
// conversion), about 3 µs, is that of some 100 units. It makes a budget
// bound how many gates run.
const MinCost = 100

// GuestShare is the signed-in observers' budget in a room, and
// ViewLinkShare its view link's, as shares of the members'
// (Limits.RoomCostPerSecond).
const (
	GuestShare    = 0.5
	ViewLinkShare = 0.25
)

// Budget is one of a room's budgets: its key in the meter, its share of
// the members' rate, and whose it is (for the refusal).
type Budget struct {
	Key   string
	Share float64
	Whose string
}

// Of is the budget a reader's requests in roomID draw on: the room's
// members', its view link's (viewLink: a reader authenticated with the
// view token) or its observers' (every other read-only reader: the
// lobby's, which carry no token).
func Of(roomID string, viewLink, readOnly bool) Budget {
	switch {
	case viewLink:
		return Budget{roomID + "\x00view-link", ViewLinkShare, "its view link (all who hold it)"}
	case readOnly:
		return Budget{roomID + "\x00read-only", GuestShare, "its signed-in observers"}
	}
	return Budget{roomID, 1, "its members"}
}

// Admit admits a request that will evaluate expressions in roomID
// against b and returns the context that charges them to it (each
// evaluation at least MinCost), in m's buckets refilling at perSecond
// times b's share (m nil: the budget is off). Refused, it is 429
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
func Admit(ctx context.Context, m *workmeter.Meter, b Budget, roomID string, perSecond int, now time.Time) (_ context.Context, done func(), _ error) {
	if Admitted(ctx, b) {
		return ctx, func() {}, nil
	}
	if m == nil {
		// Marked all the same: with the budget off, admitted still tells
		// an entry that admitted from one that forgot to.
		return context.WithValue(ctx, admittedKey{}, b.Key), func() {}, nil
	}
	bucket, wait, ok := m.Admit(b.Key, b.Share, now)
	if !ok {
		secs := int(wait/time.Second) + 1
		limit := int(float64(perSecond) * b.Share)
		return ctx, func() {}, errs.New(errs.RoomBusy, "room %q has spent its expression budget for %s for now (%d cel-go cost per second, shared by all of them)", roomID, b.Whose, limit).
			With("retry_after_ms", max(wait.Milliseconds(), 1)).With("limit", limit).
			WithHint("retry after %d s; wait for changes instead of polling, and keep gates and views that read now or agents few and cheap", secs)
	}
	var once sync.Once
	ctx = context.WithValue(ctx, admittedKey{}, b.Key)
	return expr.WithMeter(ctx, func(cost uint64) {
		bucket.Charge(int64(max(cost, MinCost)))
	}), func() { once.Do(bucket.Release) }, nil
}

// admittedKey marks a context admitted (and metered) for a budget.
type admittedKey struct{}

// Admitted reports whether ctx was admitted (Admit) for b.
func Admitted(ctx context.Context, b Budget) bool {
	k, _ := ctx.Value(admittedKey{}).(string)
	return k == b.Key
}
