// Package teamroom builds the room a team has after a week of work, for
// the tests and benchmarks that must see the pages, tool results and
// lists at real size (issue 42): the page tests (lobby/web), the browser
// tests (cmd/syncd), the MCP tests and the benchmarks share this one room
// rather than each growing a small one of its own.
//
// The room is built only through the product's operations (the lobby's
// ClaimRoom and ShareRoom, the substrate's Join, Embody, WriteState,
// RegisterAction, RegisterView and Invoke, and the loom's Run), so it is
// what those operations make, audit entries and thread records included.
// It is deterministic (the same ids, texts and order every time; only
// times and tokens differ) and takes a few seconds.
//
// Its shape:
//
//   - Room "launch" (label "Checkout launch"), owned by the first person
//     (Options.Owner, default maya), shared with the second
//     (Options.Member, default raj) as a collaborator.
//   - 10 agents: the people's web agents maya:web and raj:web (made as
//     the pages make them, lobby.PersonActor); maya's model agent
//     maya:claude-ai, embodied for maya by an MCP client and named like
//     her ("maya"); claude, the room's model; and six token agents:
//     planner, builder, tester, designer, writer, ops. All are present
//     (heartbeat active) when Build returns.
//   - 60 tasks in _shared.tasks, a list of {id "T-1"…"T-60", title,
//     status todo|doing|review|done, owner, priority low|normal|high,
//     points}: T-1…T-58 in one batch write by the room, T-59 and T-60 by
//     add_task. T-57 is "Rotate the payment provider keys", the task to
//     look for beyond a table's first 50 rows.
//   - 7 actions: add_task (title, priority enum), claim (task),
//     set_status (task, status enum todo|doing|review|done; overrides go
//     to _shared.status), ship (if: no task is open: a clause no simple
//     sentence reads, false), deploy_preview (a
//     10-minute cooldown, invoked once by ops, so it is cooling down when
//     Build returns), vote (option enum), note (text, kind enum).
//   - 15 views, 14 with render hints: the metrics open_count, done_count,
//     team_size and in_review (group "progress"); phase_watch (watch);
//     claim_form (action-form, its task choices from the unhinted view
//     todo_tasks) and status_form (action-form with an enum param);
//     controls (action-bar: ship, deploy_preview); vote_choice (choice);
//     task_board (board) and task_table (table of all 60 tasks, no
//     max_rows) in "task_flow"; plan (markdown), done_feed (feed) and
//     notes_heading (section) in "notes".
//   - 313 messages sent with _send_message in 8 threads (subjects in
//     Threads), by every agent, some direct (to) and some asking for an
//     acknowledgement; the 12 invocations above add their own entries to
//     _messages, 325 in all.
//   - A loom of 75 nodes in two trees, "checkout-launch" (tree 1, 50
//     nodes) and "retro" (tree 2, 25), written by the two people (from
//     their web agents, so as people) and the model claude.
package teamroom

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// Person is a signed-up person: the user id their account has and the
// username pages name them by.
type Person struct {
	UserID, Username string
}

// Options say who the room is for. The people must exist as accounts
// (smcp_users) before Build: making accounts is the authorization
// server's, which a test does its own way (a passkey sign-up in a
// browser, or rows it inserts).
type Options struct {
	// Room is the room's id. Default "launch".
	Room string
	// Owner owns the room and writes in the loom. Default
	// {"user_maya", "maya"}.
	Owner Person
	// Member is a collaborator who writes in the loom too. Default
	// {"user_raj", "raj"}.
	Member Person
}

// Room is the built room and the credentials to reach it.
type Room struct {
	ID string
	// Token is the room token (room authority), ViewToken its view token.
	Token, ViewToken string
	// Agents are the agents' tokens by id, for the six token agents and
	// claude (the people's agents are reached by signing in).
	Agents map[string]string
	// Threads are the threads' seqs (a thread is named by its first
	// message) by subject.
	Threads map[string]int64
	// Owner and Member are the people, as Options gave them (defaults
	// filled).
	Owner, Member Person
}

