package loom

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/syncsubstrate/sync/substrate"
)

// A → continue with a generator configured calls the base model with no
// transaction open, which may take seconds. While it does, the room holds
// a record of it in _loom.live (run:<tree>:<uniq>, timed to expire after
// the generator's timeout), so every participant sees that a generation
// is running, not only the one who asked: the loom page draws it and a
// model's memory block names it. The record goes in the same mutation as
// the nodes it produced, or by itself when the call failed.

// Generation is a generator call in flight.
type Generation struct {
	Tree int64     `json:"tree"`
	Node int64     `json:"node"`
	N    int       `json:"n"`
	By   string    `json:"by"`
	At   time.Time `json:"at"`
}

const runPrefix = "run:"

// markGenerating records that p's continuation of node is being
// generated; it returns the record's key ("" when it could not be
// written: the generation still runs, unannounced).
func (l *Loom) markGenerating(ctx context.Context, p *substrate.Principal, roomID string, tree, node int64, n int) string {
	key := ""
	_, err := l.svc.MutateRoom(ctx, p, roomID, func(tx *substrate.RoomTx) error {
		r := &loomRun{l: l, tx: tx, p: tx.Principal(), room: roomID, now: tx.Now(), actor: tx.Actor()}
		key = runPrefix + strconv.FormatInt(tree, 10) + ":" + r.uniq()
		r.putTimed(scopeLoomLive, key, Generation{Tree: tree, Node: node, N: n, By: r.actor, At: r.now}, l.opt.GeneratorTimeout+5*time.Second)
		audit, err := tx.Apply(r.ops, "loom")
		if err != nil {
			return err
		}
		tx.Audit(map[string]any{"kind": "loom", "command": "generating", "writes": audit})
		return nil
	})
	if err != nil {
		l.log.Warn("loom: recording a running generation failed", "room", roomID, "err", err)
		return ""
	}
	return key
}

// unmarkGenerating removes a record whose generation failed.
func (l *Loom) unmarkGenerating(ctx context.Context, p *substrate.Principal, roomID, key string) {
	if key == "" {
		return
	}
	// The caller's context may be what ended the call.
	ctx = context.WithoutCancel(ctx)
	_, err := l.svc.MutateRoom(ctx, p, roomID, func(tx *substrate.RoomTx) error {
		audit, err := tx.Apply([]substrate.Op{{Scope: scopeLoomLive, Key: key, Delete: true}}, "loom")
		if err != nil {
			return err
		}
		tx.Audit(map[string]any{"kind": "loom", "command": "generated", "writes": audit})
		return nil
	})
	if err != nil {
		l.log.Warn("loom: clearing a running generation failed", "room", roomID, "err", err)
	}
}

// generations lists the generations in flight (tree 0: in every tree),
// oldest first.
func (r *loomRun) generations(tree int64) ([]Generation, error) {
	prefix := runPrefix
	if tree > 0 {
		prefix += strconv.FormatInt(tree, 10) + ":"
	}
	kvs, err := r.tx.List(substrate.ListQuery{Scope: scopeLoomLive, Prefix: prefix, Limit: 200})
	if err != nil {
		return nil, err
	}
	var out []Generation
	for _, kv := range kvs {
		var g Generation
		if json.Unmarshal(kv.Value, &g) == nil {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b Generation) int { return a.At.Compare(b.At) })
	return out, nil
}

// generatingLine is a generation in flight as a model's memory reads it.
func generatingLine(g Generation, actor string, now time.Time) string {
	who := g.By + " asked"
	if g.By == actor {
		who = "you asked"
	}
	return fmt.Sprintf("generating: %d continuation(s) of node %d (tree %d), %s %s ago; the nodes appear when the base model answers",
		g.N, g.Node, g.Tree, who, now.Sub(g.At).Round(time.Second))
}
