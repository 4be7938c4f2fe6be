// Package help holds the system help texts: content, not rules. Each key's
// text is worded in the caller's surface vocabulary (errs.Words) and quotes
// the limits the core passes in (Limits); the core (substrate/help.go)
// answers the help operation, a room's own _help overrides, and the help
// builtin over it.
package help

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
)

// Limits are what the texts quote: the core's limits and the few values
// of its own that a text shows. The zero value quotes zeros; the core
// fills every field from its options.
type Limits struct {
	// MaxValueBytes and MaxValueDepth cap a stored value
	// (substrate.Limits).
	MaxValueBytes, MaxValueDepth int
	// ViewCostPerRead, ActionCostPerRead and EnabledCostPerRead are the
	// per-read expression budgets (substrate.Limits).
	ViewCostPerRead, ActionCostPerRead, EnabledCostPerRead int
	// RoomCostPerSecond is the room's expression budget; negative is off
	// (substrate.Limits).
	RoomCostPerSecond int
	// GuestShare and ViewLinkShare are the parts of RoomCostPerSecond
	// signed-in observers and the view link get on top of it.
	GuestShare, ViewLinkShare float64
	// GateMinCost is the least an evaluation counts against a budget.
	GateMinCost int
	// GateQuantum is how long a gate reading now keeps its result;
	// negative is none (substrate.Limits).
	GateQuantum time.Duration
	// NowRecheck is how often a wait using now re-checks
	// (substrate.WaitOptions).
	NowRecheck time.Duration
	// Expr are one expression's limits (source, cost, time).
	Expr expr.Options
	// MaxContextBytes is the largest max_bytes a read takes on a surface
	// with no result limit of its own (see ResultLimiter).
	MaxContextBytes int
	// VersionsRead returns the read arguments that show scope's entry
	// versions (the core decides which read shows them).
	VersionsRead func(scope string) map[string]any
	// StandardLibrary is the key standard_library's content: the core's
	// ready-to-register action definitions.
	StandardLibrary any
}

