// Package reviewroom builds the room a model meets after an hour in a
// busy review (issue 43): 10 agents, 500 tasks, 1,000 messages, with
// planted signals that adaptive salience should point at and planted
// noise it should not. The salience tests measure the precision of
// _context._attention on it; the MCP tests make their people its owners,
// who embody agents in it, and pin a long session on it
// (mcp/reviewroom_test.go: every result's shape and size). It is the model-facing sibling of lobby/teamroom (the pages'
// room): the same style, built only through the core's operations
// (CreateRoom, Join, WriteState, RegisterAction, RegisterView, Invoke,
// Context), deterministic (the same ids, texts and order every time; only
// times and tokens differ).
//
// Its shape:
//
//   - Room "review" (Options.Room), 10 agents joined with tokens: lead,
//     builder, tester, reviewer, designer, writer, ops, security, data,
//     claude.
//   - 500 tasks, one entry each: _shared.task_001 … _shared.task_500,
//     {id, title, status todo|doing|review|done, owner}; and
//     _shared.release_date, which no action writes.
//   - 4 actions by the room: claim (task: merges owner and status doing
//     into the task), approve (task: status done), set_status (task,
//     status todo|doing|review|done|blocked), and escalate (task,
//     reason), registered first and never invoked.
//   - 5 healthy views by the room that no action reads (open_count,
//     in_review, team_size, plan, review_queue), and one view the builder
//     registered with a mistyped field name (my_open: "stauts").
//   - 1,000 messages with _send_message, interleaved with 500 invocations
//     (task_001 … task_250 claimed, then approved or sent to review, each
//     by its owner), and a context
//     read by one agent or another every 30 steps. Messages name tasks
//     (twenty of them often) and, in the last third, 12 "negotiation"
//     messages are about _shared.release_date.
//
// Planted (Signals): the gap (messages about release_date, which no action
// writes), a contested claim (builder and tester both claim task_400,
// three steps apart), a blocked task (task_321, set blocked by its
// owner), stale work (escalate, registered and never invoked). Noise:
// builder's broken view (builder's to fix, nobody else's signal) and the
// five quiet views.
package reviewroom

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/syncsubstrate/sync/substrate"
)

// Options say which room to build.
type Options struct {
	// Room is the room's id. Default "review".
	Room string
}

// Room is the built room and the credentials to reach it.
type Room struct {
	ID string
	// Token is the room token (room authority).
	Token string
	// Agents are the agents' tokens by id; Principals their principals.
	Agents     map[string]string
	Principals map[string]*substrate.Principal
}

// Counts of what Build makes, for tests to assert against.
const (
	Agents      = 10
	Tasks       = 500
	Messages    = 1000
	Invocations = 500
)

// AgentIDs are the room's agents, in the order they join.
var AgentIDs = []string{"lead", "builder", "tester", "reviewer", "designer", "writer", "ops", "security", "data", "claude"}

// The planted signals and noise, by what _attention names them.
const (
	// GapKey is the key agents negotiate about that no action writes.
	GapKey = "_shared.release_date"
	// ContestedTask is the task two agents claim; ContestedBy they.
	ContestedTask = "task_400"
	// BlockedTask is the entry of the task set blocked.
	BlockedTask = "_shared.task_321"
	// StaleAction is the action registered and never invoked.
	StaleAction = "escalate"
	// BrokenView is the view with a mistyped name; BrokenViewOwner its
	// registrar, the one agent for whom it is a signal.
	BrokenView      = "my_open"
	BrokenViewOwner = "builder"
)

// ContestedBy are the agents that both claim ContestedTask.
var ContestedBy = []string{"builder", "tester"}

// QuietViews are the healthy views no action reads.
var QuietViews = []string{"open_count", "in_review", "team_size", "plan", "review_queue"}

var titles = []string{
	"Review the payment retry logic", "Check the migration on a copy of production", "Read the accessibility report",
	"Confirm the rate limits", "Proofread the release notes", "Verify the rollback script", "Audit the new permissions",
	"Compare the dashboards before and after", "Test the webhook signatures", "Look at the flaky login test",
}

var statuses = []string{"todo", "doing", "review", "done"}

// task is task n's key (task_001 … task_500).
func task(n int) string { return fmt.Sprintf("task_%03d", n) }

