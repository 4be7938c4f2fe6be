package substrate

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// mutation is one room mutation in flight: the locked room, the sequence
// numbers it took, and the statements it will send.
type mutation struct {
	ctx   context.Context
	tx    pgx.Tx
	room  string
	p     *Principal // nil for an anonymous open-join
	actor string
	now   time.Time
	next  int64 // next sequence number to hand out
	last  int64 // the mutation's own seq: its _audit entry's sort_key
	batch pgx.Batch
	audit map[string]any
}

// seq hands out the next room sequence number (for an append entry).
func (m *mutation) seq() int64 {
	n := m.next
	m.next++
	return n
}

// mutate runs fn as one room mutation. appends is how many sequence numbers
// fn will take with m.seq(); one more is taken for the _audit entry, whose
// sort_key becomes the mutation's seq. The room row stays locked until
// commit, so mutations of a room are totally ordered and sequence numbers
// are gap-free. For an agent principal the agent row is re-read under the
// lock, so a grant revoked a moment ago is not used.
func (s *Service) mutate(ctx context.Context, p *Principal, roomID string, appends int, fn func(m *mutation) error) (seq int64, err error) {
	err = s.db.InTx(ctx, func(tx store.Tx) error {
		m := &mutation{ctx: ctx, tx: tx, room: roomID, p: p}
		agentID := ""
		if p != nil && p.Kind == KindAgent {
			agentID = p.AgentID
		}
		var grants []string
		row := tx.QueryRow(ctx,
			`UPDATE rooms SET seq = seq + $2 WHERE id = $1
			 RETURNING seq, now(), (SELECT grants FROM agents WHERE room_id = $1 AND id = $3)`,
			roomID, appends+1, agentID)
		if err := row.Scan(&m.last, &m.now, &grants); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return errs.New(errs.RoomNotFound, "room %q does not exist", roomID).WithHint("check the room id, or create it with POST /rooms")
			}
			return err
		}
		m.next = m.last - int64(appends)
		if agentID != "" {
			if grants == nil {
				return errs.New(errs.Unauthorized, "agent %q no longer exists", agentID).WithHint("join the room again")
			}
			fresh := *p
			fresh.Grants = grants
			m.p = &fresh
		}
		if m.p != nil {
			m.actor = m.p.Actor()
		}
		if err := fn(m); err != nil {
			return err
		}
		if m.next != m.last {
			panic("substrate: mutation took " + strconv.FormatInt(m.next-(m.last-int64(appends)), 10) + " sequence numbers, declared " + strconv.Itoa(appends))
		}
		if m.audit == nil {
			panic("substrate: mutation without an audit entry")
		}
		m.audit["ts"] = m.now.UTC().Format(time.RFC3339Nano)
		m.audit["by"] = m.actor
		m.audit["seq"] = m.last
		auditJSON, err := json.Marshal(m.audit)
		if err != nil {
			return err
		}
		m.batch.Queue(`INSERT INTO state (room_id, scope, key, sort_key, value, version, revision, writer, via, created_at, updated_at)
			VALUES ($1, '_audit', $2, $3, $4, 1, $3, $5, 'system', $6, $6)`,
			roomID, strconv.FormatInt(m.last, 10), m.last, auditJSON, m.actor, m.now)
		m.batch.Queue(`SELECT pg_notify($1, $2)`, store.NotifyChannel, roomID+" "+strconv.FormatInt(m.last, 10))
		if err := tx.SendBatch(ctx, &m.batch).Close(); err != nil {
			if store.IsUniqueViolation(err) {
				return errs.New(errs.KeyExists, "a key written by this request already exists").WithHint("write to another key, or omit the key of an append entry")
			}
			return err
		}
		seq = m.last
		return nil
	})
	return seq, err
}
