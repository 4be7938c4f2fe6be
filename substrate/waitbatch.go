package substrate

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate/internal/coalesce"
)

// waitBatches are the round trips a woken wait makes, shared by the
// waits woken together: one commit wakes every waiter of its room at
// once, and each asking the database alone made ten thousand waits cost
// ten thousand times four round trips (the room's seq, the token's check,
// and the status write with its notification on the way out).
type waitBatches struct {
	// seqs reads a room's seq, message count and birth, for readers that
	// need nothing of their own from the same transaction.
	seqs coalesce.Coalescer[string, struct{}, roomHead]
	// tokens checks principals' tokens, per room and kind.
	tokens coalesce.Coalescer[tokenKey, *Principal, tokenCheck]
	// start marks agents waiting at the start of their waits, per room,
	// each with the room's seq the statement saw.
	start coalesce.Coalescer[string, waitStart, startedAt]
	// done marks agents active again at the end of their waits, per room.
	done coalesce.Coalescer[string, string, struct{}]
}

// waitStart is one agent's wait beginning on a condition.
type waitStart struct{ agent, condition string }

// startedAt is the room's seq as the statement that showed the agent
// waiting saw it; ok is false when the agent is gone.
type startedAt struct {
	seq int64
	ok  bool
}

type roomHead struct {
	seq, count int64
	born       time.Time
}

type tokenKey struct {
	room string
	kind Kind
}

// tokenCheck is a token's check: its grants when it still holds (agents),
// or gone when it does not.
type tokenCheck struct {
	ok     bool
	grants []string
}

// batchMax caps a batch's parameter list.
const batchMax = 5000

func newWaitBatches(db *store.DB) *waitBatches {
	w := &waitBatches{}
	w.seqs.Run = func(ctx context.Context, roomID string, reqs []struct{}) ([]roomHead, error) {
		var h roomHead
		err := db.QueryRow(ctx, `SELECT seq, message_count, created_at FROM rooms WHERE id = $1`, roomID).Scan(&h.seq, &h.count, &h.born)
		if err != nil {
			return nil, err
		}
		out := make([]roomHead, len(reqs))
		for i := range out {
			out[i] = h
		}
		return out, nil
	}
	w.tokens.Max = batchMax
	w.tokens.Run = func(ctx context.Context, k tokenKey, reqs []*Principal) ([]tokenCheck, error) {
		out := make([]tokenCheck, len(reqs))
		if k.kind == KindRoom || k.kind == KindView {
			var room, view []byte
			err := db.QueryRow(ctx, `SELECT token_hash, view_token_hash FROM rooms WHERE id = $1`, k.room).Scan(&room, &view)
			if errors.Is(err, pgx.ErrNoRows) {
				return out, nil
			}
			if err != nil {
				return nil, err
			}
			want := room
			if k.kind == KindView {
				want = view
			}
			for i, p := range reqs {
				out[i].ok = want != nil && bytes.Equal(want, p.tokenHash)
			}
			return out, nil
		}
		ids := make([]string, len(reqs))
		for i, p := range reqs {
			ids[i] = p.AgentID
		}
		rows, err := db.Query(ctx, `SELECT id, token_hash, grants FROM agents WHERE room_id = $1 AND id = ANY($2)`, k.room, ids)
		if err != nil {
			return nil, err
		}
		type agentTok struct {
			hash   []byte
			grants []string
		}
		found := map[string]agentTok{}
		for rows.Next() {
			var id string
			var a agentTok
			if err := rows.Scan(&id, &a.hash, &a.grants); err != nil {
				rows.Close()
				return nil, err
			}
			found[id] = a
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		for i, p := range reqs {
			if a, ok := found[p.AgentID]; ok && a.hash != nil && bytes.Equal(a.hash, p.tokenHash) {
				out[i] = tokenCheck{ok: true, grants: a.grants}
			}
		}
		return out, nil
	}
	w.start.Max = batchMax
	w.start.Run = func(ctx context.Context, roomID string, reqs []waitStart) ([]startedAt, error) {
		ids, conds := make([]string, len(reqs)), make([]string, len(reqs))
		for i, r := range reqs {
			ids[i], conds[i] = r.agent, r.condition
		}
		// An agent twice in one batch (two waits at once) is updated once,
		// with one of its conditions: as if the two had run one after the
		// other. The seq is read by the statement that sets the status.
		rows, err := db.Query(ctx, `UPDATE agents AS a SET status = 'waiting', waiting_on = u.cond, last_heartbeat = now()
			FROM (SELECT DISTINCT ON (id) id, cond FROM unnest($2::text[], $3::text[]) AS u(id, cond)) AS u
			WHERE a.room_id = $1 AND a.id = u.id
			RETURNING a.id, (SELECT seq FROM rooms WHERE id = $1)`, roomID, ids, conds)
		if err != nil {
			return nil, err
		}
		seqs := map[string]int64{}
		for rows.Next() {
			var id string
			var seq int64
			if err := rows.Scan(&id, &seq); err != nil {
				rows.Close()
				return nil, err
			}
			seqs[id] = seq
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if len(seqs) > 0 {
			if err := db.Notify(ctx, roomID, store.PresenceNote); err != nil {
				return nil, err
			}
		}
		out := make([]startedAt, len(reqs))
		for i, r := range reqs {
			out[i].seq, out[i].ok = seqs[r.agent]
		}
		return out, nil
	}
	w.done.Max = batchMax
	w.done.Run = func(ctx context.Context, roomID string, ids []string) ([]struct{}, error) {
		// A status set while the wait ran stays: idle when the person
		// stepped out of the agent or lost the room (the wait then ended
		// refused), busy from a heartbeat.
		tag, err := db.Exec(ctx, `UPDATE agents SET status = 'active', waiting_on = NULL, last_heartbeat = now()
			WHERE room_id = $1 AND id = ANY($2) AND status = 'waiting'`, roomID, ids)
		if err == nil && tag.RowsAffected() > 0 {
			err = db.Notify(ctx, roomID, store.PresenceNote)
		}
		if err != nil {
			return nil, err
		}
		return make([]struct{}, len(ids)), nil
	}
	return w
}

// recheckBatched is recheck for a principal authenticated by a token of
// its own: the check runs with those of the other waits of the room woken
// at the same time, in one query.
func (s *Service) recheckBatched(ctx context.Context, p *Principal) (*Principal, error) {
	if p.Refresh != nil || p.tokenHash == nil {
		return s.recheck(ctx, p)
	}
	c, err := s.waitq.tokens.Do(ctx, tokenKey{p.RoomID, p.Kind}, p)
	if err != nil {
		return nil, err
	}
	if !c.ok {
		// The long way, for its error: deleted room or revoked token.
		return s.recheck(ctx, p)
	}
	np := *p
	if p.Kind == KindAgent {
		np.Grants = c.grants
	}
	return &np, nil
}
