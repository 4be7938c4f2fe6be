// One command's run (loomRun): whom it runs as, and the loom's rows it
// reads and writes through the room's transaction.

package loom

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

type loomTree struct {
	ID          int64     `json:"id"`
	Name        string    `json:"name"`
	Next        int64     `json:"next"`
	Branches    int64     `json:"branches"`
	MaxDepth    int       `json:"max_depth"`
	Annotations int64     `json:"annotations"`
	Links       int64     `json:"links"`
	By          string    `json:"by"`
	At          time.Time `json:"created_at"`
}

type loomPos struct {
	Tree int64 `json:"tree"`
	Node int64 `json:"node"`
}

type loomLease struct {
	Holder string    `json:"holder"`
	Until  time.Time `json:"until"`
}

// run is one command's execution: the connection it reads on, the writes
// it queues, and what it learnt about the caller.
type loomRun struct {
	l     *Loom
	tx    *substrate.RoomTx
	p     *substrate.Principal
	room  string
	now   time.Time
	actor string
	kind  string // "human" or "model"
	perms []string
	// pos is where the caller is for this command: the call's position
	// (callState.pos) once the call has one, else the stored one.
	pos loomPos
	// stored is the agent's stored position (loom:pos), as read.
	stored loomPos
	// newPos is set when the command moved the caller.
	newPos *loomPos
	ops    []substrate.Op
	trace  string // the trace line; default the command
	nodes  []Node
	in     *stepIn
	// caught are the trees whose counter catchUp checked.
	caught map[int64]bool
}

func loomErr(code errs.Code, format string, a ...any) *errs.Error {
	return errs.New(code, "✗ "+format, a...)
}

func (r *loomRun) need(perm string) error {
	if slices.Contains(r.perms, perm) {
		return nil
	}
	return loomErr(errs.Forbidden, "permission denied: %s not enabled", perm).
		WithHint("ask the room's owner: → permit %s %s", r.actorOrYou(), perm).With("permission", perm)
}

func (r *loomRun) actorOrYou() string {
	if r.p.Kind == substrate.KindAgent {
		return r.p.AgentID
	}
	return "<agent>"
}

// needWrite refuses read-only credentials, then checks perm.
func (r *loomRun) needWrite(perm string) error {
	if r.p.ReadOnly() || !r.tx.Writes() {
		return loomErr(errs.ReadOnlyToken, "permission denied: this credential is read-only").
			WithHint("write with an agent token or the room token (over MCP: embody an agent)")
	}
	return r.need(perm)
}

func (r *loomRun) agent() error {
	if r.p.Kind != substrate.KindAgent {
		return loomErr(errs.InvalidField, "operational memory belongs to an agent, and this credential is not one").
			WithHint("use an agent token (over MCP: embody an agent)").With("needs", "agent")
	}
	return nil
}

// get reads one entry's value into v; false when absent.
func (r *loomRun) get(scope, key string, v any) (bool, error) {
	raw, ok, err := r.tx.Get(scope, key)
	if err != nil || !ok {
		return false, err
	}
	return true, json.Unmarshal(raw, v)
}

// getMany reads the values of keys that exist, by key.
func (r *loomRun) getMany(scope string, keys []string) (map[string]json.RawMessage, error) {
	return r.tx.GetMany(scope, keys)
}

// probe reads prefix1, prefix2, … until a gap: the children, annotations
// or links of a node, by exact keys.
func (r *loomRun) probe(scope, prefix string, limit int) ([]json.RawMessage, error) {
	var out []json.RawMessage
	for start := 1; ; {
		n := min(32, limit-len(out))
		if n <= 0 {
			return out, nil
		}
		keys := make([]string, n)
		for i := range keys {
			keys[i] = prefix + strconv.Itoa(start+i)
		}
		got, err := r.getMany(scope, keys)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			v, ok := got[k]
			if !ok {
				return out, nil
			}
			out = append(out, v)
		}
		start += n
	}
}

func (r *loomRun) count(scope, prefix string) (int, error) {
	vs, err := r.probe(scope, prefix, 10_000)
	return len(vs), err
}

func (r *loomRun) put(scope, key string, v any) {
	raw, _ := json.Marshal(v)
	r.ops = append(r.ops, substrate.Op{Scope: scope, Key: key, Value: raw})
}

func (r *loomRun) putTimed(scope, key string, v any, ttl time.Duration) {
	raw, _ := json.Marshal(v)
	r.ops = append(r.ops, substrate.Op{Scope: scope, Key: key, Value: raw, TTL: ttl})
}

func (r *loomRun) appendEntry(scope, key string, v any) {
	raw, _ := json.Marshal(v)
	r.ops = append(r.ops, substrate.Op{Scope: scope, Key: key, Value: raw, Append: true})
}

func (r *loomRun) del(scope, key string) {
	r.ops = append(r.ops, substrate.Op{Scope: scope, Key: key, Delete: true})
}

// uniq is a key suffix unique to this mutation: its base seq plus a
// counter.
func (r *loomRun) uniq() string {
	return fmt.Sprintf("%012d.%d", r.tx.Base(), len(r.ops))
}
