package substrate

// Reusing a built context. build() evaluates a room's state gates, action
// enablement and availability, and views for one reader; in a room whose
// expressions read neither now, agents nor messages (the common room),
// the result depends only on the snapshot at its timer epoch (liveState)
// and on the reader's authority: which scopes it reads and who it is
// (self). Reads with the same authority then share one build; what
// changes without a new seq (presence, unread counts) is still read and
// laid over per read.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/internal/buildcache"
)

// builtCtx is what build computed for one authority at one liveState.
// Its maps are shared between reads: read-only.
type builtCtx struct {
	state       map[string]any
	modified    map[string]bool
	gatesHidden int
	gates       gateBudget
	views       map[string]any
	viewOrder   []string
	viewCost    uint64
	actEnabled  map[string]bool
	actAvail    map[string]bool
	actions     map[string]any
	actionCost  uint64
	authority   map[string]map[string]any
}

// buildPure reports whether build's result at this snapshot depends on
// nothing but the liveState and the reader's authority: no action, view or
// entry gate reads now, agents or (actions) the reader's messages; no
// definition has a timer of its own and no cooldown runs (their expiry is
// not part of the liveState's epoch).
func (snap *snapshot) buildPure(s *Service) bool {
	snap.pureOnce.Do(func() {
		snap.pure = snap.computePure(s)
	})
	return snap.pure
}

func (snap *snapshot) computePure(s *Service) bool {
	if len(snap.scopes[scopeCooldowns]) > 0 {
		return false
	}
	timeless := func(src string, messages bool) bool {
		if src == "" {
			return true
		}
		p, err := s.cel.Compile(src)
		if err != nil {
			return true // a compile error is a constant outcome
		}
		return !p.Uses("now") && !p.Uses("agents") && !(messages && p.UsesMessages)
	}
	for _, a := range snap.actions {
		if a.r.timer != nil || !timeless(a.def.Enabled, true) || !timeless(a.def.If, true) {
			return false
		}
	}
	for _, v := range snap.views {
		if v.r.timer != nil {
			return false
		}
		for _, p := range []*expr.Program{v.prog, v.enabledProg} {
			if p != nil && (p.Uses("now") || p.Uses("agents")) {
				return false
			}
			if p != nil && p.UsesMessages {
				snap.viewsMsgs = true
			}
		}
	}
	for scope, rows := range snap.scopes {
		if isHidden(scope) {
			continue
		}
		for _, r := range rows {
			if r.enabled != nil && !timeless(*r.enabled, false) {
				return false
			}
		}
	}
	return true
}

// buildKey names the reader's authority for build: who it is, the
// scopes it reads (as the read rule decides them, rules included), what
// the read rules let it see within them (ruleKey) and,
// when a view reads messages, the reader's message counts; ok is
// false when the read cannot share a build (presence with enabled
// expressions, which spend the read's gate budget per read; gated unread
// messages, likewise).
func (rc *roomCtx) buildKey(live *liveState) (string, bool) {
	for _, a := range rc.agents {
		if a.Enabled != nil {
			return "", false
		}
	}
	if len(rc.msgs.gated) > 0 {
		return "", false
	}
	msgs := ""
	if rc.snap.viewsMsgs {
		// Views read the reader's own message counts: builds are shared
		// only by readers with the same counts, and not when a hidden
		// message may make this reader's count differ from the raw one
		// (its gate may read now or agents, which the key cannot hold).
		if len(rc.msgs.hidden) > 0 {
			return "", false
		}
		msgs = fmt.Sprintf("\x00#%d/%d/%d", rc.msgs.Count, rc.msgs.Unread, rc.msgs.Directed)
	}
	// What the read rules hide within the scopes read (an agent's
	// operational memory, from all but the agent and room authority) is
	// part of the authority: the room token and a view link read the same
	// scopes and see different entries in them.
	rules, ok := rc.ruleKey()
	if !ok {
		return "", false
	}
	scopes := make([]string, 0, len(live.vals))
	for sc := range live.vals {
		if rc.visible(sc) {
			scopes = append(scopes, sc)
		}
	}
	slices.Sort(scopes)
	return rc.self + "\x00" + strings.Join(scopes, "\x00") + msgs + "\x00\x00" + rules, true
}

// buildShared is build for a context read: a build of the same authority
// at the same liveState is reused when the snapshot allows it.
func (s *Service) buildShared(ctx context.Context, snap *snapshot, p *Principal, agents []presence, msgs msgCounts, now time.Time) *roomCtx {
	if p == nil || !snap.buildPure(s) {
		return s.build(ctx, snap, p, agents, msgs, now, nil)
	}
	live := snap.live(now)
	probe := &roomCtx{now: now, snap: snap, p: p, agents: agents, msgs: msgs}
	if p.Kind == KindAgent {
		probe.self = p.AgentID
	}
	key, ok := probe.buildKey(live)
	if !ok {
		return s.build(ctx, snap, p, agents, msgs, now, nil)
	}
	b, ok := live.built.Get(key)
	if !ok {
		rc := s.build(ctx, snap, p, agents, msgs, now, nil)
		if snap.live(now) != live || rc.budget().cut > 0 || rc.viewsCut > 0 || len(rc.actionsCut) > 0 {
			return rc // a budget ran out: what it hid may differ next time
		}
		b = &builtCtx{state: rc.state, modified: rc.modified, gatesHidden: rc.gatesHidden, gates: *rc.budget(),
			views: maps.Clone(rc.views), viewOrder: rc.viewOrder, viewCost: rc.viewCost,
			actEnabled: rc.actEnabled, actAvail: rc.actAvail, actions: rc.vars.Actions, actionCost: rc.actionCost,
			authority: maps.Clone(rc.authority)}
		// What the build holds beyond the snapshot (the scopes a gate added
		// to or a read rule took from, in maps of its own) is what keeping
		// it costs: the reader's state and its registrars'.
		copies := buildcache.Copied(live.vals, append([]map[string]any{rc.state}, slices.Collect(maps.Values(rc.authority))...)...)
		live.built.Keep(key, b, copies, live.liveEntries)
		return rc
	}
	rc := probe
	gates := b.gates
	rc.state, rc.modified, rc.gatesHidden, rc.gates = b.state, b.modified, b.gatesHidden, &gates
	// The envelope and its annotations may change the views map (a
	// system view added, a delta's deletions): each read its own copy.
	rc.views, rc.viewOrder, rc.viewCost = maps.Clone(b.views), b.viewOrder, b.viewCost
	rc.actEnabled, rc.actAvail, rc.actionCost = b.actEnabled, b.actAvail, b.actionCost
	rc.authority = maps.Clone(b.authority)
	// The hidden messages are the snapshot's; which of them this reader
	// may not see is its own (their gates read self, now, agents): its
	// messages.count is derived per read, as build does.
	s.uncountHidden(clockFor(ctx, "messages"), rc)
	rc.vars = expr.Vars{
		State:    rc.state,
		Agents:   rc.visibleAgents(clockFor(ctx, "agents"), s),
		Messages: envelope.MessagesVar(rc.msgs.Count, rc.msgs.Unread, rc.msgs.Directed),
		Self:     rc.self,
		Now:      now,
		Actions:  b.actions,
		Views:    rc.views,
	}
	return rc
}
