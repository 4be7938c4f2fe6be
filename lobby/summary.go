package lobby

import (
	"context"
	"sort"
	"time"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// The lobby's summary of a room, shaped here from the core's reads
// (substrate.RoomHeads, Presences, RoomView): the core owns the rows,
// the lobby decides what a room reads like at a glance.

// RoomSummary is what the lobby shows of a room.
type RoomSummary struct {
	ID    string
	Label string // meta.label
	Seq   int64
	// SharedKeys counts the live mutable keys of _shared.
	SharedKeys int
	// Keys counts the live mutable keys of each scope (entries an
	// enabled expression gates are not counted: who may see them depends
	// on the reader). Messages is the room's message count.
	Keys     map[string]int
	Messages int64
	// LastActivity is when the room last changed (its newest _audit
	// entry), or its creation.
	LastActivity time.Time
	// Roles are the live _shared.roles entries (role id → its object)
	// whose ids a role may take (not a person's, see EmbodyRole).
	Roles  map[string]map[string]any
	Agents []substrate.Presence
	// Values are a few of _shared's scalar entries (short strings,
	// numbers, booleans), the most recently changed first: what a person
	// would choose a room by (a phase, a score, a deadline).
	Values map[string]any
	// View is the value of the room's view named summary, when it has one.
	View any
	// Busy is set when the room has a summary view the lobby did not
	// evaluate because the room has spent its expression budget: Values
	// stand in for it until the budget refills.
	Busy *SummaryBusy
	view *substrate.RoomView // for Reader
}

// SummaryView is the id of the view a room shows the lobby, if it has it.
const SummaryView = "summary"

// summaryValues is how many scalars a summary shows.
const summaryValues = 5

// SummaryBusy says why a room's summary view is not shown: the room has
// spent its expression budget (errs.RoomBusy), and when to look again.
type SummaryBusy struct {
	Code         errs.Code `json:"code"`
	RetryAfterMs int64     `json:"retry_after_ms"`
	Hint         string    `json:"hint"`
}

// RoomSummaries summarises the given rooms (those that exist) in two
// statements plus a snapshot read for each room not in the core's cache.
// Timers apply: an expired roles entry is not a role.
func RoomSummaries(ctx context.Context, svc *substrate.Service, ids []string) (map[string]*RoomSummary, error) {
	return roomSummaries(ctx, svc, ids, func(string) bool { return true })
}

// roomSummaries is RoomSummaries evaluating the summary view only of the
// rooms view admits: those whose summary is shown (a listing that shows
// none, like the lobby page's, costs the rooms no evaluation).
func roomSummaries(ctx context.Context, svc *substrate.Service, ids []string, view func(room string) bool) (map[string]*RoomSummary, error) {
	out := map[string]*RoomSummary{}
	if len(ids) == 0 {
		return out, nil
	}
	heads, err := svc.RoomHeads(ctx, ids)
	if err != nil {
		return nil, err
	}
	agents, err := svc.Presences(ctx, ids)
	if err != nil {
		return nil, err
	}
	idleAfter := svc.IdleAfter()
	for id, h := range heads {
		sum := &RoomSummary{ID: id, Label: h.Label, Seq: h.Seq, Roles: map[string]map[string]any{}, Agents: []substrate.Presence{},
			Keys: map[string]int{}, Messages: h.Messages, LastActivity: h.LastActivity}
		for _, a := range agents[id] {
			lapse(&a, idleAfter)
			sum.Agents = append(sum.Agents, a)
		}
		v, err := svc.RoomView(ctx, h)
		if err != nil {
			return nil, err
		}
		sum.view = v
		live := v.Live()
		for scope, keys := range live {
			if len(keys) > 0 {
				sum.Keys[scope] = len(keys)
			}
		}
		shared := live[substrate.ScopeShared]
		sum.SharedKeys = len(shared)
		sum.Values = scalarsOf(shared, func(k string) int64 { return v.Revision(substrate.ScopeShared, k) })
		// A room that says how it reads at a glance has a view named
		// summary: its value (public, its registrar's authority) stands
		// for the scalars. One gated by enabled depends on the reader,
		// which the lobby does not evaluate.
		//
		// Its evaluation is the room's to pay (substrate's PublicView):
		// once the room has spent its budget, the lobby shows the room's
		// scalars and says why, rather than failing the whole lobby, or
		// a stale value that would read as current.
		if view(id) {
			val, ok, err := v.PublicView(ctx, SummaryView)
			switch {
			case errs.Is(err, errs.RoomBusy):
				ms, _ := errs.From(err).Details["retry_after_ms"].(int64)
				sum.Busy = &SummaryBusy{Code: errs.RoomBusy, RetryAfterMs: ms,
					Hint: "the room has spent its expression budget for now, so its summary view was not evaluated: values shows its newest scalars meanwhile; call sync_lobby again after retry_after_ms to see it"}
			case err != nil:
				return nil, err
			case ok:
				sum.View, sum.Values = val, nil
			}
		}
		if roles, ok := shared["roles"].(map[string]any); ok {
			for id, r := range roles {
				// An id no role may take (a person's, with ":", or no
				// agent id at all) is not offered: filling it is refused
				// (EmbodyRole), and listing "bob:web" as an open role
				// would invite people to try.
				if !svc.RoleIDValid(id) {
					continue
				}
				if m, ok := r.(map[string]any); ok {
					sum.Roles[id] = m
				}
			}
		}
		out[id] = sum
	}
	return out, nil
}

// RoleIDs lists a summary's role ids in order.
func (r *RoomSummary) RoleIDs() []string {
	ids := make([]string, 0, len(r.Roles))
	for id := range r.Roles {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Reader reports, by the core's one read rule, which scopes of the
// summarised room p reads, so that what the lobby counts of a room is
// what p may read in it.
func (r *RoomSummary) Reader(p *substrate.Principal) func(scope string) bool {
	return r.view.Reader(p)
}

// lapse applies presence lapse to a stored status: unseen for idleAfter
// (or idle already), the agent shows idle, for how long it was unseen
// ("done" stays done; seed 003 §II).
func lapse(a *substrate.Presence, idleAfter time.Duration) {
	a.LastSeen = substrate.Ago(a.Unseen)
	if a.Status == "done" || (a.Status != "idle" && a.Unseen < idleAfter) {
		return
	}
	a.Status = "idle"
	secs := max(int64(a.Unseen/time.Second), 0)
	a.IdleForS = &secs
}

// scalarsOf picks the newest few short scalar entries of a scope, by
// their revisions.
func scalarsOf(vals map[string]any, rev func(key string) int64) map[string]any {
	var keys []string
	for k, v := range vals {
		switch x := v.(type) {
		case string:
			if len(x) <= 80 {
				keys = append(keys, k)
			}
		case bool, int64, float64:
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if rev(keys[i]) != rev(keys[j]) {
			return rev(keys[i]) > rev(keys[j])
		}
		return keys[i] < keys[j]
	})
	if len(keys) == 0 {
		return nil
	}
	out := map[string]any{}
	for _, k := range keys[:min(len(keys), summaryValues)] {
		out[k] = vals[k]
	}
	return out
}
