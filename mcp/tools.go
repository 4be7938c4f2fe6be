package mcp

import (
	"context"
	"encoding/json"
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

func annotations(readOnly, destructive, idempotent bool) *sdk.ToolAnnotations {
	a := &sdk.ToolAnnotations{ReadOnlyHint: readOnly, IdempotentHint: idempotent, OpenWorldHint: ptr(false)}
	if !readOnly { // destructiveHint means nothing for a read-only tool
		a.DestructiveHint = ptr(destructive)
	}
	return a
}

// actor is the embodied agent's authority in its room (c.sess.RoomID);
// without an embodiment it fails with the call to make.
func (c *call) actor(ctx context.Context) (*substrate.Principal, error) {
	p, err := c.opt.Lobby.Actor(ctx, c.sess)
	if err != nil {
		return nil, err
	}
	p.Words = Words
	return p, nil
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

func (c *call) room(room string) string {
	if room != "" {
		return room
	}
	return c.sess.RoomID
}

// Tool inputs. Optional arguments are omitempty (pointers where 0 differs
// from absent); descriptions are the schema's.
type (
	noArgs struct{}

	createRoomIn struct {
		Room  string `json:"room,omitempty" jsonschema:"Room id (letters, digits, . _ : @ -). Random when omitted."`
		Label string `json:"label,omitempty" jsonschema:"Human-readable name."`
	}

	// shaping is how a context is shaped, as sync_read_context and
	// sync_wait take it.
	shaping struct {
		Depth         string `json:"depth,omitempty" jsonschema:"lean (default), full (actions' params, writes, if) or usage (+ invocation counts)."`
		Only          string `json:"only,omitempty" jsonschema:"Sections to keep, comma-separated: state, views, agents, actions, messages, state.<scope>."`
		MessagesLimit *int64 `json:"messages_limit,omitempty" jsonschema:"Messages to return, 1–500 (default 100)."`
		MaxBytes      *int64 `json:"max_bytes,omitempty" jsonschema:"Result size budget, bytes (default 32000); cuts are listed in _context.budget."`
	}

	readContextIn struct {
		Room string `json:"room,omitempty" jsonschema:"Room id (default: your current room)."`
		shaping
		MessagesAfter *int64 `json:"messages_after,omitempty" jsonschema:"Return messages after this seq (paging)."`
		Include       string `json:"include,omitempty" jsonschema:"Log scopes to add to state: _messages, _audit."`
		KeysAfter     string `json:"keys_after,omitempty" jsonschema:"State keys after this one, in key order (paging)."`
		Prefix        string `json:"prefix,omitempty" jsonschema:"Only state keys starting with this."`
	}

	embodyIn struct {
		Room     string `json:"room" jsonschema:"Room id."`
		Agent    string `json:"agent,omitempty" jsonschema:"An existing agent of yours to switch to."`
		Role     string `json:"role,omitempty" jsonschema:"A role defined in _shared.roles to fill."`
		Context  string `json:"context,omitempty" jsonschema:"arrival (default: who is here, your actions, what needs attention), full (as sync_read_context) or none."`
		Only     string `json:"only,omitempty" jsonschema:"As in sync_read_context."`
		MaxBytes *int64 `json:"max_bytes,omitempty" jsonschema:"Result size budget, bytes (default 6000 for arrival)."`
	}

	invokeIn struct {
		Action string          `json:"action" jsonschema:"Action id, as listed in the context's actions."`
		Params json.RawMessage `json:"params,omitempty" jsonschema:"The action's parameters."`
	}

	waitIn struct {
		Condition string `json:"condition" jsonschema:"CEL condition (see sync_help key expressions)."`
		Room      string `json:"room,omitempty" jsonschema:"Room id (default: your current room)."`
		TimeoutMS int64  `json:"timeout_ms,omitempty" jsonschema:"How long to wait, ms (default 25000, max 45000)."`
		Context   string `json:"context,omitempty" jsonschema:"delta (default: on wake-up, what changed since your last read; on timeout, only the condition), full (the whole context) or none."`
		Since     *int64 `json:"since,omitempty" jsonschema:"Seq the delta starts after (default: your last read)."`
		waitShaping
	}

	// waitShaping is shaping described briefly: sync_read_context's
	// schema, next to it in the list, says the rest.
	waitShaping struct {
		Depth         string `json:"depth,omitempty" jsonschema:"As in sync_read_context."`
		Only          string `json:"only,omitempty" jsonschema:"As in sync_read_context."`
		MessagesLimit *int64 `json:"messages_limit,omitempty" jsonschema:"As in sync_read_context (default 20 here)."`
		MaxBytes      *int64 `json:"max_bytes,omitempty" jsonschema:"As in sync_read_context (default 32000)."`
	}

	registerActionIn struct {
		ID          string                         `json:"id" jsonschema:"Action id."`
		Scope       string                         `json:"scope,omitempty" jsonschema:"_shared (default), or your agent id to write your own scope."`
		Description string                         `json:"description,omitempty" jsonschema:"What it does."`
		Intent      string                         `json:"intent,omitempty" jsonschema:"Why it exists."`
		Params      map[string]substrate.ParamSpec `json:"params,omitempty" jsonschema:"name → {type, enum, required, description, default}."`
		If          string                         `json:"if,omitempty" jsonschema:"CEL precondition."`
		Enabled     string                         `json:"enabled,omitempty" jsonschema:"CEL visibility gate."`
		Writes      []substrate.WriteTemplate      `json:"writes,omitempty" jsonschema:"{scope, key, value|merge|increment|delete, append, expr, if_version, timer}; templates ${params.x}, ${self}, ${now}."`
		Result      string                         `json:"result,omitempty" jsonschema:"CEL evaluated after the writes."`
		Timer       *substrate.Timer               `json:"timer,omitempty" jsonschema:"Lifecycle: {ms|at|ticks+tick_on, effect}."`
		OnInvoke    *substrate.OnInvoke            `json:"on_invoke,omitempty" jsonschema:"{timer: …} started at each invocation (a cooldown)."`
	}

	registerViewIn struct {
		ID          string           `json:"id" jsonschema:"View id."`
		Expr        string           `json:"expr" jsonschema:"CEL expression."`
		Scope       string           `json:"scope,omitempty" jsonschema:"Your agent id (default) or _shared."`
		Description string           `json:"description,omitempty" jsonschema:"What it shows."`
		Enabled     string           `json:"enabled,omitempty" jsonschema:"CEL visibility gate."`
		Render      json.RawMessage  `json:"render,omitempty" jsonschema:"Display hints {type, label, …}."`
		Timer       *substrate.Timer `json:"timer,omitempty" jsonschema:"Lifecycle: {ms|at|ticks+tick_on, effect}."`
	}

	deleteIn struct {
		ID string `json:"id" jsonschema:"Its id."`
	}

	sendMessageIn struct {
		Body any    `json:"body" jsonschema:"The message (text or JSON)."`
		Kind string `json:"kind,omitempty" jsonschema:"Kind, default chat."`
		To   any    `json:"to,omitempty" jsonschema:"Agent id or list of agent ids."`
	}

	helpIn struct {
		Key  string `json:"key,omitempty" jsonschema:"Help key."`
		Room string `json:"room,omitempty" jsonschema:"Room whose overrides to read."`
	}

	evalIn struct {
		Expr   string          `json:"expr" jsonschema:"CEL expression."`
		Room   string          `json:"room,omitempty" jsonschema:"Room id (default: your current room)."`
		Params json.RawMessage `json:"params,omitempty" jsonschema:"Values for params.<name>, as in sync_invoke_action."`
	}

	roomIn struct {
		Room string `json:"room" jsonschema:"Room id."`
	}

	restrictIn struct {
		Scope string `json:"scope" jsonschema:"The scope to keep."`
	}

	shareIn struct {
		Room     string `json:"room" jsonschema:"Room id."`
		Username string `json:"username" jsonschema:"Their username."`
		Role     string `json:"role,omitempty" jsonschema:"Their role (default participant)."`
	}
)

// Tool outputs that compose a domain result with another.
type (
	// EmbodyResult is the embodiment and, so that the next step needs no
	// further call, the room's context as the agent now sees it.
	EmbodyResult struct {
		*lobby.Embodiment
		// Bootstrap: what the role's first fill registered (or why not).
		Bootstrap []substrate.BootstrapResult `json:"bootstrap,omitempty"`
		Context   *substrate.Envelope         `json:"context,omitempty"`
	}
	// DisembodyResult is the embodiment left and the lobby to pick from.
	DisembodyResult struct {
		*lobby.Embodiment
		Lobby *lobby.View `json:"lobby"`
	}
	// Deleted is the result of deleting an action or a view.
	Deleted struct {
		Deleted bool   `json:"deleted"`
		ID      string `json:"id"`
		Seq     int64  `json:"seq"`
	}
	// Shared is the result of sharing a room.
	Shared struct {
		Shared   bool   `json:"shared"`
		Room     string `json:"room"`
		Username string `json:"username"`
		Role     string `json:"role"`
	}
)

var (
	depths     = []string{"lean", "full", "usage"}
	shaped     = map[string][]string{"depth": depths}
	waitEnum   = map[string][]string{"depth": depths, "context": {"delta", "full", "none"}}
	embodyEnum = map[string][]string{"context": {"arrival", "full", "none"}}
)

// sessionReserve is the room a budget leaves for the _session block
// every result carries.
const sessionReserve = 200

// ArrivalMaxBytes is the budget of an embodiment's arrival.
const ArrivalMaxBytes = 6000

// arrivalRequest is the context an embodiment answers with: by default
// the arrival (agents, actions, the newest three messages and
// _attention, about 2,000 tokens at most), which does not count as the
// agent's first read of the room (that one, at depth full, is still to
// come).
func arrivalRequest(in *embodyIn) (substrate.ContextRequest, error) {
	sh := shaping{Only: in.Only, MaxBytes: in.MaxBytes}
	switch in.Context {
	case "", "arrival":
		if sh.Only == "" {
			sh.Only = "agents,actions,messages"
		}
		if sh.MaxBytes == nil {
			sh.MaxBytes = ptr(int64(ArrivalMaxBytes))
		}
		sh.MessagesLimit = ptr(int64(3))
		q, err := contextRequest(sh, nil, "", "")
		q.Peek = true
		return q, err
	case "full", "none":
		return contextRequest(sh, nil, "", "")
	}
	return substrate.ContextRequest{}, errs.New(errs.InvalidField, "context %q is not arrival, full or none", in.Context).With("field", "context").
		WithHint(`leave context out for the arrival, or pass "full" for the whole context`)
}

// deleteTool is sync_delete_action or sync_delete_view.
func deleteTool(kind, article string, del func(*substrate.Service, context.Context, *substrate.Principal, string, string) (int64, error)) tool {
	title := "Delete " + article + " " + kind
	return typed(&sdk.Tool{Name: "sync_delete_" + kind, Title: title,
		Description: "Delete " + article + " " + kind + " you registered (or any, with room authority).", Annotations: annotations(false, true, true)}, nil,
		func(ctx context.Context, c *call, in *deleteIn) (*Deleted, error) {
			p, err := c.actor(ctx)
			if err != nil {
				return nil, err
			}
			seq, err := del(c.opt.Substrate, ctx, p, c.sess.RoomID, in.ID)
			if err != nil {
				return nil, err
			}
			return &Deleted{Deleted: true, ID: in.ID, Seq: seq}, nil
		})
}

// tools are sync's MCP tools, in the order clients list them.
func tools() []tool {
	return []tool{
		typed(&sdk.Tool{Name: "sync_lobby", Title: "Lobby",
			Description: "Start here: your rooms (access, agents, roles), whether you may create rooms, what you embody and focus. Next: sync_read_context to observe, sync_embody to act, or sync_create_room.",
			Annotations: annotations(true, false, true)}, nil,
			func(ctx context.Context, c *call, _ *noArgs) (*lobby.View, error) {
				return c.opt.Lobby.View(ctx, c.sess)
			}),
		typed(&sdk.Tool{Name: "sync_create_room", Title: "Create room",
			Description: "Create a room you own, in this connection's scope (needs create-rooms consent).",
			Annotations: annotations(false, false, false)}, nil,
			func(ctx context.Context, c *call, in *createRoomIn) (*lobby.CreatedRoom, error) {
				return c.opt.Lobby.CreateRoomFor(ctx, c.sess, in.Room, in.Label)
			}),
		typed(&sdk.Tool{Name: "sync_read_context", Title: "Read room context",
			Description: "What you perceive in a room in one read: state (yours as self), views, agents, actions with availability, messages, and _context (what was left out; the call that reads it). Observing focuses the room. Reading messages marks them read.",
			Annotations: annotations(true, false, true)}, shaped,
			func(ctx context.Context, c *call, in *readContextIn) (*substrate.Envelope, error) {
				room := c.room(in.Room)
				p, err := c.principal(ctx, room)
				if err != nil {
					return nil, err
				}
				q, err := contextRequest(in.shaping, in.MessagesAfter, in.Include, "")
				if err != nil {
					return nil, err
				}
				q.KeysAfter, q.Prefix, q.Reserve = in.KeysAfter, in.Prefix, sessionReserve
				env, err := c.opt.Substrate.Context(ctx, p, room, q)
				if err != nil {
					return nil, err
				}
				return env, c.opt.Lobby.Focus(ctx, c.sess, room)
			}),
		typed(&sdk.Tool{Name: "sync_embody", Title: "Embody an agent",
			Description: "Act in a room as your own agent (made on first use), another of yours (agent) or a role's agent (role). Observers cannot embody. Returns your arrival: who is here, your actions, what needs attention. Next: sync_read_context, sync_invoke_action.",
			Annotations: annotations(false, false, true)}, embodyEnum,
			func(ctx context.Context, c *call, in *embodyIn) (*EmbodyResult, error) {
				// The arrival's shape is checked before anything changes.
				q, err := arrivalRequest(in)
				if err != nil {
					return nil, err
				}
				e, err := c.opt.Lobby.Embody(ctx, c.sess, in.Room, in.Agent, in.Role)
				if err != nil {
					return nil, err
				}
				out := &EmbodyResult{Embodiment: e, Bootstrap: e.Bootstrap}
				if in.Context == "none" {
					return out, nil
				}
				p, err := c.actor(ctx)
				if err != nil {
					return nil, err
				}
				frame, _ := json.Marshal(out)
				q.Reserve = len(frame) + sessionReserve
				out.Context, err = c.opt.Substrate.Context(ctx, p, c.sess.RoomID, q)
				return out, err
			}),
		typed(&sdk.Tool{Name: "sync_disembody", Title: "Stop acting",
			Description: "Return to observing. Your agent goes idle, keeping its state, actions and views; a role it filled is freed. Returns the lobby.",
			Annotations: annotations(false, false, true)}, nil,
			func(ctx context.Context, c *call, _ *noArgs) (*DisembodyResult, error) {
				e, err := c.opt.Lobby.Disembody(ctx, c.sess)
				if err != nil {
					return nil, err
				}
				out := &DisembodyResult{Embodiment: e}
				out.Lobby, err = c.opt.Lobby.View(ctx, c.sess)
				return out, err
			}),
		typed(&sdk.Tool{Name: "sync_invoke_action", Title: "Invoke an action",
			Description: "Invoke an action (or builtin, e.g. _send_message) in your room, with its registrar's authority. A failure changes nothing and says why. Returns what it wrote (scope, key, version, bytes) and its result.",
			Annotations: annotations(false, true, false)}, nil,
			func(ctx context.Context, c *call, in *invokeIn) (*substrate.InvokeSummary, error) {
				p, err := c.actor(ctx)
				if err != nil {
					return nil, err
				}
				res, err := c.opt.Substrate.Invoke(ctx, p, c.sess.RoomID, in.Action, in.Params)
				if err != nil {
					return nil, err
				}
				return res.Summary(), nil
			}),
		typed(&sdk.Tool{Name: "sync_wait", Title: "Wait for a condition",
			Description: "Wait, instead of polling, until a CEL condition over the room holds (e.g. messages.directed_unread > 0). Returns {triggered: true, context} when it does, or {timeout: true, unmet} after timeout_ms: then call again.",
			Annotations: annotations(true, false, true)}, waitEnum,
			func(ctx context.Context, c *call, in *waitIn) (*substrate.WaitResult, error) {
				room := c.room(in.Room)
				p, err := c.principal(ctx, room)
				if err != nil {
					return nil, err
				}
				// A wake-up needs the latest few messages, not 100.
				if in.MessagesLimit == nil {
					in.MessagesLimit = ptr(int64(20))
				}
				q, err := contextRequest(shaping(in.waitShaping), nil, "", in.Context)
				if err != nil {
					return nil, err
				}
				q.Since = in.Since
				q.Reserve = sessionReserve + 2*len(in.Condition) + 200
				// The substrate decides the default timeout and the cap (the
				// same for every surface).
				return c.opt.Substrate.Wait(ctx, p, room, in.Condition, time.Duration(in.TimeoutMS)*time.Millisecond, q)
			}),
		typed(&sdk.Tool{Name: "sync_register_action", Title: "Register an action",
			Description: "Register or replace an action in your room: named, parameterised, guarded writes anyone may invoke. Examples: sync_help key standard_library. Returns the definition, changes and warnings.",
			Annotations: annotations(false, true, true)}, nil,
			func(ctx context.Context, c *call, in *registerActionIn) (*substrate.RegisterResult, error) {
				p, err := c.actor(ctx)
				if err != nil {
					return nil, err
				}
				return c.opt.Substrate.RegisterAction(ctx, p, c.sess.RoomID, substrate.ActionDef{ID: in.ID, Scope: in.Scope, Description: in.Description,
					Intent: in.Intent, Params: in.Params, If: in.If, Enabled: in.Enabled, Writes: in.Writes, Result: in.Result, Timer: in.Timer, OnInvoke: in.OnInvoke})
			}),
		typed(&sdk.Tool{Name: "sync_register_view", Title: "Register a view",
			Description: "Register or replace a view: a CEL expression evaluated with your read authority whose value is public. Returns its value.",
			Annotations: annotations(false, true, true)}, nil,
			func(ctx context.Context, c *call, in *registerViewIn) (*substrate.RegisterResult, error) {
				p, err := c.actor(ctx)
				if err != nil {
					return nil, err
				}
				return c.opt.Substrate.RegisterView(ctx, p, c.sess.RoomID, substrate.ViewDef{ID: in.ID, Expr: in.Expr, Scope: in.Scope,
					Description: in.Description, Enabled: in.Enabled, Render: in.Render, Timer: in.Timer})
			}),
		deleteTool("action", "an", (*substrate.Service).DeleteAction),
		deleteTool("view", "a", (*substrate.Service).DeleteView),
		typed(&sdk.Tool{Name: "sync_send_message", Title: "Send a message",
			Description: "Post a message as your agent; with to (agent id or list) it is directed and raises their directed_unread.",
			Annotations: annotations(false, false, false)}, nil,
			func(ctx context.Context, c *call, in *sendMessageIn) (*substrate.InvokeSummary, error) {
				p, err := c.actor(ctx)
				if err != nil {
					return nil, err
				}
				raw, _ := json.Marshal(in)
				res, err := c.opt.Substrate.Invoke(ctx, p, c.sess.RoomID, "_send_message", raw)
				if err != nil {
					return nil, err
				}
				return res.Summary(), nil
			}),
		typed(&sdk.Tool{Name: "sync_help", Title: "Help",
			Description: "sync's help: without key, the list of keys (guide, standard_library, expressions, context_shaping, …). Rooms may override keys.",
			Annotations: annotations(true, false, true)}, nil,
			func(ctx context.Context, c *call, in *helpIn) (*substrate.HelpResult, error) {
				room := c.room(in.Room)
				if room == "" {
					return c.opt.Substrate.SystemHelp(in.Key, Words)
				}
				p, err := c.principal(ctx, room)
				if err != nil {
					return nil, err
				}
				return c.opt.Substrate.Help(ctx, p, room, in.Key)
			}),
		typed(&sdk.Tool{Name: "sync_eval_cel", Title: "Evaluate CEL",
			Description: "Evaluate CEL against a room with your read authority, to test conditions. Bind params to try an action's if; a false result names the clause that failed.",
			Annotations: annotations(true, false, true)}, nil,
			func(ctx context.Context, c *call, in *evalIn) (*substrate.EvalResult, error) {
				room := c.room(in.Room)
				p, err := c.principal(ctx, room)
				if err != nil {
					return nil, err
				}
				return c.opt.Substrate.Eval(ctx, p, room, in.Expr, in.Params)
			}),
		typed(&sdk.Tool{Name: "sync_revoke_access", Title: "Drop a room",
			Description: "Drop a room from this connection now; only reconnecting adds it back.",
			Annotations: annotations(false, true, true)}, nil,
			func(ctx context.Context, c *call, in *roomIn) (*lobby.ScopeChange, error) {
				return c.opt.Lobby.RevokeAccess(ctx, c.sess, in.Room)
			}),
		typed(&sdk.Tool{Name: "sync_restrict_scope", Title: "Narrow scope",
			Description: "Narrow this connection's scope to a scope string (rooms:<id>:<observe|read|write|admin>, rooms:*:<level>, create_rooms); never widens.",
			Annotations: annotations(false, true, true)}, nil,
			func(ctx context.Context, c *call, in *restrictIn) (*lobby.ScopeChange, error) {
				return c.opt.Lobby.RestrictScope(ctx, c.sess, in.Scope)
			}),
		typed(&sdk.Tool{Name: "sync_share_room", Title: "Share a room",
			Description: "Give another sync user a role in a room you own: owner, collaborator, participant or observer.",
			Annotations: annotations(false, false, true)}, map[string][]string{"role": {"owner", "collaborator", "participant", "observer"}},
			func(ctx context.Context, c *call, in *shareIn) (*Shared, error) {
				if in.Role == "" {
					in.Role = "participant"
				}
				if level, role, err := c.opt.Lobby.Access(ctx, c.sess, in.Room); err != nil {
					return nil, err
				} else if role != "" && role != "owner" {
					return nil, errs.New(errs.Forbidden, "only an owner of %q can share it; your role there is %s", in.Room, role).With("role", role).
						WithHint("ask an owner of %q to share it (sync_lobby shows your rooms and roles)", in.Room)
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
				return &Shared{Shared: true, Room: in.Room, Username: in.Username, Role: in.Role}, nil
			}),
		loomTool(),
	}
}
