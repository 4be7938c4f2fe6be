package substrate

import (
	"context"
	"slices"
	"strings"

	"github.com/syncsubstrate/sync/substrate/timer"
)

// messages.count follows the read rule of the messages themselves: a
// message whose `enabled` gate hides it from the reader, or whose timer
// ran out, is not counted (the room's message_count holds them all, until
// the janitor purges expired ones). Rooms seldom gate or time messages,
// so the few that are are read once per snapshot and message count, and
// their gates evaluated per reader as log pages evaluate them (logGate).

// hiddenMsg is a message that some reader, at some time, may not see.
type hiddenMsg struct {
	seq   int64
	gate  *string
	timer *timerState // nil: none
}

// sqlHiddenMessages lists the messages up to a seq with a gate or a timer.
const sqlHiddenMessages = `SELECT sort_key, enabled_expr, timer_effect, timer_expires_at, timer_ticks_left FROM state
	WHERE room_id = $1 AND scope = '_messages' AND sort_key IS NOT NULL AND sort_key <= $2
		AND (enabled_expr IS NOT NULL OR timer_effect IS NOT NULL)`

// hiddenAt is the hidden-message list hiddenMessages read at this
// snapshot and message count (nil when none was read, or none is hidden).
func (snap *snapshot) hiddenAt(count int64) []hiddenMsg {
	h, _ := snap.hidden.Get(count)
	return h
}

// readReady reports whether a read may take this snapshot without a
// transaction of its own: what must be read at the snapshot's seq (the
// vocabulary's usage, the hidden messages at this count) already is.
func (snap *snapshot) readReady(count int64) bool {
	snap.usageMu.Lock()
	usage := snap.usage != nil
	snap.usageMu.Unlock()
	_, hidden := snap.hidden.Get(count)
	return usage && hidden
}

// hiddenMessages are the room's gated or timed messages at snap, read with
// q (the caller's transaction) once per snapshot and message count (the
// janitor changes the count, not the seq).
func (s *Service) hiddenMessages(ctx context.Context, q querier, snap *snapshot, count int64) ([]hiddenMsg, error) {
	if h, ok := snap.hidden.Get(count); ok {
		return h, nil
	}
	rows, err := q.Query(ctx, sqlHiddenMessages, snap.room, snap.seq)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []hiddenMsg
	for rows.Next() {
		var m hiddenMsg
		t := &timerState{}
		if err := rows.Scan(&m.seq, &m.gate, &t.Effect, &t.ExpiresAt, &t.TicksLeft); err != nil {
			return nil, err
		}
		if t.Effect != nil {
			m.timer = t
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	snap.hidden.Keep(count, out)
	return out, nil
}

// uncountHidden takes the messages rc's reader may not see out of its
// message count, and keeps which they are (msgCounts.unseen) for what
// else reads the log as the reader sees it (Read.RecentLog).
func (s *Service) uncountHidden(ctx context.Context, rc *roomCtx) {
	if len(rc.msgs.hidden) == 0 {
		return
	}
	shown := s.logGate(ctx, rc)
	var unseen []int64
	for _, m := range rc.msgs.hidden {
		// The gate is evaluated as before (only for a message its timer
		// does not hide), so every read hides the same messages.
		byTimer := m.timer != nil && !m.timer.live(rc.now)
		seen := !byTimer && (m.gate == nil || shown(m.gate))
		if !seen {
			rc.msgs.Count--
			unseen = append(unseen, m.seq)
		}
		// A message whose gate hides it from the reader is not seen when
		// its timer runs out either: that moment is not the reader's (a
		// page woken then would tell it when).
		if byTimer || seen {
			rc.msgs.next = timer.Earliest(rc.msgs.next, m.timer.nextChange(rc.now))
		}
	}
	slices.Sort(unseen)
	rc.msgs.Count = max(rc.msgs.Count, 0)
	rc.msgs.hidden, rc.msgs.unseen = nil, unseen
}

// sqlPublicMessages counts a room's messages everyone sees (r.id: the
// room row, one of the rooms in $1): the lobby's total, which depends on
// no reader. The rooms are named again for Citus, which reaches every
// shard for a subquery correlated only with r.id.
var sqlPublicMessages = `greatest(r.message_count - (SELECT count(*) FROM state m WHERE m.room_id = ANY($1) AND m.room_id = r.id AND m.scope = '_messages'
	AND m.sort_key IS NOT NULL AND (m.enabled_expr IS NOT NULL OR m.timer_effect IS NOT NULL AND NOT ` +
	strings.TrimPrefix(liveSQL, " AND ") + `)), 0)`