// Content is the system help text of key, worded for the caller's
// surface (w): the operations it names are routes for REST and tool calls
// for MCP. ok is false for a key that is not a system key.
func Content(key string, w errs.Words, lim Limits) (content any, ok bool) {
	say := func(op errs.Op, args map[string]any) string { return w.Say(errs.Step{Op: op, Args: args}) }
	read := say(errs.OpReadContext, nil)
	switch key {
	case "index":
		return map[string]any{
			"about": "sync rooms: versioned, scoped state; actions (writes anyone can invoke, with their registrar's authority); views (public CEL projections); wait on conditions.",
			"keys":  sortedKeys(),
			"start": "Read the context (" + read + "), then invoke actions. No actions yet? See vocabulary_bootstrap.",
		}, true
	case "guide":
		lines := []string{
			"1. Read: " + read + " gives state (yours as self), views, agents, actions (with available), messages and _context (what was left out and how to get it).",
			"2. Act: " + say(errs.OpInvoke, map[string]any{"action": "<id>", "params": map[string]any{}}) + ". Actions read and write with their registrar's authority (an action in _shared reads only communal scopes; register in your own scope to read yours); your credential carries your identity (never pass it as a parameter).",
			"3. Talk: " + say(errs.OpInvoke, map[string]any{"action": "_send_message", "params": map[string]any{"body": "…", "to": "<agent>"}}) + ". Directed messages raise the recipient's directed_unread. Reply in a thread with reply_to, ask for acknowledgement with ack: true, find anything with " + say(errs.OpSearch, map[string]any{"q": "…"}) + " (help keys threads, acknowledgements, search).",
			"4. Shape the room: " + say(errs.OpRegisterAction, map[string]any{"id": "…", "params": "…", "if": "…", "writes": "…"}) + " and " + say(errs.OpRegisterView, map[string]any{"id": "…", "expr": "…"}) + ". Registering an id again replaces it (and reports what changed).",
			"5. Wait instead of polling: " + say(errs.OpWait, map[string]any{"condition": "<CEL>"}) + " returns when the condition holds, or at the timeout with timeout: true; then simply call again.",
		}
		if write := say(errs.OpWriteState, nil); write != "" {
			lines = append(lines, "6. Direct state writes ("+write+") need scope authority: your own scope, granted scopes, or the room token.")
		}
		lines = append(lines, fmt.Sprintf("Values (state, params, message bodies) are JSON of at most %d bytes (value_too_large), nested at most %d levels of arrays and objects (invalid_value); a view returning a deeper value shows an _error.", lim.MaxValueBytes, lim.MaxValueDepth))
		lines = append(lines, `Errors carry {"error": code, "message", "hint", "next"}: the hint says what to do instead, next is the call that does it.`)
		return strings.Join(lines, "\n"), true
	case "directed_messages":
		return strings.TrimSpace(`
Someone sent you a directed message (messages.directed_unread > 0). Read the context: messages.recent lists messages, and those whose "to" names you are for you.
Reading the context with messages marks them read. Answer with ` + say(errs.OpInvoke, map[string]any{"action": "_send_message", "params": map[string]any{"body": "…", "to": "<their id>"}}) + `.
To wait for the next one: ` + say(errs.OpWait, map[string]any{"condition": "messages.directed_unread > 0"})), true
	case "contested_actions":
		return strings.TrimSpace(`
Several actions write the same state key (views._contested lists "<scope>.<key>": [action ids]). That is fine when intended (a counter anyone bumps) and a bug when two agents' vocabularies overlap by accident.
Check who writes what with ` + say(errs.OpReadContext, map[string]any{"only": "actions", "depth": "full"}) + `; guard writes with if or if_version; merge duplicates into one action, or delete the one you registered by mistake with _delete_action.`), true
	case "context_shaping":
		return strings.TrimSpace(`
The context read (`+read+`) takes these shaping fields; the wait (`+say(errs.OpWait, nil)+`) takes depth, only, messages_limit and max_bytes too, and context and since:
- depth: lean (default) | full | usage. full adds each action's params, writes, if, scope and intent; usage adds invocation counts.
- only: "state,views,…", "state.<scope>" or "views.<id>": keep just those sections, one scope, or single views.
- prefix: "<start>", keys_after: "<key>": state keys that start with prefix, after keys_after in key order; a scope too large for one read is read page by page (a cut names the next page).
- messages_after: <seq>, messages_limit: <n> (default 100, max 500): page the message log; reading messages marks them read.
- include: "_messages,_audit": add those logs to state (newest messages_limit entries; _audit needs room authority or an _audit grant).
- max_bytes: the size budget, 1000 to `+strconv.Itoa(maxBudget(w, lim.MaxContextBytes))+` (what does not fit is summarised; _context.budget lists each cut and the read that returns it, whose own answer fits the default budget).
- A wait wakes with a delta: what changed since your last read (or since: <seq>), listed in _context.delta, with the unread messages addressed to you first; context "full" returns the whole context, "none" only whether the condition held. A timeout returns the condition alone unless context is given.
_context lists the sections present, what was elided, and the read that returns it (_expand); _context.entries_unevaluated counts state entries hidden because the room's entry-level enabled expressions cost more than one read evaluates.`) + resultLimit(w), true
	case "vocabulary_bootstrap":
		return strings.TrimSpace(`
This room has no actions of its own yet. Give it a vocabulary: register the actions your work needs (` + say(errs.OpRegisterAction, nil) + `).
The help key standard_library has ready-made definitions (set, increment, claim, vote, define_role, fill_role, …): register one of them, adapting ids and keys to your task.
Prefer few, purposeful actions with an intent and an if that guards their precondition; register views for what everyone should see.`), true
	case "standard_library":
		return lim.StandardLibrary, true
	case "search":
		return strings.TrimSpace(`
Find what was said or decided: ` + say(errs.OpSearch, map[string]any{"q": "deadline friday"}) + ` searches the messages, state (keys and values) and views you may read, best first, each hit with a snippet (matches in «»). It finds exactly what a read would show you: never a private scope, a gated entry or message, or loom content you may not read.
- Words must all appear, in any form ("deciding" finds "decided"); "a phrase" in quotes, or between alternatives, -word leaves one out.
- Filters: scope ("_messages", "self", "views", a scope), from (the sender or writer), kind (a message kind), thread (a thread's first seq), after and before (RFC 3339 times or dates).
- Paging: a result with more names the call for the next page (its offset); limit is 1–50 (default 10).
- Cost: a query has at most 16 words; one credential runs at most 2 searches at once; a search's database time is charged to the room's expression budget (a common word in a big room costs the most: narrow with scope, from or a time range). Past any of these, room_busy with retry_after_ms.` + searchRooms(w)), true
	case "threads":
		return strings.TrimSpace(`
A thread is a conversation under a subject. Start one: ` + say(errs.OpInvoke, map[string]any{"action": "_send_message", "params": map[string]any{"body": "When do we ship?", "subject": "Release date"}}) + `. Answer a message: ` + say(errs.OpInvoke, map[string]any{"action": "_send_message", "params": map[string]any{"body": "Friday", "reply_to": 42}}) + ` (42 is the seq of the message you answer; the reply joins its thread and carries its subject).
- The context's messages.threads lists the active threads (subject, participants, latest message, unread), unread first; each names the read that returns it whole: ` + say(errs.OpReadContext, map[string]any{"only": "messages", "thread": 42}) + `.
- Wait for the next message in a thread: ` + say(errs.OpWait, map[string]any{"thread": 42}) + ` (no condition needed; state._threads["42"].latest is the thread's newest seq, for conditions of your own).
- state._threads holds each thread's record (subject, participants, count, latest); only _send_message writes it. A thread's record lapses 30 days after its last message (the messages stay).`), true
	case "acknowledgements":
		return strings.TrimSpace(`
Ask for acknowledgement when you must know a message landed: ` + say(errs.OpInvoke, map[string]any{"action": "_send_message", "params": map[string]any{"body": "Deploy freeze from 5pm", "to": []string{"bo", "cy"}, "ack": true}}) + ` (without to, every other agent is asked).
- A recipient acknowledges: ` + say(errs.OpInvoke, map[string]any{"action": "_ack", "params": map[string]any{"seq": 42}}) + `. Acknowledgements not given in time show in the recipient's _context._attention.overdue_acks, each with that call.
- The message, wherever it is shown, carries receipts: to, read_by (from the recipients' reads), acked_by, pending. state._acks["42"] is the record ({from, to, at, acked}).
- Wait until all have acknowledged: ` + say(errs.OpWait, map[string]any{"condition": `size(state._acks["42"].acked) == size(state._acks["42"].to)`})), true
	case "roles":
		return strings.TrimSpace(`
A role is an entry of _shared.roles: {"<role id>": {"description", "bootstrap_actions", "bootstrap_views", "filled_by"}}. Whoever may write _shared.roles defines roles: the room token, agents granted _shared, and anyone through an action that writes it (define_role in standard_library).
A role's id is also the id of its agent: filling the role (people fill roles from their MCP client: sync_embody with role) makes that agent on first use, and whoever fills the role after it is vacated takes over the same agent, with its scope, actions and views.
Ids with ":" belong to people: <username>:<client> and <username>:web are the agents people drive themselves, and a role never takes one (filling such a role is invalid_field, reason person_id). Filling a role never adopts an agent that was not made for that role: not a person's own agent (forbidden, reason personal_agent), not one joined with a token (reason token_agent), and not one another person fills (reason role_filled), which includes one whose agent another person still drives (not idle and seen within the idle lapse), whatever filled_by says.`), true
	case "vocabulary_review":
		return strings.TrimSpace(`
# Vocabulary review

The room's vocabulary (its actions and views) is assessed on every context read: _context._attention says what deserves your attention, and the _vocabulary_health view (in views) gives the assessment with its reasons and suggestions. It is computed from metadata only (registrations, invocations, message kinds, senders and timing, which state keys a message names), never from what messages say, and it never hides anything: what a lean read leaves out is counted, with the read that shows it.

## Progressive vocabulary
Recently registered actions are being invoked: the room's affordances are growing productively. Keep registering vocabulary as the work needs it.

## Stable vocabulary
The vocabulary is established and used; nothing new recently.

## Degenerating vocabulary
Signals: views that fail to evaluate (broken: _attention.broken_views, your own with their errors in your_broken_views; a view another agent registered is that agent's to fix: it is counted in _vocabulary_health.broken_views_by, by registrar, but not listed for you, not your finding, and it rates the room degenerating only when the views of several agents break and are more than stale_fraction of the views; a broken view registered with the room token is everyone's); actions registered a while ago and never invoked since (stale); many more messages than invocations (the informal channel dominates); message patterns (_vocabulary_health.patterns): messages that keep coming just before the same invocation (at least pattern_min times, and at least twice as often as the room's message and invocation rates would give by chance: chatter interleaved with work is not a pattern), messages after failed invocations, frequent messages about a shared key no action writes (an action writes a key its template names, matches with its ${…} parts as wildcards, or, for a template that is all ${…}, one it wrote in the recent log or a sibling of one: task_7 beside task_212); actions whose descriptions and intents state overlapping purposes (overlapping_purposes). Measured on a scripted room of 150 steps (3 planted patterns among chatter and unrelated work): 3 suggestions, all planted ones (precision 3/3, recall 3/3); without the chance test it made 7 (precision 3/7). The strongest finding is also _attention.finding, which a budget never cuts. On the review room (10 agents, 500 tasks, 1,000 messages; planted: a gap, a contested claim, a blocked task, a stale action; noise: one agent's mistyped view, five quiet views) 100 % of what _attention lists points at a planted signal for each of the ten readers (it was 20 %: substrate/salience TestAttentionPrecisionOnTheReviewRoom).

## Contested claims and blocked work
_attention.contested lists claims several agents made on one target in the recent log (the last 500 entries), at most contest_within (default 20) room mutations apart: the same action invoked successfully with the same arguments by different agents, where it inserts, replaces, merges or deletes an entry (two agents claimed task 42), and the same entry of _shared or of a public scope written directly by different agents. Appends and increments (votes, notes, counters) add up and contest nothing; an invocation the vocabulary refused (a failed if) settled the claim and contests nothing; the room token settles and never competes. Each says {action, params} or {entry}, the agents and the latest seq; settle it with an action whose if refuses a second claim.
_attention.blocked lists (first 5 by entry; blocked_more counts the rest) the work items you are shown whose status is blocked, waiting, on hold or stuck (or starts with blocked or waiting), that say blocked: true, or that name what they wait on (blocked_by, waiting_on, waiting_for) and are not done: an object entry of _shared or of a public scope, or an object in a list such an entry holds (named entry[id], or entry[index]).

## Revision patterns
- Fix a broken view: register it again with the same id and a corrected expression (` + say(errs.OpRegisterView, map[string]any{"id": "<same id>", "expr": "…"}) + `).
- Retire a stale action the room does not need: _delete_action {id}.
- Formalise a message pattern: register an action for what agents keep negotiating; messages are for novel situations, not routine coordination.
- Refactor contested targets: one action with richer parameters, or one key per action and a view that aggregates (help key contested_actions).

## Attention
_context._attention: broken_views; your_broken_views (always, whatever you asked for); stale_actions (listed at lean when they are more than stale_fraction of the actions); since_your_last_read {from_seq, state_changes, new_actions, actions_invoked, views_changed, new_messages}; you_elided (sections this read left out, by request or budget, that changed since your last read); finding (the strongest finding of _vocabulary_health, in one line: your own broken view first, then the strongest message pattern); contested; blocked and blocked_more; low_salience (actions nobody has invoked for a long while: they still work; views are not marked, as every context read shows them); vocabulary_health. An agent's first read of a room is at depth full, once, with _context.note saying so.

## Thresholds
A room sets them in the state entry _shared._config, under "salience": {"stale_after_mutations": 50, "stale_after_minutes": 60, "stale_fraction": 0.3, "message_ratio": 3, "decay": 0.95, "low_salience": 0.2, "omit_low_salience_at_lean": false, "first_read_full": true, "pattern_min": 3, "contest_within": 20, "off": false} (the defaults). An item's salience score rises by one on each use (an action's invocation; a view read by an invoked action) and is multiplied by decay on each context read of the room.

## The principle
Vocabulary is a theory about what the room is for. Good theories predict new behaviour; degenerating ones patch old failures. Review it the way a scientist reviews a theory: is it enabling new work, or accommodating old problems?`), true
	case "if_version":
		return strings.TrimSpace(`
Every state entry has a version: 1 when created, +1 per write. A write with if_version: N applies only if the entry is at version N (0 means "must not exist"); otherwise it fails with version_conflict and current_version, and nothing in the request is written.
Read an entry's version with ` + say(errs.OpReadContext, lim.VersionsRead("<scope>")) + `: a read of one scope shows, beside its entries, versions.<scope>.<key> (no other read shows versions).
Read-modify-write safely: read the scope so, compute, write with if_version set to the version you read, and on version_conflict read it again and retry.
Action writes take if_version too, also as a template: "if_version": "${params.version}".`), true
	case "expressions":
		cel := lim.Expr
		return map[string]any{
			"language": "CEL (Common Expression Language, cel-go).",
			"variables": map[string]string{
				"state":    "scope → key → value of the scopes you can read; your own scope also as state.self. Logs (_messages, _audit) are not in state: use messages.",
				"views":    "view id → value (an evaluation error shows as {\"_error\": …}); views._contested lists keys written by several actions.",
				"agents":   "agent id → {name, role, status, waiting_on, last_heartbeat, account?}: account is the username of the person driving the agent, absent for agents joined with a token.",
				"actions":  "action id → {enabled, available} (inside views only enabled).",
				"messages": "{count, unread, directed_unread}.",
				"self":     "your agent id (\"\" for room and view tokens).",
				"params":   "the invocation's parameters (in if, result and expr writes).",
				"now":      "the current time (timestamp): now.getHours(), now - duration(\"1h\"). A wait comparing now with a moment (now > timestamp(\"2026-05-01T09:00:00Z\"), now - timestamp(state._shared.at) > duration(\"5m\")), directly or through views and gates, wakes at that moment; one using now otherwise (now.getHours()) re-checks every " + lim.NowRecheck.String() + ".",
			},
			"functions": append(append([]string{}, expr.Functions...),
				"cel-go extensions: strings (lowerAscii, split, join, replace, format, …), lists (lists.range, slice, flatten, sort, distinct, …), math (math.greatest, math.least, …), sets (sets.contains, …), base64, optional values (state._shared.?x.orValue(default))"),
			"numbers":      "whole numbers are int, others double; compare freely, but convert before mixing in arithmetic: double(state._shared.count) * 0.5",
			"missing keys": "state._shared.x fails when x is absent: test with has(state._shared.x) or \"x\" in state._shared, or read state._shared.?x.orValue(default). has() takes one field selection; the two-argument form does not exist.",
			"examples": []string{
				`state._shared.phase == "review"`,
				`views.all_ready && messages.directed_unread == 0`,
				`state._shared.tasks.values().filter(t, !has(t.claimed_by)).size() > 0`,
				`state.self.health > 50 ? "healthy" : "wounded"`,
				`agents.exists(a, agents[a].status == "waiting")`,
			},
			"limits": map[string]any{"source_bytes": cel.MaxSourceBytes, "cost": cel.CostLimit, "time_ms": cel.Timeout.Milliseconds(),
				"views_cost_per_read":         lim.ViewCostPerRead,
				"value_depth":                 fmt.Sprintf("%d levels of arrays and objects in any value stored or returned by a view (a scalar is 0); deeper: invalid_value, or the view's _error", lim.MaxValueDepth),
				"actions_cost_per_read":       fmt.Sprintf("%d for all of a room's actions' enabled and if together, evaluated for availability at each read (each counts at least %d); actions past it read as unavailable (an invocation still evaluates its own), and a registration past it fails with action_budget_exceeded", lim.ActionCostPerRead, lim.GateMinCost),
				"room_cost_per_second":        roomCostHelp(lim),
				"gate_quantum":                gateQuantumHelp(lim.GateQuantum),
				"entry_enabled_cost_per_read": fmt.Sprintf("%d for all of a room's entry-level enabled expressions together (each counts at least %d; evaluated for the reader and again per registrar); entries past it are hidden (_context.entries_unevaluated), and a write adding a gate past it fails with enabled_budget_exceeded", lim.EnabledCostPerRead, lim.GateMinCost)},
		}, true
	}
	return nil, false
}