// owner is the agent that owns task n (never claude, which reviews).
func owner(n int) string { return AgentIDs[n%(len(AgentIDs)-1)] }

// Build makes the room. It fails on the first operation that fails, with
// that operation named. Its some 2,000 calls in a few seconds spend a
// room's default expression budget (room_busy): build it on a service
// whose Limits.RoomCostPerSecond is negative.
func Build(ctx context.Context, svc *substrate.Service, opt Options) (*Room, error) {
	if opt.Room == "" {
		opt.Room = "review"
	}
	created, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: opt.Room})
	if err != nil {
		return nil, fmt.Errorf("create room: %w", err)
	}
	out := &Room{ID: opt.Room, Token: created.Token, Agents: map[string]string{}, Principals: map[string]*substrate.Principal{}}
	admin := substrate.RoomPrincipal(opt.Room)
	b := &builder{ctx: ctx, svc: svc, room: opt.Room, agents: out.Principals}
	for _, id := range AgentIDs {
		j, err := svc.Join(ctx, admin, opt.Room, substrate.JoinRequest{ID: id, Name: id, Role: "reviewer"})
		if err != nil {
			return nil, fmt.Errorf("join %s: %w", id, err)
		}
		out.Agents[id] = j.Token
		if out.Principals[id], err = svc.Authenticate(ctx, j.Token); err != nil {
			return nil, fmt.Errorf("authenticate %s: %w", id, err)
		}
	}

	// The tasks, 100 to a batch (the default batch limit).
	var writes []substrate.Write
	for n := 1; n <= Tasks; n++ {
		writes = append(writes, substrate.Write{Scope: "_shared", Key: task(n), Value: mustJSON(map[string]any{
			"id": task(n), "title": fmt.Sprintf("%s (%d)", titles[n%len(titles)], n), "status": statuses[n%3], "owner": owner(n)})})
		if len(writes) == 100 {
			if _, err := svc.WriteState(ctx, admin, opt.Room, writes, true); err != nil {
				return nil, fmt.Errorf("write tasks up to %s: %w", task(n), err)
			}
			writes = nil
		}
	}
	if _, err := svc.WriteState(ctx, admin, opt.Room, []substrate.Write{{Scope: "_shared", Key: "release_date", Value: mustJSON("2026-12-14")}}, false); err != nil {
		return nil, fmt.Errorf("write release_date: %w", err)
	}

	for _, def := range actionDefs() {
		if _, err := svc.RegisterAction(ctx, admin, opt.Room, def); err != nil {
			return nil, fmt.Errorf("register action %s: %w", def.ID, err)
		}
	}
	for _, def := range viewDefs() {
		if _, err := svc.RegisterView(ctx, admin, opt.Room, def); err != nil {
			return nil, fmt.Errorf("register view %s: %w", def.ID, err)
		}
	}
	// The builder's view of its own open tasks, with "status" mistyped.
	if _, err := svc.RegisterView(ctx, out.Principals[BrokenViewOwner], opt.Room, substrate.ViewDef{ID: BrokenView,
		Expr: `state._shared.filter(k, k.startsWith("task_") && state._shared[k].owner == "builder" && state._shared[k].stauts != "done").size()`}); err != nil {
		return nil, fmt.Errorf("register view %s: %w", BrokenView, err)
	}

	// The work: two messages, then an invocation, 500 times. Invocation j
	// works on task j/2+1: its owner claims it, then moves it on.
	msg := 0
	for j := range Invocations {
		for range 2 {
			if err := b.message(msg); err != nil {
				return nil, err
			}
			msg++
		}
		n := j/2 + 1
		by, action, params := owner(n), "claim", map[string]any{"task": task(n)}
		switch {
		case j%2 == 1 && n%2 == 0:
			action = "approve"
		case j%2 == 1:
			action, params = "set_status", map[string]any{"task": task(n), "status": "review"}
		}
		switch j {
		case 440: // the blocked task, by its owner
			by, action, params = owner(321), "set_status", map[string]any{"task": task(321), "status": "blocked"}
		case 460, 463: // the contested claim
			by, action, params = ContestedBy[(j-460)/3], "claim", map[string]any{"task": ContestedTask}
		}
		if err := b.invoke(by, action, params); err != nil {
			return nil, err
		}
		if j%10 == 9 { // a context read every 30 steps, by one agent or another
			if _, err := svc.Context(ctx, out.Principals[AgentIDs[(j/10)%len(AgentIDs)]], opt.Room, substrate.ContextRequest{Only: []string{"agents"}}); err != nil {
				return nil, fmt.Errorf("context read: %w", err)
			}
		}
	}
	return out, nil
}

