// Package waitbatch shares the round trips of waits woken together: one
// commit wakes every waiter of its room at once, and each asking the
// database alone made ten thousand waits cost ten thousand times four
// round trips (the room's seq, the token's check, and the status write
// with its notification on the way out). Each kind of round trip is one
// statement per batch of the room's waits (package coalesce).
//
// It decides nothing and names no table: the rules and their statements
// are the core's (substrate/wait.go), handed in as Statements. The
// credential batch returns the credentials as stored, and the core
// decides whether the caller's still holds; the status statements are
// the ones the core's wait rule asks for (waiting at the start, active
// again at the end unless a status set meanwhile stays).
package waitbatch

import (
	"context"
	"time"

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

// Statements are the core's round trips a batch runs once for all its
// requests. Each is required.
type Statements struct {
	// Head reads a room's head; pgx.ErrNoRows when the room is gone.
	Head func(ctx context.Context, roomID string) (Head, error)
	// RoomCreds reads the room token's and the view token's hashes (both
	// nil when the room is gone).
	RoomCreds func(ctx context.Context, roomID string) (room, view []byte, err error)
	// AgentCreds reads the agents' credentials by id (absent when gone).
	AgentCreds func(ctx context.Context, roomID string, agents []string) (map[string]Cred, error)
	// ShowWaiting shows the agents ids[i] waiting on conds[i] (an agent
	// listed twice is shown once, with one of its conditions) and notifies
	// the room's presence; it returns the room's seq as the statement saw
	// it, by agent, for the agents that exist.
	ShowWaiting func(ctx context.Context, roomID string, ids, conds []string) (map[string]int64, error)
	// ShowActive shows the agents ids active again unless a status was set
	// while they waited, and notifies the room's presence.
	ShowActive func(ctx context.Context, roomID string, ids []string) error
}

// batchMax caps a batch's parameter list.
const batchMax = 5000

// New is the batches over the core's statements.
func New(st Statements) *Batches {
	b := &Batches{}
	b.heads.Run = func(ctx context.Context, roomID string, reqs []struct{}) ([]Head, error) {
		h, err := st.Head(ctx, roomID)
		if err != nil {
			return nil, err
		}
		return fill(make([]Head, len(reqs)), h), nil
	}
	b.creds.Max = batchMax
	b.creds.Run = func(ctx context.Context, k credKey, agents []string) ([]Cred, error) {
		out := make([]Cred, len(agents))
		if k.kind == AgentToken {
			found, err := st.AgentCreds(ctx, k.room, agents)
			if err != nil {
				return nil, err
			}
			for i, id := range agents {
				out[i] = found[id]
			}
			return out, nil
		}
		room, view, err := st.RoomCreds(ctx, k.room)
		if err != nil {
			return nil, err
		}
		if k.kind == ViewToken {
			room = view
		}
		return fill(out, Cred{Hash: room}), nil
	}
	b.start.Max = batchMax
	b.start.Run = func(ctx context.Context, roomID string, reqs []start) ([]started, error) {
		ids, conds := make([]string, len(reqs)), make([]string, len(reqs))
		for i, r := range reqs {
			ids[i], conds[i] = r.agent, r.condition
		}
		seqs, err := st.ShowWaiting(ctx, roomID, ids, conds)
		if err != nil {
			return nil, err
		}
		out := make([]started, len(reqs))
		for i, r := range reqs {
			out[i].seq, out[i].ok = seqs[r.agent]
		}
		return out, nil
	}
	b.done.Max = batchMax
	b.done.Run = func(ctx context.Context, roomID string, ids []string) ([]struct{}, error) {
		if err := st.ShowActive(ctx, roomID, ids); err != nil {
			return nil, err
		}
		return make([]struct{}, len(ids)), nil
	}
	return b
}

func fill[T any](out []T, v T) []T {
	for i := range out {
		out[i] = v
	}
	return out
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
