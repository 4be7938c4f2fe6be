package substrate

import (
	"context"
	"iter"
	"time"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/delta"
	"github.com/syncsubstrate/sync/substrate/timer"
)

// A delta (a wait's wake-up, a context read with since) is what a reader
// who read the room up to a seq has not seen of it: package delta has the
// rule. The core hands it the snapshot (deltaRoom) and reads from the
// audit log what the snapshot's revisions do not show (unseenChanges).

// deltaOf narrows env, the context rc read, to what changed after from
// (delta.Narrow), keeping in rc what the read counts as read.
func deltaOf(env *Envelope, rc *roomCtx, roomID string, from, msgsAfter int64, limit int, unseen *unseenChanges) {
	rd := delta.Reader{Self: rc.self, Now: rc.now, Say: rc.p.Say}
	ask := delta.Ask{Room: roomID, From: from, MessagesAfter: msgsAfter, Limit: limit, Unseen: unseen}
	rc.readUpTo = delta.Narrow(env, deltaRoom{rc.snap}, rd, ask, rc.readUpTo)
}

// viewsChangedUnseen are the views (of rc's) that may have changed after
// from with no newer revision of what they read by path (which a reader
// checks itself, key by key): delta.ViewsUnseen, the rule of a wait's
// delta, as salience asks it (Read.ViewsChangedUnseen).
func (s *Service) viewsChangedUnseen(ctx context.Context, rc *roomCtx, roomID string, from int64) map[string]bool {
	unseen, err := s.unseenAt(ctx, rc.snap, from)
	if err != nil {
		s.log.Warn("reading the deletions since a reader's last read", "room", roomID, "err", err)
		unseen = nil // unknown: every scope may have changed
	}
	return delta.ViewsUnseen(deltaRoom{rc.snap}, rc.self, rc.now, from, unseen)
}

// unseenChanges are the changes since a delta's seq that leave no newer
// revision in the snapshot (deletions, timers run out), as read from the
// audit log.
type unseenChanges = delta.Unseen

// maxUnseenScan bounds the audit entries a read decodes to find the
// deletions since a seq (one statement, at most this many entries).
const maxUnseenScan = 1000

// sqlUnseen reads what unseenChanges holds from the audit log, up to the
// read's seq.
const sqlUnseen = `SELECT
	(SELECT updated_at FROM state WHERE room_id = $1 AND scope = '_audit' AND sort_key IS NOT NULL AND sort_key <= $2
		ORDER BY sort_key DESC LIMIT 1),
	coalesce((SELECT array_agg(DISTINCT d->>'scope') FROM state a,
		jsonb_array_elements(CASE jsonb_typeof(a.value->'delta') WHEN 'array' THEN a.value->'delta' ELSE '[]' END) d
		WHERE a.room_id = $1 AND a.scope = '_audit' AND a.sort_key > $2 AND a.sort_key <= $3 AND NOT d ? 'after'), '{}')`

// unseenSince reads from the audit log what changed after from that the
// snapshot's revisions do not show (unseenChanges).
func (s *Service) unseenSince(ctx context.Context, roomID string, from, upTo int64) (*unseenChanges, error) {
	var at *time.Time
	u := &unseenChanges{}
	if upTo-from > maxUnseenScan {
		return u, nil // not known: a reader that far behind is told every scope may have changed
	}
	if err := s.db.QueryRow(ctx, sqlUnseen, roomID, from, upTo).Scan(&at, &u.Deleted); err != nil {
		return nil, err
	}
	if at != nil {
		u.Known, u.At = true, *at
	}
	return u, nil
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

// viewSelf is the scope a view reads as state.self: its registrar's
// agent scope (evalView), none for a communal one.
func viewSelf(def *ViewDef) string { return defs.SelfOf(def.Scope) }

// deltaRoom is a snapshot as delta's rule reads it.
type deltaRoom struct{ snap *snapshot }

// deltaEntry is what the rule reads of a row.
func deltaEntry(r *row) delta.Entry {
	return delta.Entry{Revision: r.Revision, Timer: (*timer.State)(r.timer), Enabled: r.enabled}
}

func (d deltaRoom) Rows() iter.Seq2[string, delta.Entry] {
	return func(yield func(string, delta.Entry) bool) {
		for scope, rows := range d.snap.scopes {
			for _, r := range rows {
				if !yield(scope, deltaEntry(r.row)) {
					return
				}
			}
		}
	}
}

func (d deltaRoom) Entry(scope, key string) (delta.Entry, bool) {
	r := d.snap.scopes[scope][key]
	if r == nil {
		return delta.Entry{}, false
	}
	return deltaEntry(r.row), true
}

func (d deltaRoom) Actions() iter.Seq2[string, delta.Action] {
	return func(yield func(string, delta.Action) bool) {
		for id, a := range d.snap.actions {
			if !yield(id, delta.Action{Def: a.def, Row: deltaEntry(a.r)}) {
				return
			}
		}
	}
}

func (d deltaRoom) Action(id string) (delta.Action, bool) {
	a := d.snap.actions[id]
	if a == nil {
		return delta.Action{}, false
	}
	return delta.Action{Def: a.def, Row: deltaEntry(a.r)}, true
}

func (d deltaRoom) Views() iter.Seq[delta.View] {
	return func(yield func(delta.View) bool) {
		for _, v := range d.snap.views {
			if !yield(delta.View{Def: v.def, Row: deltaEntry(v.r)}) {
				return
			}
		}
	}
}

func (d deltaRoom) Timed() iter.Seq2[string, delta.Entry] {
	return func(yield func(string, delta.Entry) bool) {
		for _, t := range d.snap.timedRows() {
			if !yield(t.scope, deltaEntry(t.r)) {
				return
			}
		}
	}
}

// timedRows are the snapshot's mutable rows with a timer that has an
// effect (the only ones a delta's timers can report), found once per
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
