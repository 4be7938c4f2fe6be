package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// call is one tool call: the session it resolved to and the services.
type call struct {
	opt  *Options
	sess *lobby.Session
}

// tool is a tool's definition and its thin adapter: decode, one lobby or
// substrate operation, encode.
type tool struct {
	def *sdk.Tool
	run func(ctx context.Context, c *call, args json.RawMessage) (any, error)
}

func ptr[T any](v T) *T { return &v }

func annotations(title string, readOnly, destructive, idempotent bool) *sdk.ToolAnnotations {
	return &sdk.ToolAnnotations{Title: title, ReadOnlyHint: readOnly, DestructiveHint: ptr(destructive), IdempotentHint: idempotent, OpenWorldHint: ptr(false)}
}

// schema builds an object schema from properties; required lists the
// required ones.
func schema(props map[string]any, required ...string) map[string]any {
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func str(desc string) map[string]any  { return map[string]any{"type": "string", "description": desc} }
func num(desc string) map[string]any  { return map[string]any{"type": "integer", "description": desc} }
func obj(desc string) map[string]any  { return map[string]any{"type": "object", "description": desc} }
func anyv(desc string) map[string]any { return map[string]any{"description": desc} }

var roomProp = str("Room id. Defaults to the room you are embodied in or last focused.")

// decode reads tool arguments strictly: a misspelt argument is an error.
func decode(args json.RawMessage, v any) error {
	if len(args) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	if err := strictJSON(args, v); err != nil {
		return errs.New(errs.InvalidField, "arguments do not fit the tool's schema: %v", err).WithHint("check the argument names and types against the tool's input schema")
	}
	return nil
}

// acting runs fn with the embodied agent's authority in its room; without
// an embodiment it fails with the call to make.
func (c *call) acting(ctx context.Context, fn func(p *substrate.Principal, room string) (any, error)) (any, error) {
	p, err := c.opt.Lobby.Actor(ctx, c.sess)
	if err != nil {
		return nil, err
	}
	p.Words = Words
	return fn(p, c.sess.RoomID)
}

// principal is the caller's authority in room: its agent there when
// embodied in it, an observer otherwise.
func (c *call) principal(ctx context.Context, room string) (*substrate.Principal, error) {
	p, _, err := c.opt.Lobby.Principal(ctx, c.sess, room)
	if err != nil {
		return nil, err
	}
	p.Words = Words
	return p, nil
}

// deleteTool is sync_delete_action or sync_delete_view.
func deleteTool(kind string, del func(*substrate.Service, context.Context, *substrate.Principal, string, string) (int64, error)) tool {
	title := "Delete a" + map[string]string{"action": "n action", "view": " view"}[kind]
	return tool{&sdk.Tool{Name: "sync_delete_" + kind, Title: title,
		Description: "Delete " + map[string]string{"action": "an action", "view": "a view"}[kind] + " you registered (or any, with room authority).",
		InputSchema: schema(map[string]any{"id": str(strings.ToUpper(kind[:1]) + kind[1:] + " id.")}, "id"), Annotations: annotations(title, false, true, true)},
		func(ctx context.Context, c *call, args json.RawMessage) (any, error) {
			var in struct{ ID string }
			if err := decode(args, &in); err != nil {
				return nil, err
			}
			return c.acting(ctx, func(p *substrate.Principal, room string) (any, error) {
				seq, err := del(c.opt.Substrate, ctx, p, room, in.ID)
				return map[string]any{"deleted": true, "id": in.ID, "seq": seq}, err
			})
		}}
}

func (c *call) room(room string) string {
	if room != "" {
		return room
	}
	return c.sess.RoomID
}

// tools are sync's MCP tools, in the order clients list them.
func tools() []tool {
	return []tool{
		{&sdk.Tool{Name: "sync_lobby", Title: "Lobby",
			Description: "Start here. Lists the rooms this connection may use with your access, their agents (status, last heartbeat, what they wait on, which are yours) and defined roles, whether you may create rooms, and what you are embodied as. Next: sync_read_context to observe a room, sync_embody to act in it, or sync_create_room.",
			InputSchema: schema(map[string]any{}), Annotations: annotations("Lobby", true, false, true)},
			func(ctx context.Context, c *call, args json.RawMessage) (any, error) {
				if err := decode(args, &struct{}{}); err != nil {
					return nil, err
				}
				return c.opt.Lobby.View(ctx, c.sess)
			}},
		{&sdk.Tool{Name: "sync_create_room", Title: "Create room",
			Description: "Create a room you own and add it to this connection's scope (needs the create-rooms permission from the consent screen). Next: sync_embody in it.",
			InputSchema: schema(map[string]any{"room": str("Room id (letters, digits, . _ : @ -). Random when omitted."), "label": str("Human-readable name.")}),
			Annotations: annotations("Create room", false, false, false)},
			func(ctx context.Context, c *call, args json.RawMessage) (any, error) {
				var in struct{ Room, Label string }
				if err := decode(args, &in); err != nil {
					return nil, err
				}
				return c.opt.Lobby.CreateRoomFor(ctx, c.sess, in.Room, in.Label)
			}},
		{&sdk.Tool{Name: "sync_read_context", Title: "Read room context",
			Description: "Everything you perceive in a room in one read: state (your own scope as self), views, agents, actions with availability, messages (count, unread, recent) and _context (what was left out and how to expand it). Observing (not embodied) shows communal state only and leaves no trace. Reading messages marks them read.",
			InputSchema: schema(map[string]any{"room": roomProp,
				"depth":          map[string]any{"type": "string", "enum": []string{"lean", "full", "usage"}, "description": "lean (default); full adds each action's params, writes and if; usage adds invocation counts."},
				"only":           str("Comma-separated sections to keep: state, views, agents, actions, messages, or state.<scope>."),
				"messages_after": num("Return messages after this seq (paging)."),
				"messages_limit": num("Messages to return, 1–500 (default 100)."),
				"include":        str("Log scopes to add to state: _messages, _audit."),
				"max_bytes":      num("Size budget of the result in bytes (default 32000); what does not fit is summarised, and _context.budget says how to read it.")}),
			Annotations: annotations("Read room context", true, false, true)},
			func(ctx context.Context, c *call, args json.RawMessage) (any, error) {
				var in struct {
					Room          string `json:"room"`
					Depth         string `json:"depth"`
					Only          string `json:"only"`
					Include       string `json:"include"`
					MessagesAfter *int64 `json:"messages_after"`
					MessagesLimit *int64 `json:"messages_limit"`
					MaxBytes      *int64 `json:"max_bytes"`
				}
				if err := decode(args, &in); err != nil {
					return nil, err
				}
				room := c.room(in.Room)
				p, err := c.principal(ctx, room)
				if err != nil {
					return nil, err
				}
				q, err := contextRequest(in.Depth, in.Only, in.Include, in.MessagesAfter, in.MessagesLimit, "", in.MaxBytes)
				if err != nil {
					return nil, err
				}
				return c.opt.Substrate.Context(ctx, p, room, q)
			}},
		{&sdk.Tool{Name: "sync_embody", Title: "Embody an agent",
			Description: "Act in a room: become your own agent there (created on first use), an existing agent of yours (agent), or the agent filling a defined role (role). You become present (heartbeat, status active). Observers cannot embody. Next: sync_read_context, then sync_invoke_action.",
			InputSchema: schema(map[string]any{"room": str("Room id."), "agent": str("An existing agent of yours to switch to."), "role": str("A role defined in _shared.roles to fill.")}, "room"),
			Annotations: annotations("Embody an agent", false, false, true)},
			func(ctx context.Context, c *call, args json.RawMessage) (any, error) {
				var in struct{ Room, Agent, Role string }
				if err := decode(args, &in); err != nil {
					return nil, err
				}
				return c.opt.Lobby.Embody(ctx, c.sess, in.Room, in.Agent, in.Role)
			}},
		{&sdk.Tool{Name: "sync_disembody", Title: "Stop acting",
			Description: "Go back to observing. Your agent becomes idle and keeps its state, actions and views; any role it filled is freed.",
			InputSchema: schema(map[string]any{}), Annotations: annotations("Stop acting", false, false, true)},
			func(ctx context.Context, c *call, args json.RawMessage) (any, error) {
				if err := decode(args, &struct{}{}); err != nil {
					return nil, err
				}
				return c.opt.Lobby.Disembody(ctx, c.sess)
			}},
		{&sdk.Tool{Name: "sync_invoke_action", Title: "Invoke an action",
			Description: "Invoke an action (or a builtin such as _send_message) in the room you are embodied in. It reads and writes with its registrar's authority (never your private scope unless you registered it in your own); failures change nothing and say why (precondition_failed, action_cooldown, invalid_param…). Returns what it wrote (scope, key, version, size; read values back with sync_read_context) and the action's result.",
			InputSchema: schema(map[string]any{"action": str("Action id, as listed in the context's actions."), "params": obj("The action's parameters.")}, "action"),
			Annotations: annotations("Invoke an action", false, true, false)},
			func(ctx context.Context, c *call, args json.RawMessage) (any, error) {
				var in struct {
					Action string
					Params json.RawMessage
				}
				if err := decode(args, &in); err != nil {
					return nil, err
				}
				return c.acting(ctx, func(p *substrate.Principal, room string) (any, error) {
					res, err := c.opt.Substrate.Invoke(ctx, p, room, in.Action, in.Params)
					if err != nil {
						return nil, err
					}
					return res.Summary(), nil
				})
			}},
		{&sdk.Tool{Name: "sync_wait", Title: "Wait for a condition",
			Description: "Wait until a CEL condition over the room holds, e.g. state._shared.phase == \"review\" or messages.directed_unread > 0. Returns {triggered: true, context} as soon as it does, or {triggered: false, timeout: true} after timeout_ms (default 25000, at most 45000): then simply call again. Use instead of polling.",
			InputSchema: schema(map[string]any{"condition": str("CEL condition (see sync_help key expressions)."), "room": roomProp, "timeout_ms": num("How long to wait, ms (default 25000, max 45000)."),
				"context":        map[string]any{"type": "string", "enum": []string{"full", "none"}, "description": "full (default): the context when the condition holds; none: only that it held, with the room seq."},
				"depth":          map[string]any{"type": "string", "enum": []string{"lean", "full", "usage"}, "description": "As in sync_read_context (default lean)."},
				"only":           str("As in sync_read_context: sections to keep."),
				"messages_limit": num("As in sync_read_context (default 20 here)."),
				"max_bytes":      num("As in sync_read_context (default 32000).")}, "condition"),
			Annotations: annotations("Wait for a condition", true, false, true)},
			func(ctx context.Context, c *call, args json.RawMessage) (any, error) {
				var in struct {
					Condition, Room string
					TimeoutMS       int64  `json:"timeout_ms"`
					Context         string `json:"context"`
					Depth           string `json:"depth"`
					Only            string `json:"only"`
					MessagesLimit   *int64 `json:"messages_limit"`
					MaxBytes        *int64 `json:"max_bytes"`
				}
				if err := decode(args, &in); err != nil {
					return nil, err
				}
				room := c.room(in.Room)
				p, err := c.principal(ctx, room)
				if err != nil {
					return nil, err
				}
				// The substrate decides the default and the cap (the same
				// for every surface).
				if in.MessagesLimit == nil {
					twenty := int64(20) // a wake-up needs the latest few, not 100
					in.MessagesLimit = &twenty
				}
				q, err := contextRequest(in.Depth, in.Only, "", nil, in.MessagesLimit, in.Context, in.MaxBytes)
				if err != nil {
					return nil, err
				}
				return c.opt.Substrate.Wait(ctx, p, room, in.Condition, time.Duration(in.TimeoutMS)*time.Millisecond, q)
			}},
		{&sdk.Tool{Name: "sync_register_action", Title: "Register an action",
			Description: "Register or replace an action in the room you are embodied in: a named, parameterised, guarded set of writes anyone may invoke. Fields as in sync_help key standard_library (id, description, intent, params, if, enabled, writes, result, timer, on_invoke). Returns the definition, what changed, and warnings.",
			InputSchema: schema(map[string]any{"id": str("Action id."), "scope": str("\"_shared\" (default) or your agent id, to write your own scope."),
				"description": str("What it does."), "intent": str("Why it exists (free text)."), "params": obj("name → {type, enum, required, description, default}."),
				"if": str("CEL precondition."), "enabled": str("CEL visibility gate."), "writes": map[string]any{"type": "array", "items": map[string]any{"type": "object"},
					"description": "Writes: {scope, key, value|merge|increment|delete, append, expr, if_version, timer}; templates ${params.x}, ${self}, ${now}."},
				"result": str("CEL evaluated after the writes."), "timer": obj("Lifecycle: {ms|at|ticks+tick_on, effect}."), "on_invoke": obj("{timer: …} started at each invocation (a cooldown).")}, "id"),
			Annotations: annotations("Register an action", false, true, true)},
			func(ctx context.Context, c *call, args json.RawMessage) (any, error) {
				var def substrate.ActionDef
				if err := decode(args, &def); err != nil {
					return nil, err
				}
				return c.acting(ctx, func(p *substrate.Principal, room string) (any, error) {
					return c.opt.Substrate.RegisterAction(ctx, p, room, def)
				})
			}},
		{&sdk.Tool{Name: "sync_register_view", Title: "Register a view",
			Description: "Register or replace a view: a CEL expression evaluated with your read authority whose result is public, e.g. a projection of your private state. Returns its current value.",
			InputSchema: schema(map[string]any{"id": str("View id."), "expr": str("CEL expression."), "scope": str("Your agent id (default) or \"_shared\"."),
				"description": str("What it shows."), "enabled": str("CEL visibility gate."), "render": obj("Display hints {type, label, …}.")}, "id", "expr"),
			Annotations: annotations("Register a view", false, true, true)},
			func(ctx context.Context, c *call, args json.RawMessage) (any, error) {
				var def substrate.ViewDef
				if err := decode(args, &def); err != nil {
					return nil, err
				}
				return c.acting(ctx, func(p *substrate.Principal, room string) (any, error) {
					return c.opt.Substrate.RegisterView(ctx, p, room, def)
				})
			}},
		deleteTool("action", (*substrate.Service).DeleteAction),
		deleteTool("view", (*substrate.Service).DeleteView),
		{&sdk.Tool{Name: "sync_send_message", Title: "Send a message",
			Description: "Post a message to the room's _messages log as your agent; with to (agent id or list) it is directed and raises their directed_unread.",
			InputSchema: schema(map[string]any{"body": anyv("The message (text or JSON)."), "kind": str("Kind, default chat."),
				"to": anyv("Agent id or list of agent ids.")}, "body"),
			Annotations: annotations("Send a message", false, false, false)},
			func(ctx context.Context, c *call, args json.RawMessage) (any, error) {
				var in struct {
					Body any    `json:"body"`
					Kind string `json:"kind,omitempty"`
					To   any    `json:"to,omitempty"`
				}
				if err := decode(args, &in); err != nil {
					return nil, err
				}
				raw, _ := json.Marshal(in)
				return c.acting(ctx, func(p *substrate.Principal, room string) (any, error) {
					return c.opt.Substrate.Invoke(ctx, p, room, "_send_message", raw)
				})
			}},
		{&sdk.Tool{Name: "sync_help", Title: "Help",
			Description: "Read sync's help: without key, the list of keys; keys include guide, standard_library (ready-made actions), expressions (CEL reference), if_version, context_shaping. Rooms may override keys.",
			InputSchema: schema(map[string]any{"key": str("Help key."), "room": roomProp}), Annotations: annotations("Help", true, false, true)},
			func(ctx context.Context, c *call, args json.RawMessage) (any, error) {
				var in struct{ Key, Room string }
				if err := decode(args, &in); err != nil {
					return nil, err
				}
				room := c.room(in.Room)
				if room == "" {
					return c.opt.Substrate.SystemHelp(in.Key, Words)
				}
				p, err := c.principal(ctx, room)
				if err != nil {
					return nil, err
				}
				return c.opt.Substrate.Help(ctx, p, room, in.Key)
			}},
		{&sdk.Tool{Name: "sync_eval_cel", Title: "Evaluate CEL",
			Description: "Evaluate a CEL expression against a room with exactly your read authority: for testing conditions, views and action guards before using them. Bind params to try an action's if as an invocation would; a false result names the clause that did not hold.",
			InputSchema: schema(map[string]any{"expr": str("CEL expression."), "room": roomProp, "params": obj("Values for params.<name>, as in sync_invoke_action.")}, "expr"), Annotations: annotations("Evaluate CEL", true, false, true)},
			func(ctx context.Context, c *call, args json.RawMessage) (any, error) {
				var in struct {
					Expr, Room string
					Params     json.RawMessage
				}
				if err := decode(args, &in); err != nil {
					return nil, err
				}
				room := c.room(in.Room)
				p, err := c.principal(ctx, room)
				if err != nil {
					return nil, err
				}
				return c.opt.Substrate.Eval(ctx, p, room, in.Expr, in.Params)
			}},
		{&sdk.Tool{Name: "sync_revoke_access", Title: "Drop a room from this connection",
			Description: "Remove a room from this connection's scope at once (you stop acting there). Only the user can add it back, by reconnecting.",
			InputSchema: schema(map[string]any{"room": str("Room id.")}, "room"), Annotations: annotations("Drop a room", false, true, true)},
			func(ctx context.Context, c *call, args json.RawMessage) (any, error) {
				var in struct{ Room string }
				if err := decode(args, &in); err != nil {
					return nil, err
				}
				return c.opt.Lobby.RevokeAccess(ctx, c.sess, in.Room)
			}},
		{&sdk.Tool{Name: "sync_restrict_scope", Title: "Narrow this connection's scope",
			Description: "Narrow this connection's scope to the given scope string (rooms:<id>:<observe|read|write|admin>, rooms:*:<level>, create_rooms); it never widens.",
			InputSchema: schema(map[string]any{"scope": str("The scope to keep.")}, "scope"), Annotations: annotations("Narrow scope", false, true, true)},
			func(ctx context.Context, c *call, args json.RawMessage) (any, error) {
				var in struct{ Scope string }
				if err := decode(args, &in); err != nil {
					return nil, err
				}
				return c.opt.Lobby.RestrictScope(ctx, c.sess, in.Scope)
			}},
		{&sdk.Tool{Name: "sync_share_room", Title: "Share a room",
			Description: "Give another sync user a role in a room you own: owner, collaborator, participant or observer.",
			InputSchema: schema(map[string]any{"room": str("Room id."), "username": str("Their username."),
				"role": map[string]any{"type": "string", "enum": []string{"owner", "collaborator", "participant", "observer"}, "description": "Their role (default participant)."}}, "room", "username"),
			Annotations: annotations("Share a room", false, false, true)},
			func(ctx context.Context, c *call, args json.RawMessage) (any, error) {
				var in struct{ Room, Username, Role string }
				if err := decode(args, &in); err != nil {
					return nil, err
				}
				if in.Role == "" {
					in.Role = "participant"
				}
				if level, _, err := c.opt.Lobby.Access(ctx, c.sess, in.Room); err != nil {
					return nil, err
				} else if level != "admin" {
					return nil, errs.New(errs.Forbidden, "sharing %q needs admin access in this connection", in.Room).WithHint("the user reconnects with admin access to the room, or shares it on the account page")
				}
				other, err := c.opt.Auth.UserID(ctx, in.Username)
				if err != nil {
					return nil, err
				}
				if err := c.opt.Lobby.ShareRoom(ctx, c.sess.UserID, in.Room, other, in.Role); err != nil {
					return nil, err
				}
				return map[string]any{"shared": true, "room": in.Room, "username": in.Username, "role": in.Role}, nil
			}},
	}
}