// Counts of what Build makes, for tests to assert against.
const (
	Agents      = 10
	Tasks       = 60
	Messages    = 313
	ThreadsN    = 8
	Actions     = 7
	Views       = 15
	Surfaces    = 14
	LoomNodes   = 75
	Invocations = 12
	// DeepTask is a task past a table's first 50 rows.
	DeepTask      = "T-57"
	DeepTaskTitle = "Rotate the payment provider keys"
)

// Threads are the subjects of the room's threads, in the order they start.
var Threads = []string{
	"Checkout launch plan", "Payment provider", "Accessibility review", "Load test results",
	"Release notes", "Design of the receipt page", "On-call rota", "Retro topics",
}

var tokenAgents = []struct{ id, name, role string }{
	{"planner", "Ada Planner", "lead"}, {"builder", "Bo Builder", "dev"}, {"tester", "Cy Tester", "qa"},
	{"designer", "Di Designer", "design"}, {"writer", "Ed Writer", "docs"}, {"ops", "Flo Ops", "ops"},
}

var titles = []string{
	"Write the onboarding guide", "Fix flaky integration tests", "Review the accessibility report", "Upgrade the PostgreSQL driver",
	"Translate the release notes", "Measure checkout latency", "Refactor configuration loading", "Document the HTTP API",
	"Design the receipt page", "Load test the payment flow", "Add retries to the webhook sender", "Clean up feature flags",
}

var statuses = []string{"todo", "doing", "review", "done"}
var priorities = []any{"low", "normal", "high"}

// Build makes the room. It fails on the first operation that fails, with
// that operation named.
func Build(ctx context.Context, svc *substrate.Service, lob *lobby.Lobby, opt Options) (*Room, error) {
	if opt.Room == "" {
		opt.Room = "launch"
	}
	if opt.Owner == (Person{}) {
		opt.Owner = Person{"user_maya", "maya"}
	}
	if opt.Member == (Person{}) {
		opt.Member = Person{"user_raj", "raj"}
	}
	b := &builder{ctx: ctx, svc: svc, room: opt.Room}
	out := &Room{ID: opt.Room, Agents: map[string]string{}, Threads: map[string]int64{}, Owner: opt.Owner, Member: opt.Member}

	meta, _ := json.Marshal(map[string]string{"label": "Checkout launch"})
	created, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: opt.Room, Meta: meta})
	if err != nil {
		return nil, fmt.Errorf("create room: %w", err)
	}
	out.Token, out.ViewToken = created.Token, created.ViewToken
	if _, err := lob.ClaimRoom(ctx, opt.Owner.UserID, opt.Room, created.Token, false); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	if err := lob.ShareRoom(ctx, opt.Owner.UserID, opt.Room, opt.Member.UserID, "collaborator"); err != nil {
		return nil, fmt.Errorf("share: %w", err)
	}
	admin := substrate.RoomPrincipal(opt.Room)

	agents, modelAgent, err := buildAgents(ctx, svc, lob, opt, out, admin)
	if err != nil {
		return nil, err
	}
	if err := buildState(ctx, svc, opt, admin, agents); err != nil {
		return nil, err
	}
	if err := b.invocations(opt, agents); err != nil {
		return nil, err
	}
	if err := b.messages(opt, out, agents, modelAgent); err != nil {
		return nil, err
	}
	if err := b.trees(svc, opt, admin, agents); err != nil {
		return nil, err
	}
	for id, p := range agents {
		if _, err := svc.Heartbeat(ctx, p, opt.Room, p.AgentID, "active"); err != nil {
			return nil, fmt.Errorf("heartbeat %s: %w", id, err)
		}
	}
	return out, nil
}

