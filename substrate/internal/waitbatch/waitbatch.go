// Package waitbatch shares the round trips of waits woken together: one
// commit wakes every waiter of its room at once, and each asking the
// database alone made ten thousand waits cost ten thousand times four
// round trips (the room's seq, the token's check, and the status write
// with its notification on the way out). Each kind of round trip is one
// statement per batch of the room's waits (package coalesce).
//
// It decides nothing: the rules are the core's (substrate/wait.go). The
// credential batch returns the credentials as stored, and the core
// decides whether the caller's still holds; the status statements are
// the ones the core's wait rule asks for (waiting at the start, active
// again at the end unless a status set meanwhile stays).
package waitbatch

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate/internal/coalesce"
)

// Batches are the shared round trips of a process's waits.
type Batches struct {
	heads coalesce.Batcher[string, struct{}, Head]
	creds coalesce.Batcher[credKey, string, Cred]
	start coalesce.Batcher[string, start, started]
	done  coalesce.Batcher[string, string, struct{}]
}

// Head is a room's seq, message count and birth.
type Head struct {
	Seq, Count int64
	Born       time.Time
}

// Kind is which credential of a room a check reads.
type Kind int

const (
	// RoomToken is the room token's hash.
	RoomToken Kind = iota
	// ViewToken is the view token's hash.
	ViewToken
	// AgentToken is an agent's token hash, with its grants.
	AgentToken
)

type credKey struct {
	room string
	kind Kind
}

// Cred is a credential as stored now: its hash (nil when the room, the
// agent or the token is gone) and, for an agent, its grants.
type Cred struct {
	Hash   []byte
	Grants []string
}

// start is one agent's wait beginning on a condition.
type start struct{ agent, condition string }

// started is the room's seq as the statement that showed the agent
// waiting saw it; ok is false when the agent is gone.
type started struct {
	seq int64
	ok  bool
}

// batchMax caps a batch's parameter list.
const batchMax = 5000

// New is the batches over db.
func New(db *store.DB) *Batches {
	b := &Batches{}
	b.heads.Run = func(ctx context.Context, roomID string, reqs []struct{}) ([]Head, error) {
		return readHeads(ctx, db, roomID, len(reqs))
	}
	b.creds.Max = batchMax
	b.creds.Run = func(ctx context.Context, k credKey, agents []string) ([]Cred, error) {
		if k.kind == AgentToken {
			return readAgentCreds(ctx, db, k.room, agents)
		}
		return readRoomCreds(ctx, db, k, len(agents))
	}
	b.start.Max = batchMax
	b.start.Run = func(ctx context.Context, roomID string, reqs []start) ([]started, error) {
		return showWaiting(ctx, db, roomID, reqs)
	}
	b.done.Max = batchMax
	b.done.Run = func(ctx context.Context, roomID string, ids []string) ([]struct{}, error) {
		if err := showActive(ctx, db, roomID, ids); err != nil {
			return nil, err
		}
		return make([]struct{}, len(ids)), nil
	}
	return b
}

// Head reads a room's head, for a reader that needs nothing of its own
// from the same transaction; pgx.ErrNoRows when the room does not exist.
func (b *Batches) Head(ctx context.Context, roomID string) (Head, error) {
	return b.heads.Do(ctx, roomID, struct{}{})
}

// Cred reads a room's credential of kind as stored now (agentID names the
// agent's, for AgentToken).
func (b *Batches) Cred(ctx context.Context, roomID string, kind Kind, agentID string) (Cred, error) {
	return b.creds.Do(ctx, credKey{roomID, kind}, agentID)
}

// Start shows an agent waiting on condition and notifies the room's
// presence. seq is the room's seq as the statement setting the status saw
// it; ok is false when the agent is gone.
func (b *Batches) Start(ctx context.Context, roomID, agentID, condition string) (seq int64, ok bool, err error) {
	st, err := b.start.Do(ctx, roomID, start{agent: agentID, condition: condition})
	return st.seq, st.ok, err
}

// Done shows an agent active again at the end of its wait, unless a status
// was set while it waited, and notifies the room's presence.
func (b *Batches) Done(ctx context.Context, roomID, agentID string) error {
	_, err := b.done.Do(ctx, roomID, agentID)
	return err
}

func readHeads(ctx context.Context, db *store.DB, roomID string, n int) ([]Head, error) {
	var h Head
	err := db.QueryRow(ctx, `SELECT seq, message_count, created_at FROM rooms WHERE id = $1`, roomID).Scan(&h.Seq, &h.Count, &h.Born)
	if err != nil {
		return nil, err
	}
	out := make([]Head, n)
	for i := range out {
		out[i] = h
	}
	return out, nil
}

// readRoomCreds reads the room's or the view's token hash, the same for
// every request of the batch.
func readRoomCreds(ctx context.Context, db *store.DB, k credKey, n int) ([]Cred, error) {
	out := make([]Cred, n)
	var room, view []byte
	err := db.QueryRow(ctx, `SELECT token_hash, view_token_hash FROM rooms WHERE id = $1`, k.room).Scan(&room, &view)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	hash := room
	if k.kind == ViewToken {
		hash = view
	}
	for i := range out {
		out[i].Hash = hash
	}
	return out, nil
}

// readAgentCreds reads the agents' token hashes and grants in one query.
func readAgentCreds(ctx context.Context, db *store.DB, roomID string, agents []string) ([]Cred, error) {
	rows, err := db.Query(ctx, `SELECT id, token_hash, grants FROM agents WHERE room_id = $1 AND id = ANY($2)`, roomID, agents)
	if err != nil {
		return nil, err
	}
	found := map[string]Cred{}
	for rows.Next() {
		var id string
		var c Cred
		if err := rows.Scan(&id, &c.Hash, &c.Grants); err != nil {
			rows.Close()
			return nil, err
		}
		found[id] = c
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]Cred, len(agents))
	for i, id := range agents {
		out[i] = found[id]
	}
	return out, nil
}

// showWaiting marks the agents of reqs waiting in one statement, which
// reads the room's seq with it.
func showWaiting(ctx context.Context, db *store.DB, roomID string, reqs []start) ([]started, error) {
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
	out := make([]started, len(reqs))
	for i, r := range reqs {
		out[i].seq, out[i].ok = seqs[r.agent]
	}
	return out, nil
}

// showActive marks the agents ids active again in one statement.
func showActive(ctx context.Context, db *store.DB, roomID string, ids []string) error {
	// A status set while the wait ran stays: idle when the person
	// stepped out of the agent or lost the room (the wait then ended
	// refused), busy from a heartbeat.
	tag, err := db.Exec(ctx, `UPDATE agents SET status = 'active', waiting_on = NULL, last_heartbeat = now()
		WHERE room_id = $1 AND id = ANY($2) AND status = 'waiting'`, roomID, ids)
	if err == nil && tag.RowsAffected() > 0 {
		err = db.Notify(ctx, roomID, store.PresenceNote)
	}
	return err
}
