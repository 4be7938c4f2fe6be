package substrate

// The core's side of adaptive salience (seed 000 §VII): the Read it
// hands salience (substrate/salienceport) filled from a context read with
// the read rule already applied, and what salience reads from rows: the
// vocabulary's usage (written by the write path) and the recent log.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/salienceport"
)

// What the core asks salience, and the read it hands it, are
// substrate/salienceport's (no room, no SQL: it answers from what the
// core filled it with); the names stay the core's API.
type (
	Salience     = salienceport.Salience
	SalienceRead = salienceport.SalienceRead
	Read         = salienceport.Read
	ReaderMarks  = salienceport.ReaderMarks
	ActionMeta   = salienceport.ActionMeta
	ViewMeta     = salienceport.ViewMeta
	Usage        = salienceport.Usage
	LogRow       = salienceport.LogRow
)

// UsageKey names an item of the vocabulary in Read.Usage.
func UsageKey(kind, id string) string { return salienceport.UsageKey(kind, id) }

// defaultDecay is the usage decay when no feature is salience.
const defaultDecay = 0.95

// decayOf is the room's usage decay, for the write path.
func (s *Service) decayOf(snap *snapshot) float64 {
	if s.wired.salience == nil {
		return defaultDecay
	}
	return s.wired.salience.Decay(snap.config())
}

// config is the value of _shared._config, nil when absent.
func (snap *snapshot) config() json.RawMessage {
	if r := snap.scopes[ScopeShared]["_config"]; r != nil {
		return r.Value
	}
	return nil
}

// salienceFor begins the read's salience: nil when no feature is
// salience or it is off for the service or the room.
func (s *Service) salienceFor(ctx context.Context, rc *roomCtx, roomID string) (SalienceRead, error) {
	if s.noSalience || s.wired.salience == nil {
		return nil, nil
	}
	return s.wired.salience.Begin(ctx, s.salienceRead(rc, roomID))
}

// salienceRead is rc as salience is handed it: the read rule applied
// here, once, by the read's own answers (actEnabled, the views shown,
// the state and visibility the read built), so salience has no read rule
// of its own.
func (s *Service) salienceRead(rc *roomCtx, roomID string) *Read {
	snap := rc.snap
	acts := make(map[string]ActionMeta, len(rc.actEnabled))
	for id, on := range rc.actEnabled {
		if a := snap.actions[id]; on && a != nil {
			acts[id] = ActionMeta{Def: a.def, Revision: a.r.Revision, UpdatedAt: a.r.UpdatedAt}
		}
	}
	views := make([]ViewMeta, 0, len(snap.views))
	for _, v := range snap.views {
		if _, shown := rc.views[v.def.ID]; shown {
			views = append(views, ViewMeta{Def: v.def, Revision: v.r.Revision})
		}
	}
	return salienceport.New(salienceport.Room{
		ID: roomID, Seq: snap.seq, Now: rc.now, Self: rc.self, Config: snap.config(), Agents: rc.agents,
		Actions: acts, Views: rc.views, ViewDefs: views, State: rc.state, Unseen: rc.msgs.unseen,
		Readable: func(scope, key string) bool { return rc.visible(scope) && (rc.p == nil || rc.vis.Entry(scope, key)) },
		Row: func(scope, key string) (int64, bool) {
			if r := snap.scopes[scope][key]; r != nil {
				return r.Revision, true
			}
			return 0, false
		},
		Keys: func(scope string) []string {
			out := make([]string, 0, len(snap.scopes[scope]))
			for k := range snap.scopes[scope] {
				out = append(out, k)
			}
			return out
		},
		Usage:     func() (map[string]*Usage, error) { return snap.usageAt(roomID) },
		RecentLog: func(ctx context.Context) ([]LogRow, error) { return s.recentLog(ctx, rc, roomID) },
		ViewsChangedUnseen: func(ctx context.Context, from int64) map[string]bool {
			return s.viewsChangedUnseen(ctx, rc, roomID, from)
		},
		Memo: snap.memoOf,
		Say:  func(args map[string]any) string { return expand(rc, roomID, args) },
		Warn: func(msg string, args ...any) { s.log.Warn(msg, append([]any{"room", roomID}, args...)...) },
	})
}

// ViewOwner is the agent whose view def is, to fix when it breaks: the
// agent of its scope, or the agent that registered a communal one; ""
// for a view registered with room authority (the room's own).
func ViewOwner(def *ViewDef) string { return defs.RegistrarOf(def.Scope, def.RegisteredBy) }

// memoOf is a value computed once per room snapshot (it changes only
// with the seq) under key, shared by every read of that snapshot
// (Read.Memo).
func (snap *snapshot) memoOf(key string, f func() any) any {
	snap.memoMu.Lock()
	if snap.memo == nil {
		snap.memo = map[string]*memoEntry{}
	}
	e := snap.memo[key]
	if e == nil {
		e = &memoEntry{}
		snap.memo[key] = e
	}
	snap.memoMu.Unlock()
	e.once.Do(func() { e.v = f() })
	return e.v
}

type memoEntry struct {
	once sync.Once
	v    any
}