// buildAgents joins the token agents and the room's model, and makes the
// people's own agents and the owner's model agent; modelAgent is that
// one's id.
func buildAgents(ctx context.Context, svc *substrate.Service, lob *lobby.Lobby, opt Options, out *Room, admin *substrate.Principal) (agents map[string]*substrate.Principal, modelAgent string, err error) {
	// The agents: token agents, the room's model, the people's own.
	agents = map[string]*substrate.Principal{}
	for _, a := range append(tokenAgents, struct{ id, name, role string }{"claude", "Claude", "model"}) {
		j, err := svc.Join(ctx, admin, opt.Room, substrate.JoinRequest{ID: a.id, Name: a.name, Role: a.role})
		if err != nil {
			return nil, "", fmt.Errorf("join %s: %w", a.id, err)
		}
		out.Agents[a.id] = j.Token
		if agents[a.id], err = svc.Authenticate(ctx, j.Token); err != nil {
			return nil, "", fmt.Errorf("authenticate %s: %w", a.id, err)
		}
	}
	for _, person := range []Person{opt.Owner, opt.Member} {
		p, err := lob.PersonActor(ctx, person.UserID, person.Username, opt.Room)
		if err != nil {
			return nil, "", fmt.Errorf("web agent of %s: %w", person.Username, err)
		}
		agents[person.Username] = p
	}
	// The owner's model agent, as an MCP client embodies it: named for the
	// person, as the lobby names it.
	modelAgent = opt.Owner.Username + ":claude-ai"
	if _, err := svc.Embody(ctx, substrate.EmbodyRequest{Room: opt.Room, Agent: modelAgent, Name: opt.Owner.Username, Role: "mcp-client",
		Client: "claude-ai", User: opt.Owner.UserID, Grants: []string{"*"}}); err != nil {
		return nil, "", fmt.Errorf("embody %s: %w", modelAgent, err)
	}
	if agents[modelAgent], err = svc.EmbodiedPrincipal(ctx, opt.Room, modelAgent, opt.Owner.UserID); err != nil {
		return nil, "", fmt.Errorf("principal of %s: %w", modelAgent, err)
	}
	return agents, modelAgent, nil
}

// buildState writes the tasks (in one batch) and the agents' progress,
// and registers the vocabulary.
func buildState(ctx context.Context, svc *substrate.Service, opt Options, admin *substrate.Principal, agents map[string]*substrate.Principal) error {
	// The tasks, in one batch.
	var tasks []any
	for i := range Tasks - 2 {
		n := i + 1
		title := fmt.Sprintf("%s (part %d)", titles[i%len(titles)], i/len(titles)+1)
		if "T-"+fmt.Sprint(n) == DeepTask {
			title = DeepTaskTitle
		}
		tasks = append(tasks, map[string]any{"id": fmt.Sprintf("T-%d", n), "title": title, "status": statuses[i%len(statuses)],
			"owner": tokenAgents[i%len(tokenAgents)].id, "priority": priorities[i%len(priorities)], "points": i%5 + 1})
	}
	writes := []substrate.Write{
		{Scope: "_shared", Key: "tasks", Value: mustJSON(tasks)},
		{Scope: "_shared", Key: "status", Value: []byte(`{}`)},
		{Scope: "_shared", Key: "phase", Value: []byte(`"stabilising"`)},
		{Scope: "_shared", Key: "release", Value: []byte(`{"date": "2026-12-14", "channel": "stable", "regions": ["eu-west-1", "us-east-1"]}`)},
		{Scope: "_shared", Key: "votes", Value: []byte(`{}`)},
	}
	if _, err := svc.WriteState(ctx, admin, opt.Room, writes, true); err != nil {
		return fmt.Errorf("write tasks: %w", err)
	}
	for _, a := range tokenAgents {
		if _, err := svc.WriteState(ctx, agents[a.id], opt.Room, []substrate.Write{{Scope: a.id, Key: "progress", Value: mustJSON("working as " + a.role)}}, false); err != nil {
			return fmt.Errorf("write %s's progress: %w", a.id, err)
		}
	}

	for _, def := range actionDefs() {
		if _, err := svc.RegisterAction(ctx, admin, opt.Room, def); err != nil {
			return fmt.Errorf("register action %s: %w", def.ID, err)
		}
	}
	for _, def := range viewDefs() {
		if _, err := svc.RegisterView(ctx, admin, opt.Room, def); err != nil {
			return fmt.Errorf("register view %s: %w", def.ID, err)
		}
	}
	return nil
}

