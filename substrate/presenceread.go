package substrate

// Agents reading one room at once share one read of its seq and presence.
// Every agent's context read needs both, fresh (presence changes without
// a seq: heartbeats, statuses, joins), and with eight agents reading a
// room the same statement ran eight times over for the same answer. The
// coalescer answers a read only with a statement that began after the
// read arrived, so what it shows is at least as new as what it would have
// read alone (TestAttackSharedPresenceReadIsNeverOlderThanTheRequest);
// each reader gets its own copy of the rows (the read marks are laid over
// them per read).

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate/internal/coalesce"
)

// roomPresence is a room's seq, message count and birth with its agents,
// read in one statement.
type roomPresence struct {
	seq, count int64
	born       time.Time
	agents     []presence
}

// readPresence is the room's seq and presence, read by a statement that
// began after this call.
func (s *Service) readPresence(ctx context.Context, roomID string) (roomPresence, error) {
	s.presenceOnce.Do(func() { s.presence = newPresenceReads(s.db) })
	return s.presence.Do(ctx, roomID, struct{}{})
}

func newPresenceReads(db *store.DB) *coalesce.Batcher[string, struct{}, roomPresence] {
	return &coalesce.Batcher[string, struct{}, roomPresence]{Run: func(ctx context.Context, roomID string, reqs []struct{}) ([]roomPresence, error) {
		var h roomPresence
		rows, err := db.Query(ctx, sqlRoomPresence, roomID)
		if err != nil {
			return nil, err
		}
		found := false
		for rows.Next() {
			var a presence
			var id *string
			if err = rows.Scan(&h.seq, &h.count, &h.born, &id, &a.Name, &a.Role, &a.Status, &a.WaitingOn, &a.LastHeartbeat, &a.LastSeenSeq, &a.LastContextSeq, &a.ContextReads, &a.Enabled, &a.Account); err != nil {
				break
			}
			found = true
			if id != nil {
				a.ID = *id
				h.agents = append(h.agents, a)
			}
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		if err == nil && !found {
			err = pgx.ErrNoRows
		}
		if err != nil {
			return nil, err
		}
		out := make([]roomPresence, len(reqs))
		for i := range out {
			out[i] = h
			out[i].agents = slices.Clone(h.agents)
		}
		return out, nil
	}}
}

// presenceRows are agents' presence rows as read marks see them: the
// marks this process has not written yet are laid over them
// (readmarks.Marks.Overlay) before a rule reads them.
type presenceRows []presence

func (r presenceRows) Len() int { return len(r) }

func (r presenceRows) At(i int) (agent string, lastContextSeq, lastSeenSeq, contextReads *int64) {
	a := &r[i]
	return a.ID, &a.LastContextSeq, &a.LastSeenSeq, &a.ContextReads
}

// sqlMarkReads writes a batch of read marks (readmarks.New) and returns
// each row's context_reads with them: the seqs are maxima, the reads add.
const sqlMarkReads = `UPDATE agents AS a SET last_context_seq = greatest(a.last_context_seq, v.seq),
		context_reads = a.context_reads + v.reads, last_seen_seq = greatest(a.last_seen_seq, v.up_to)
	FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[]) AS v(room_id, id, seq, reads, up_to)
	WHERE a.room_id = v.room_id AND a.id = v.id
	RETURNING a.room_id, a.id, a.context_reads`