// Keys are the system help keys, in the order a hint lists them.
var Keys = []string{"index", "guide", "vocabulary_bootstrap", "standard_library", "roles", "directed_messages",
	"contested_actions", "context_shaping", "if_version", "expressions", "vocabulary_review", "search", "threads", "acknowledgements"}

// roomCostHelp words the room's expression budget for help.
func roomCostHelp(lim Limits) string {
	perSecond := lim.RoomCostPerSecond
	if perSecond < 0 {
		return "off"
	}
	return fmt.Sprintf("%d for everything the room's reads, waits and invocations evaluate (each evaluation at least %d; memoised results free), %d more for signed-in observers and %d more for the view link, neither of whose reads spends the members' part or the other's; spent, requests get room_busy with Retry-After until it refills", perSecond, lim.GateMinCost, int(float64(perSecond)*lim.GuestShare), int(float64(perSecond)*lim.ViewLinkShare))
}

func gateQuantumHelp(q time.Duration) string {
	if q < 0 {
		return "none: entry-level enabled expressions that read now are evaluated at every read"
	}
	return fmt.Sprintf("%s: an entry-level enabled expression that reads now (and not agents) is evaluated once per reader per %s, so such a gate may show or hide its entry up to that late", q, q)
}

// ResultLimiter is a surface's vocabulary whose results have a size
// limit (MCP: what a client shows its model whole).
type ResultLimiter interface {
	// ResultLimit is the most characters a result holds and the largest
	// max_bytes a read there takes.
	ResultLimit() (chars, maxBytes int)
}