// invocations are the room's 12 invocations.
func (b *builder) invocations(opt Options, agents map[string]*substrate.Principal) error {
	// 12 invocations.
	invocations := []struct {
		by, action string
		params     map[string]any
	}{
		{"planner", "add_task", map[string]any{"title": "Announce the launch to support", "priority": "high"}},
		{opt.Owner.Username, "add_task", map[string]any{"title": "Check the refund flow on a phone", "priority": "normal"}},
		{"builder", "claim", map[string]any{"task": "T-1"}},
		{"tester", "claim", map[string]any{"task": "T-5"}},
		{opt.Member.Username, "claim", map[string]any{"task": "T-9"}},
		{"builder", "set_status", map[string]any{"task": "T-1", "status": "doing"}},
		{"tester", "set_status", map[string]any{"task": "T-5", "status": "review"}},
		{"ops", "deploy_preview", nil},
		{"designer", "vote", map[string]any{"option": "ship on Monday"}},
		{"writer", "vote", map[string]any{"option": "ship on Thursday"}},
		{"planner", "note", map[string]any{"text": "Support is briefed.", "kind": "decision"}},
		{opt.Member.Username, "note", map[string]any{"text": "The refund flow needs a second look.", "kind": "risk"}},
	}
	for _, inv := range invocations {
		if _, err := b.invoke(agents[inv.by], inv.action, inv.params); err != nil {
			return err
		}
	}
	return nil
}

// messages are the room's threads and their replies.
func (b *builder) messages(opt Options, out *Room, agents map[string]*substrate.Principal, modelAgent string) error {
	// The messages: 8 threads, 313 in all, each thread started by its own
	// agent and answered in turn by the others.
	senders := []string{"planner", "builder", "tester", "designer", "writer", "ops", "claude", opt.Owner.Username, opt.Member.Username, modelAgent}
	for i, subject := range Threads {
		from := senders[i%len(senders)]
		res, err := b.invoke(agents[from], "_send_message", map[string]any{"subject": subject, "body": fmt.Sprintf("Starting a thread on %s.", strings.ToLower(subject))})
		if err != nil {
			return err
		}
		if len(res.Writes) != 1 || res.Writes[0].SortKey == nil {
			return fmt.Errorf("the message starting %q has no seq", subject)
		}
		out.Threads[subject] = *res.Writes[0].SortKey
	}
	for i := range Messages - len(Threads) {
		subject := Threads[i%len(Threads)]
		from := senders[(i*3+1)%len(senders)]
		params := map[string]any{"reply_to": out.Threads[subject], "body": messageBody(i, subject)}
		switch {
		case i%41 == 7:
			to := senders[(i+2)%len(senders)]
			if to == from {
				to = senders[(i+3)%len(senders)]
			}
			params["to"] = []any{to}
		case i%53 == 11:
			params["ack"] = true
		}
		if _, err := b.invoke(agents[from], "_send_message", params); err != nil {
			return err
		}
	}
	return nil
}

// trees are the loom's two trees, written in turn by the owner, the
// member and the model.
func (b *builder) trees(svc *substrate.Service, opt Options, admin *substrate.Principal, agents map[string]*substrate.Principal) error {
	// The loom: the owner plants both trees and gives the model and the
	// member the right to write; then the three write in turn.
	lm := loom.Of(svc)
	owner, member, model := agents[opt.Owner.Username], agents[opt.Member.Username], agents["claude"]
	if err := b.loom(lm, admin, fmt.Sprintf("→ permit claude loom_aware loom_write loom_generate doc_read\n→ permit %s loom_aware loom_write doc_read doc_write", member.AgentID)); err != nil {
		return err
	}
	if err := b.loom(lm, owner, `→ new tree "checkout-launch" "The checkout launch began on a Monday, with the payment provider still unsigned."`+"\n"+
		`→ new tree "retro" "What went well, and what we would change next time."`); err != nil {
		return err
	}
	writers := []*substrate.Principal{owner, member, model}
	// Tree 1: 49 nodes past its root, as a main line with side branches
	// every fifth node; tree 2: 24 past its root.
	for _, t := range []struct{ tree, count int }{{1, 49}, {2, 24}} {
		for i := range t.count {
			node := i + 2 // the node this command makes
			parent := node - 1
			if i%5 == 4 {
				parent = node - 3 // a sibling: a branch
			}
			w := writers[i%len(writers)]
			text := loomText(t.tree, node, w == model)
			if err := b.loom(lm, w, fmt.Sprintf("→ add tree:%d from:%d %q\n→ yield", t.tree, parent, text)); err != nil {
				return err
			}
		}
	}
	return nil
}

