package substrate

// What an expression's source names, found once per source. A context
// read of an agent asks, for every view of the room, whether it reads the
// clock, agents or messages, which scopes, views and state entries it names
// (since_your_last_read, a wait's delta): regular expressions over the same
// few sources on every read were a seventh of an agent's read. The answers
// depend on the source text alone, never on a reader or a room, so one
// process-wide table serves every read.

import (
	"context"
	"regexp"
	"slices"

	"github.com/syncsubstrate/sync/substrate/internal/memo"
)

// srcFacts is what one expression's source names. Shared: read-only.
type srcFacts struct {
	anyTime bool        // readsAnyTime
	scopes  []string    // scopeRef: the scopes read (state.x, state.?x)
	views   []string    // viewRefs: the views named, in order, repeats included
	paths   [][2]string // statePath: scope and key of each entry named
	// actions are the actions named (actions.<id>, actions.?<id>,
	// actions["id"]); allActions: actions read whole (passed along,
	// iterated, counted), which any action's change may change.
	actions    []string
	allActions bool
	// wholeState: state read whole (passed along, iterated) or by a
	// computed name (state[x]), so any scope may be read.
	wholeState bool
}

// actionRef finds each use of actions and the action it names, if any.
// It may match a string literal: a delta may show too much, never too
// little.
var actionRef = regexp.MustCompile(`(^|[^.\w])actions\b\s*(?:\.\s*\??\s*([A-Za-z_]\w*)|\[\s*"([^"\\]+)"\s*\])?`)

// stateComputed finds state read by a computed scope name.
var stateComputed = regexp.MustCompile(`(^|[^.\w])state\s*\[`)

// srcFactsTable is every source's facts, process-wide: they depend on
// the source text alone. Past maxSrcFacts it starts over.
var srcFactsTable = memo.NewTable[string, *srcFacts](maxSrcFacts)

// maxSrcFacts bounds the table (sources are few per room, rooms many).
const maxSrcFacts = 8192

// factsOf is what src names (an empty source names nothing).
func factsOf(src string) *srcFacts {
	if src == "" {
		return &noFacts
	}
	return srcFactsTable.Get(src, scanFacts)
}

var noFacts srcFacts

// scanFacts reads src with the regular expressions (the one place they
// run over an expression's source for these questions).
func scanFacts(src string) *srcFacts {
	f := &srcFacts{anyTime: scanReadsAnyTime(src), wholeState: stateComputed.MatchString(src)}
	for _, m := range stateUse.FindAllStringSubmatch(src, -1) {
		switch m[3] {
		case "", "all", "exists", "exists_one", "map", "filter":
			f.wholeState = true
		}
	}
	for _, m := range scopeRef.FindAllStringSubmatch(src, -1) {
		f.scopes = append(f.scopes, m[1])
	}
	for _, m := range viewRefs.FindAllStringSubmatch(src, -1) {
		f.views = append(f.views, m[1]+m[2])
	}
	for _, m := range statePath.FindAllStringSubmatch(src, -1) {
		f.paths = append(f.paths, [2]string{m[1], m[2]})
	}
	for _, m := range actionRef.FindAllStringSubmatch(src, -1) {
		switch id := m[2] + m[3]; id {
		case "", "all", "exists", "exists_one", "map", "filter":
			f.allActions = true
		default:
			f.actions = append(f.actions, id)
		}
	}
	// Every reader gets these very slices (ViewRefs, StatePaths): clipped,
	// an append by one of them copies instead of writing into the
	// table's spare capacity under another reader.
	f.scopes, f.views, f.paths = slices.Clip(f.scopes), slices.Clip(f.views), slices.Clip(f.paths)
	return f
}

// maxUnseenMemo bounds the unseenChanges a snapshot keeps (one per
// distinct "since" its readers asked about).
const maxUnseenMemo = 64

// unseenAt is unseenSince(from, snap.seq), read once per snapshot and
// from: what the audit log holds up to the snapshot's seq does not change
// (a mutation makes a new snapshot), and every agent reading an unchanged
// room asks the same question, since its own last read (the snapshot's
// seq). An error is not kept.
func (s *Service) unseenAt(ctx context.Context, snap *snapshot, from int64) (*unseenChanges, error) {
	if u, ok := snap.unseen.Get(from); ok {
		return u, nil
	}
	u, err := s.unseenSince(ctx, snap.room, from, snap.seq)
	if err != nil {
		return nil, err
	}
	snap.unseen.Keep(from, u, maxUnseenMemo)
	return u, nil
}

// timedRows are the snapshot's mutable rows with a timer that has an
// effect (the only ones unseenChanges.ranOut can report), found once per
// snapshot: every agent's read asks, and most rooms have none among
// hundreds of rows.
func (snap *snapshot) timedRows() []scopedRow {
	snap.timedOnce.Do(func() {
		for scope, rows := range snap.scopes {
			for _, r := range rows {
				if r.timer != nil && r.timer.Effect != nil {
					snap.timed = append(snap.timed, scopedRow{scope, r.row})
				}
			}
		}
	})
	return snap.timed
}

// scopedRow is a row and the scope the snapshot holds it in.
type scopedRow struct {
	scope string
	r     *row
}
