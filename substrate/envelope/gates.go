package envelope

// What a read's expressions decide of what a reader is shown: an entry's
// or an agent's enabled gate, and an action's enabled and if for its
// availability. Each is evaluated with the variables the core built for
// the reader, at the cost it charges to the read's budget (which the
// core keeps, and fails closed past).

import (
	"context"

	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/exprbudget"
)

// GateMemo is how long a gate's result may be reused.
type GateMemo int

const (
	// MemoNone: reads agents, which change without a new seq (a wait
	// woken by a presence change must see it at once).
	MemoNone GateMemo = iota
	// MemoPure: reads neither now nor agents, so its result holds for the
	// same authority until the snapshot changes.
	MemoPure
	// MemoTimed: reads now (not agents): its result is reused for
	// Limits.GateQuantum.
	MemoTimed
)

// Gate evaluates an entry-level enabled expression: on when it gives
// true (an error or any other value hides the entry), its cost at least
// exprbudget.MinCost, and how long its result may be reused.
func Gate(ctx context.Context, cel *expr.Env, src string, vars *expr.Vars) (on bool, cost uint64, memo GateMemo) {
	p, err := cel.Compile(src)
	if err != nil {
		return false, exprbudget.MinCost, MemoPure
	}
	v, cost, err := cel.EvalCost(ctx, p, vars)
	b, _ := v.(bool)
	on, cost = err == nil && b, max(cost, exprbudget.MinCost)
	switch {
	case p.Uses("agents"):
		return on, cost, MemoNone
	case p.Uses("now"):
		return on, cost, MemoTimed
	}
	return on, cost, MemoPure
}

// VisibleAgents is the agents map (CEL agents, the context's agents
// section) as a reader sees it: an agent with an enabled expression is
// in it only while gate says the expression holds.
func VisibleAgents(agents []Presence, gate func(src string) bool) map[string]any {
	all := AgentsVar(agents)
	for _, a := range agents {
		if a.Enabled != nil && !gate(*a.Enabled) {
			delete(all, a.ID)
		}
	}
	return all
}

// ActionGuard evaluates an action's enabled (or, with ifClause, its `if`
// without params) for a read's availability: whether it holds, its cost
// (at least exprbudget.MinCost), and held when an `if` held, without an
// error, in an expression that does not read actions, so an invocation,
// which evaluates the same `if` on the same variables, may take the
// result (issue 32). An `if` that fails because it needs params leaves
// availability to the invocation, so the action counts as available.
func ActionGuard(ctx context.Context, cel *expr.Env, src string, vars *expr.Vars, ifClause bool) (ok bool, cost uint64, held bool) {
	p, err := cel.Compile(src)
	if err != nil {
		return false, exprbudget.MinCost, false
	}
	v, cost, err := cel.EvalCost(ctx, p, vars)
	cost = max(cost, exprbudget.MinCost)
	b, isBool := v.(bool)
	if err != nil && ifClause {
		return p.UsesParams, cost, false
	}
	ok = err == nil && isBool && b
	return ok, cost, ifClause && ok && !p.Uses("actions")
}
