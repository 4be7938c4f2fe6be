// Package roomview is what the lobby shows of a room at a glance: its
// counts, a few values or its summary view, its roles open and filled,
// and its agents' presence lapsed to idle once unseen. It is shaped over
// three of the core's reads (substrate.RoomHeads, Presences, RoomView),
// which own the rows and the read rule; what a room reads like here is
// this package's.
package roomview

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Presence is an agent as the lobby shows it: the stored presence, with
// Status "idle" for an agent not seen for the core's IdleAfter (default
// 5 minutes) whatever it last said ("done" stays done): presence lapses
// (seed 003 §II).
type Presence struct {
	substrate.Presence
	// LastSeen is LastHeartbeat relative to now: "just now", "42s ago",
	// "3m ago", "2h ago", "5d ago" (Ago).
	LastSeen string `json:"last_seen"`
	// IdleForS is how many seconds an idle agent has not been seen (set
	// only when Status is "idle").
	IdleForS *int64 `json:"idle_for_s,omitempty"`
}

// Ago words a duration as a relative time: "just now" under ten seconds,
// then seconds, minutes, hours and days, rounded down ("3m ago").
func Ago(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}

// lapse is a stored presence as the lobby shows it: unseen for idleAfter
// (or idle already), the agent shows idle, for how long it was unseen.
func lapse(a substrate.Presence, idleAfter time.Duration) Presence {
	out := Presence{Presence: a, LastSeen: Ago(a.Unseen)}
	if a.Status == "done" || (a.Status != "idle" && a.Unseen < idleAfter) {
		return out
	}
	out.Status = "idle"
	secs := max(int64(a.Unseen/time.Second), 0)
	out.IdleForS = &secs
	return out
}

// Summary is what the lobby shows of a room.
type Summary struct {
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
	Agents []Presence
	// Values are a few of _shared's scalar entries (short strings,
	// numbers, booleans), the most recently changed first: what a person
	// would choose a room by (a phase, a score, a deadline).
	Values map[string]any
	// View is the value of the room's view named summary, when it has one.
	View any
	// Busy is set when the room has a summary view the lobby did not
	// evaluate because the room has spent its expression budget: Values
	// stand in for it until the budget refills.
	Busy *Busy
	view *substrate.RoomView // for Reader
}

// SummaryView is the id of the view a room shows the lobby, if it has it.
const SummaryView = "summary"

// summaryValues is how many scalars a summary shows.
const summaryValues = 5

// Busy says why a room's summary view is not shown: the room has spent
// its expression budget (errs.RoomBusy), and when to look again.
type Busy struct {
	Code         errs.Code `json:"code"`
	RetryAfterMs int64     `json:"retry_after_ms"`
	Hint         string    `json:"hint"`
}

// Summaries summarises the given rooms (those that exist) in two
// statements plus a snapshot read for each room not in the core's cache.
// Timers apply: an expired roles entry is not a role.
func Summaries(ctx context.Context, svc *substrate.Service, ids []string) (map[string]*Summary, error) {
	return SummariesViewing(ctx, svc, ids, func(string) bool { return true })
}

// SummariesViewing is Summaries evaluating the summary view only of the
// rooms view admits: those whose summary is shown (a listing that shows
// none, like the lobby page's, costs the rooms no evaluation).
func SummariesViewing(ctx context.Context, svc *substrate.Service, ids []string, view func(room string) bool) (map[string]*Summary, error) {
	out := map[string]*Summary{}
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
		sum := &Summary{ID: id, Label: h.Label, Seq: h.Seq, Roles: map[string]map[string]any{}, Agents: []Presence{},
			Keys: map[string]int{}, Messages: h.Messages, LastActivity: h.LastActivity}
		for _, a := range agents[id] {
			sum.Agents = append(sum.Agents, lapse(a, idleAfter))
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
		if view(id) {
			if err := sum.summaryView(ctx, v); err != nil {
				return nil, err
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

// summaryView sets the value of the room's view named summary, when it
// has one: a room that says how it reads at a glance has one, and its
// value (public, its registrar's authority) stands for the scalars. One
// gated by enabled depends on the reader, which the lobby does not
// evaluate.
//
// Its evaluation is the room's to pay (substrate's PublicView): once the
// room has spent its budget, the lobby shows the room's scalars and says
// why, rather than failing the whole lobby, or a stale value that would
// read as current.
func (sum *Summary) summaryView(ctx context.Context, v *substrate.RoomView) error {
	val, ok, err := v.PublicView(ctx, SummaryView)
	switch {
	case errs.Is(err, errs.RoomBusy):
		ms, _ := errs.From(err).Details["retry_after_ms"].(int64)
		sum.Busy = &Busy{Code: errs.RoomBusy, RetryAfterMs: ms,
			Hint: "the room has spent its expression budget for now, so its summary view was not evaluated: values shows its newest scalars meanwhile; call sync_lobby again after retry_after_ms to see it"}
	case err != nil:
		return err
	case ok:
		sum.View, sum.Values = val, nil
	}
	return nil
}

// RoleIDs lists a summary's role ids in order.
func (sum *Summary) RoleIDs() []string {
	ids := make([]string, 0, len(sum.Roles))
	for id := range sum.Roles {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Reader reports, by the core's one read rule, which scopes of the
// summarised room p reads, so that what the lobby counts of a room is
// what p may read in it.
func (sum *Summary) Reader(p *substrate.Principal) func(scope string) bool {
	return sum.view.Reader(p)
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