type builder struct {
	ctx    context.Context
	svc    *substrate.Service
	room   string
	agents map[string]*substrate.Principal
}

func (b *builder) invoke(by, action string, params map[string]any) error {
	if _, err := b.svc.Invoke(b.ctx, b.agents[by], b.room, action, mustJSON(params)); err != nil {
		return fmt.Errorf("%s invokes %s: %w", by, action, err)
	}
	return nil
}

var lines = []string{
	"%s looks right to me, one nit on naming.",
	"I am on %s now.",
	"Can someone pair with me on %s this afternoon?",
	"%s needs a second pair of eyes before it is done.",
	"Left comments on %s.",
}

// message sends message i: a chat naming a task (one of twenty hot ones
// every other time), or, every 25th of the last third, a negotiation
// about the release date.
func (b *builder) message(i int) error {
	from := AgentIDs[i%len(AgentIDs)]
	params := map[string]any{"body": fmt.Sprintf(lines[i%len(lines)], task(i/2+1))}
	if i%2 == 1 {
		params["body"] = fmt.Sprintf(lines[i%len(lines)], task((i*7)%20+1))
	}
	if i >= 700 && i%25 == 0 {
		params = map[string]any{"kind": "negotiation", "body": fmt.Sprintf("Could release_date move to the %dth? %s is not ready.", 14+i%5, task(i/2+1))}
	}
	if err := b.invoke(from, "_send_message", params); err != nil {
		return fmt.Errorf("message %d: %w", i, err)
	}
	return nil
}

func mustJSON(v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return raw
}

func actionDefs() []substrate.ActionDef {
	str := func(desc string) substrate.ParamSpec {
		return substrate.ParamSpec{Type: "string", Required: true, Description: desc}
	}
	return []substrate.ActionDef{
		{ID: StaleAction, Description: "Escalate a task to the lead", Params: map[string]substrate.ParamSpec{"task": str("the task's key, e.g. task_007"), "reason": str("why")},
			Writes: []substrate.WriteTemplate{{Key: "escalations", Merge: mustJSON(map[string]string{"${params.task}": "${params.reason}"})}}},
		{ID: "claim", Description: "Claim a task to review", Params: map[string]substrate.ParamSpec{"task": str("the task's key, e.g. task_007")},
			Writes: []substrate.WriteTemplate{{Key: "${params.task}", Merge: mustJSON(map[string]string{"owner": "${self}", "status": "doing"})}}},
		{ID: "approve", Description: "Approve a reviewed task: it is done", Params: map[string]substrate.ParamSpec{"task": str("the task's key")},
			Writes: []substrate.WriteTemplate{{Key: "${params.task}", Merge: mustJSON(map[string]string{"status": "done", "approved_by": "${self}"})}}},
		{ID: "set_status", Description: "Move a task along", Params: map[string]substrate.ParamSpec{"task": str("the task's key"),
			"status": {Type: "string", Required: true, Description: "where it is now", Enum: []any{"todo", "doing", "review", "done", "blocked"}}},
			Writes: []substrate.WriteTemplate{{Key: "${params.task}", Merge: mustJSON(map[string]string{"status": "${params.status}"})}}},
	}
}

func viewDefs() []substrate.ViewDef {
	tasks := `state._shared.filter(k, k.startsWith("task_"))`
	return []substrate.ViewDef{
		{ID: "open_count", Expr: tasks + `.filter(k, state._shared[k].status != "done").size()`},
		{ID: "in_review", Expr: tasks + `.filter(k, state._shared[k].status == "review").size()`},
		{ID: "team_size", Expr: `size(agents)`},
		{ID: "plan", Expr: `"Review every task before the release date; a blocked task goes to the lead."`},
		{ID: "review_queue", Expr: tasks + `.filter(k, state._shared[k].status == "review").map(k, k)`},
	}
}