type builder struct {
	ctx  context.Context
	svc  *substrate.Service
	room string
}

func (b *builder) invoke(p *substrate.Principal, action string, params map[string]any) (*substrate.InvokeResult, error) {
	raw := []byte(`{}`)
	if params != nil {
		raw = mustJSON(params)
	}
	res, err := b.svc.Invoke(b.ctx, p, b.room, action, raw)
	if err != nil {
		return nil, fmt.Errorf("%s invokes %s: %w", p.AgentID, action, err)
	}
	return res, nil
}

func (b *builder) loom(lm *loom.Loom, p *substrate.Principal, commands string) error {
	res, err := lm.Run(b.ctx, p, b.room, commands)
	if err != nil {
		return fmt.Errorf("loom %q as %s: %w", commands, p.AgentID, err)
	}
	if res.Errors > 0 {
		return fmt.Errorf("loom %q as %s: %s", commands, p.AgentID, res.Text)
	}
	return nil
}

func messageBody(i int, subject string) string {
	lines := []string{
		"I looked at this again this morning; the numbers hold.",
		"Can someone confirm before Thursday?",
		"Done on my side, over to review.",
		"There is a catch: the sandbox rejects refunds over 500 EUR.",
		"Agreed. Let us keep the scope as it is.",
		"I have written it up in the plan.",
		"Moving this to next week, it blocks nothing.",
	}
	return fmt.Sprintf("%s (%s, note %d)", lines[i%len(lines)], strings.ToLower(subject), i+1)
}