// loadUsage reads the vocabulary's usage into the snapshot, once, with q:
// the read transaction that read the snapshot's seq, so the usage is the
// one at that seq (a mutation updates it in its own commit). Read after
// that transaction, it held uses committed since.
func (snap *snapshot) loadUsage(ctx context.Context, q querier) error {
	snap.usageMu.Lock()
	defer snap.usageMu.Unlock()
	if snap.usage != nil {
		return nil
	}
	u, err := loadUsage(ctx, q, snap.room)
	if err != nil {
		return err
	}
	snap.usage = u
	return nil
}

// usageAt is the room's vocabulary usage at the snapshot's seq, read
// once per snapshot by the transaction that read the seq
// (snapshot.loadUsage): readRoom loads it on its long path and takes a
// cached snapshot only with it (readReady), and every Read is made from
// a readRoom's snapshot (Context, Wait, ListViews). A snapshot without it
// did not come from there (one a mutation advanced, say): loading it now
// could hold uses committed after the read's seq (an invocation named by
// since_your_last_read whose effects the read does not show), so that is
// an error, not a late load. Once loaded the map is never written again.
func (snap *snapshot) usageAt(roomID string) (map[string]*Usage, error) {
	snap.usageMu.Lock()
	defer snap.usageMu.Unlock()
	if snap.usage == nil {
		return nil, fmt.Errorf("substrate: the vocabulary usage of room %q at seq %d was not read with the snapshot (a read must come from readRoom)", roomID, snap.seq)
	}
	return snap.usage, nil
}

// windowSize is how many recent entries of each log RecentLog reads.
const windowSize = 500

// recentLog is the newest windowSize entries of each of the room's logs
// up to rc's seq, its messages those rc's reader sees (Read.RecentLog).
func (s *Service) recentLog(ctx context.Context, rc *roomCtx, roomID string) ([]LogRow, error) {
	unseen := rc.msgs.unseen
	if unseen == nil {
		unseen = []int64{}
	}
	rows, err := s.db.Query(ctx, sqlLogWindow, roomID, windowSize, rc.snap.seq, unseen)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []LogRow
	for rows.Next() {
		var e LogRow
		if err := rows.Scan(&e.Scope, &e.Seq, &e.Value, &e.Writer); err != nil {
			return out, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// loadUsage reads the room's vocabulary usage.
func loadUsage(ctx context.Context, q querier, roomID string) (map[string]*Usage, error) {
	rows, err := q.Query(ctx, sqlUsage, roomID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]*Usage{}
	for rows.Next() {
		var kind, id string
		var u Usage
		var last *int64
		if err := rows.Scan(&kind, &id, &u.Uses, &last, &u.Score, &u.ReadsAtUse); err != nil {
			return nil, err
		}
		if last != nil {
			u.LastUsedSeq = *last
		}
		out[UsageKey(kind, id)] = &u
	}
	return out, rows.Err()
}

// vocabTouch records, in a mutation, that an action or view was used
// (invoked, or read by an invoked action's expressions) or registered.
type vocabTouch struct {
	kind, id string
	use      bool
}

// touchVocabulary queues the mutation's vocabulary uses at seq: uses and
// last use move for what was used; every touched item's score is decayed
// to now and reinforced by one. reads are the room's context reads as a
// read's salience counts them (mutation.roomReads): the reads at the use.
func (m *mutation) touchVocabulary(seq int64, decay float64, reads int64) {
	if len(m.vocab) == 0 {
		return
	}
	kinds := make([]string, len(m.vocab))
	ids := make([]string, len(m.vocab))
	uses := make([]bool, len(m.vocab))
	for i, t := range m.vocab {
		kinds[i], ids[i], uses[i] = t.kind, t.id, t.use
	}
	m.batch.Queue(sqlTouchVocabulary, m.room, kinds, ids, uses, seq, m.now, decay, reads)
}

// ViewRefs are the ids of the views src names (views.<id>, views["id"]),
// in order, repeats included. Shared between callers: read-only.
func ViewRefs(src string) []string { return defs.FactsOf(src).Views }

// StatePaths are the state entries src names by path (state.<scope>.<key>,
// .?key or ["key"]): scope and key, in order. Shared between callers:
// read-only.
func StatePaths(src string) [][2]string { return defs.FactsOf(src).Paths }

// ViewSelf is the scope a view reads as state.self ("" for a communal
// one).
func ViewSelf(def *ViewDef) string { return viewSelf(def) }

// viewsReadBy are the ids of the views the action's expressions read.
func viewsReadBy(def *ActionDef) []string {
	srcs := []string{def.If, def.Enabled, def.Result}
	for _, w := range def.Writes {
		if w.Expr {
			raw, _ := json.Marshal(w.Value)
			srcs = append(srcs, string(raw))
			raw, _ = json.Marshal(w.Merge)
			srcs = append(srcs, string(raw))
		}
	}
	seen := map[string]bool{}
	var out []string
	for _, src := range srcs {
		for _, id := range ViewRefs(src) {
			if !seen[id] && id != viewContested && id != ViewHealth {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	return out
}