// maxBudget is the largest max_bytes a read on w's surface takes: the
// surface's own limit, or otherwise the server's.
func maxBudget(w errs.Words, server int) int {
	if l, ok := w.(ResultLimiter); ok {
		_, n := l.ResultLimit()
		return n
	}
	return server
}

// resultLimit says, on a surface with a result limit, to page rather
// than ask for more.
func resultLimit(w errs.Words) string {
	l, ok := w.(ResultLimiter)
	if !ok {
		return ""
	}
	chars, maxBytes := l.ResultLimit()
	return fmt.Sprintf("\nHere a result holds at most %d characters (past that a client shows its model only a preview), so max_bytes goes up to %d and no advice names more: page instead. A cut names its next page (keys_after, messages_after, prefix); a single value larger than a result is read by evaluating it (%s), which returns it page by page (substring, slice, its keys), each page naming the next.",
		chars, maxBytes, w.Say(errs.Step{Op: errs.OpEval, Args: map[string]any{"expr": `state._shared["<key>"]`}}))
}

// searchRooms is what a surface adds to the search help: the search of
// all one's rooms, where it has one.
func searchRooms(w errs.Words) string {
	if all := w.Say(errs.Step{Op: errs.OpSearch, Room: "*", Args: map[string]any{"q": "…"}}); strings.Contains(all, `"room":"*"`) {
		return "\n- " + all + " searches all your rooms at once."
	}
	return ""
}

// sortedKeys is Keys in key order, as the index lists them.
func sortedKeys() []string {
	keys := slices.Clone(Keys)
	slices.Sort(keys)
	return keys
}