func loomText(tree, node int, model bool) string {
	if model {
		return fmt.Sprintf("The model continues: step %d of tree %d, where the team weighs what the launch still needs.", node, tree)
	}
	return fmt.Sprintf("Step %d of tree %d: someone on the team writes what happened next.", node, tree)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func actionDefs() []substrate.ActionDef {
	str := func(desc string, required bool) substrate.ParamSpec {
		return substrate.ParamSpec{Type: "string", Required: required, Description: desc}
	}
	enum := func(desc string, values ...any) substrate.ParamSpec {
		return substrate.ParamSpec{Type: "string", Required: true, Description: desc, Enum: values}
	}
	return []substrate.ActionDef{
		{ID: "add_task", Description: "Add a task to the backlog", Params: map[string]substrate.ParamSpec{"title": str("what is to be done", true), "priority": enum("how soon", priorities...)},
			Writes: []substrate.WriteTemplate{{Key: "tasks", Expr: true, Value: mustJSON(`state._shared.tasks + [{"id": "T-" + string(size(state._shared.tasks) + 1), "title": params.title, "status": "todo", "owner": "", "priority": params.priority, "points": 1}]`)}}},
		{ID: "claim", Description: "Claim a task to work on", Params: map[string]substrate.ParamSpec{"task": str("the task's id, e.g. T-3", true)},
			Writes: []substrate.WriteTemplate{{Key: "claim:${params.task}", Value: mustJSON("${self}")}}},
		{ID: "set_status", Description: "Move a task along", Params: map[string]substrate.ParamSpec{"task": str("the task's id", true), "status": enum("where it is now", "todo", "doing", "review", "done")},
			Writes: []substrate.WriteTemplate{{Key: "status", Merge: mustJSON(map[string]string{"${params.task}": "${params.status}"})}}},
		{ID: "ship", Description: "Ship the release", If: `size(state._shared.tasks.filter(t, t.status != "done")) == 0`,
			Writes: []substrate.WriteTemplate{{Key: "shipped", Value: []byte(`true`)}}},
		{ID: "deploy_preview", Description: "Deploy a preview build (once every 10 minutes)", OnInvoke: &substrate.OnInvoke{Timer: &substrate.Timer{MS: 600_000, Effect: "enable"}},
			Writes: []substrate.WriteTemplate{{Key: "preview", Value: mustJSON("${now}")}}},
		{ID: "vote", Description: "Vote on the launch day", Params: map[string]substrate.ParamSpec{"option": enum("the day", "ship on Monday", "ship on Thursday", "wait a week")},
			Writes: []substrate.WriteTemplate{{Key: "votes", Merge: mustJSON(map[string]string{"${self}": "${params.option}"})}}},
		{ID: "note", Description: "Note a decision or a risk", Params: map[string]substrate.ParamSpec{"text": str("the note", true), "kind": enum("what it is", "decision", "risk", "idea")},
			Writes: []substrate.WriteTemplate{{Key: "note:${self}", Value: mustJSON(map[string]string{"text": "${params.text}", "kind": "${params.kind}"})}}},
	}
}

func viewDefs() []substrate.ViewDef {
	hint := func(m map[string]any) json.RawMessage { return mustJSON(m) }
	open := `state._shared.tasks.filter(t, t.status != "done")`
	return []substrate.ViewDef{
		{ID: "open_count", Expr: `size(` + open + `)`, Render: hint(map[string]any{"type": "metric", "label": "Open tasks", "unit": "tasks", "order": 1, "group": "progress"})},
		{ID: "done_count", Expr: `size(state._shared.tasks.filter(t, t.status == "done"))`, Render: hint(map[string]any{"type": "metric", "label": "Done", "unit": "tasks", "order": 2, "group": "progress"})},
		{ID: "team_size", Expr: `size(agents)`, Render: hint(map[string]any{"type": "metric", "label": "Agents", "order": 3, "group": "progress"})},
		{ID: "in_review", Expr: `size(state._shared.tasks.filter(t, t.status == "review"))`, Render: hint(map[string]any{"type": "metric", "label": "In review", "unit": "tasks", "order": 4, "group": "progress"})},
		{ID: "phase_watch", Expr: `true`, Render: hint(map[string]any{"type": "watch", "label": "Phase", "keys": []string{"_shared.phase", "_shared.release"}, "order": 5, "group": "progress"})},
		{ID: "controls", Expr: `true`, Render: hint(map[string]any{"type": "action-bar", "label": "Release", "actions": []string{"ship", "deploy_preview"}, "order": 6, "group": "progress"})},
		{ID: "todo_tasks", Expr: `state._shared.tasks.filter(t, t.status == "todo").map(t, {"id": t.id, "title": t.title})`},
		{ID: "claim_form", Expr: `true`, Render: hint(map[string]any{"type": "action-form", "label": "Claim a task", "action": "claim", "options": map[string]any{"task": "todo_tasks"}, "order": 7, "group": "progress"})},
		{ID: "status_form", Expr: `true`, Render: hint(map[string]any{"type": "action-form", "label": "Move a task", "action": "set_status", "order": 8, "group": "progress"})},
		{ID: "vote_choice", Expr: `["ship on Monday", "ship on Thursday", "wait a week"]`, Render: hint(map[string]any{"type": "choice", "label": "Launch day", "action": "vote", "param": "option", "order": 9, "group": "progress"})},
		{ID: "task_board", Expr: `state._shared.tasks`, Render: hint(map[string]any{"type": "board", "label": "Task board", "group_by": "status", "lanes": statuses, "title": "title", "fields": []string{"id", "owner"}, "order": 10, "group": "task_flow"})},
		{ID: "task_table", Expr: `state._shared.tasks`, Render: hint(map[string]any{"type": "table", "order": 11, "group": "task_flow",
			"columns": []any{map[string]any{"key": "id", "label": "Task"}, map[string]any{"key": "title", "label": "Title"}, map[string]any{"key": "status", "label": "Status"}, map[string]any{"key": "owner", "label": "Owner"}, map[string]any{"key": "priority", "label": "Priority"}, map[string]any{"key": "points", "label": "Points"}}})},
		{ID: "notes_heading", Expr: `"Plans and what is done"`, Render: hint(map[string]any{"type": "section", "label": "Notes", "order": 20, "group": "notes"})},
		{ID: "plan", Expr: `"# The plan\n\nShip the **checkout launch** once every task is reviewed, and not before the payment provider signs."`, Render: hint(map[string]any{"type": "markdown", "label": "Plan", "order": 21, "group": "notes"})},
		{ID: "done_feed", Expr: `state._shared.tasks.filter(t, t.status == "done").map(t, t.title)`, Render: hint(map[string]any{"type": "feed", "label": "Done lately", "max_rows": 10, "order": 22, "group": "notes"})},
	}
}
