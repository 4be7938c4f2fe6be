package defs

import "encoding/json"

// StandardLibrary is the help key standard_library: ready-to-register
// action definitions. Each works as written (the tests register and invoke
// every one); they use only syntax cel-go accepts.
var StandardLibrary = []ActionDef{
	{ID: "set", Description: "Set a key in _shared to any value.", Intent: "share a fact",
		Params: map[string]ParamSpec{"key": {Type: "string", Required: true}, "value": {Required: true}},
		Writes: []WriteTemplate{{Scope: "_shared", Key: "${params.key}", Value: raw(`"${params.value}"`)}}},
	{ID: "delete", Description: "Delete a key from _shared.", Intent: "retract a fact",
		Params: map[string]ParamSpec{"key": {Type: "string", Required: true}},
		If:     `params.key in state._shared`,
		Writes: []WriteTemplate{{Scope: "_shared", Key: "${params.key}", Delete: true}}},
	{ID: "increment", Description: "Add to a number in _shared (absent counts as 0).", Intent: "count",
		Params: map[string]ParamSpec{"key": {Type: "string", Required: true}, "by": {Type: "number", Default: 1}},
		Writes: []WriteTemplate{{Scope: "_shared", Key: "${params.key}", Increment: raw(`"${params.by}"`)}}},
	{ID: "append", Description: "Append an entry to the _log scope (a log: each entry gets the next sequence number).", Intent: "record an event",
		Params: map[string]ParamSpec{"entry": {Required: true}},
		Writes: []WriteTemplate{{Scope: "_log", Append: true, Value: raw(`{"by": "${self}", "at": "${now}", "entry": "${params.entry}"}`)}}},
	{ID: "update_objective", Description: "Record your current objective in your own scope.", Intent: "say what you are working on",
		Params: map[string]ParamSpec{"objective": {Type: "string", Required: true}, "status": {Type: "string", Default: "active"}},
		Writes: []WriteTemplate{{Scope: "${self}", Key: "objective", Value: raw(`{"text": "${params.objective}", "status": "${params.status}", "updated_at": "${now}"}`)}}},
	{ID: "update_status", Description: "Publish your status as _shared.status.<you>.", Intent: "tell others how you are doing",
		Params: map[string]ParamSpec{"status": {Type: "string", Required: true}},
		Writes: []WriteTemplate{{Scope: "_shared", Key: "status", Merge: raw(`{"${self}": "${params.status}"}`)}}},
	// claim stays a template rather than the builtin seed 001 lists: what a
	// room claims (a key, a field of one, a slot in a list) and what counts
	// as free differ from room to room, and a builtin would fix one shape
	// that every other room then works around.
	{ID: "claim", Description: "Claim an unclaimed object in _shared by merging claimed_by: you. A template, not a builtin: adapt the key and what counts as free to your room.", Intent: "take a task so nobody duplicates it",
		Params: map[string]ParamSpec{"key": {Type: "string", Required: true}},
		If:     `params.key in state._shared && !("claimed_by" in state._shared[params.key])`,
		Writes: []WriteTemplate{{Scope: "_shared", Key: "${params.key}", Merge: raw(`{"claimed_by": "${self}", "claimed_at": "${now}"}`)}}},
	{ID: "submit_result", Description: "Publish your result as _shared.results.<you>.", Intent: "hand in work",
		Params: map[string]ParamSpec{"result": {Required: true}},
		Writes: []WriteTemplate{{Scope: "_shared", Key: "results", Merge: raw(`{"${self}": "${params.result}"}`)}}},
	{ID: "vote", Description: "Cast or change your vote: _shared.votes.<you> = choice.", Intent: "decide together",
		Params: map[string]ParamSpec{"choice": {Type: "string", Required: true}},
		Writes: []WriteTemplate{{Scope: "_shared", Key: "votes", Merge: raw(`{"${self}": "${params.choice}"}`)}}},
	{ID: "define_role", Description: "Define a role others can fill: _shared.roles.<role_id>. bootstrap_actions (standard-library ids or action definitions) and bootstrap_views (view definitions) are registered by the role's agent when the role is first filled through sync_embody. A role's id is its agent's id: never one with \":\" (those are people's agents, <username>:<client>); see help key roles.", Intent: "shape the team",
		Params: map[string]ParamSpec{"role_id": {Type: "string", Required: true}, "description": {Type: "string", Required: true},
			"bootstrap_actions": {Type: "array", Default: []any{}}, "bootstrap_views": {Type: "array", Default: []any{}}},
		If:     `!params.role_id.contains(":") && (!has(state._shared.roles) || !(params.role_id in state._shared.roles))`,
		Writes: []WriteTemplate{{Scope: "_shared", Key: "roles", Merge: raw(`{"${params.role_id}": {"description": "${params.description}", "bootstrap_actions": "${params.bootstrap_actions}", "bootstrap_views": "${params.bootstrap_views}", "filled_by": null, "defined_at": "${now}"}}`)}}},
	{ID: "fill_role", Description: "Fill a defined role that is unfilled or already yours (re-filling renews filled_at).", Intent: "take on a role",
		Params: map[string]ParamSpec{"role_id": {Type: "string", Required: true}},
		If:     `has(state._shared.roles) && params.role_id in state._shared.roles && (state._shared.roles[params.role_id].filled_by == null || state._shared.roles[params.role_id].filled_by == self)`,
		Writes: []WriteTemplate{{Scope: "_shared", Key: "roles", Merge: raw(`{"${params.role_id}": {"filled_by": "${self}", "filled_at": "${now}"}}`)}}},
	{ID: "vacate_role", Description: "Leave a role you fill.", Intent: "step back from a role",
		Params: map[string]ParamSpec{"role_id": {Type: "string", Required: true}},
		If:     `has(state._shared.roles) && params.role_id in state._shared.roles && state._shared.roles[params.role_id].filled_by == self`,
		Writes: []WriteTemplate{{Scope: "_shared", Key: "roles", Merge: raw(`{"${params.role_id}": {"filled_by": null}}`)}}},
	{ID: "decide_thread", Description: "Record what a thread (its first message's seq) decided, as _shared.decisions.<thread>: the outcome stays in state, where actions and views can use it, after the thread scrolls away.", Intent: "settle a discussion",
		Params: map[string]ParamSpec{"thread": {Type: "integer", Required: true}, "decision": {Type: "string", Required: true}},
		If:     `"_threads" in state && string(params.thread) in state._threads`,
		Writes: []WriteTemplate{{Scope: "_shared", Key: "decisions", Merge: raw(`{"${params.thread}": {"decision": "${params.decision}", "by": "${self}", "at": "${now}"}}`)}}},
	{ID: "publish_view", Description: "Copy one of your private keys to _shared.public.<you>.<key> (a snapshot; register a view with _register_view for a live projection). Registered in your own scope, so it reads your private state with your authority; invoked by anyone else it finds no state.self and fails.", Intent: "share part of your private state",
		Scope:  ScopeSelf,
		Params: map[string]ParamSpec{"key": {Type: "string", Required: true}},
		If:     `params.key in state.self`,
		Writes: []WriteTemplate{{Scope: "_shared", Key: "public", Merge: raw(`"{self: {params.key: state.self[params.key]}}"`), Expr: true}}},
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }
