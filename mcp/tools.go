package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/mcp/plugin"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/search"
)

// call is one tool call: the session it resolved to and the services.
type call struct {
	opt  *Options
	sess *lobby.Session
	// bearer is the access token the call came with, verified again by
	// calls that outlive their request's check (sync_wait).
	bearer string
}

// tool is a tool's definition and its thin adapter: decode, one lobby or
// substrate operation, encode.
type tool struct {
	def *sdk.Tool
	run func(ctx context.Context, c *call, args json.RawMessage) (any, error)
}

func ptr[T any](v T) *T { return &v }

// badThread refuses a thread that is not a message seq.
func badThread(n int64) error {
	return errs.New(errs.InvalidField, "thread %d is not a message seq", n).With("field", "thread").
		WithHint("pass the seq of the thread's first message (messages.threads lists them)")
}

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

// recheckToken makes a long call's re-checks (Principal.Refresh, at each
// wake-up of a wait) verify the access token again before the lobby's
// session and access: a token revoked meanwhile ends the call with
// unauthorized rather than the room.
func (c *call) recheckToken(p *substrate.Principal) {
	inner := p.Refresh
	if inner == nil || c.opt.Auth == nil || c.bearer == "" {
		return
	}
	var refresh func(ctx context.Context) (*substrate.Principal, error)
	refresh = func(ctx context.Context) (*substrate.Principal, error) {
		if ti, err := c.opt.Auth.Verify(ctx, c.bearer); err != nil || ti.GrantID != c.sess.GrantID {
			return nil, errs.New(errs.Unauthorized, "the access token was revoked while the call ran").WithHint("reconnect the integration")
		}
		np, err := inner(ctx)
		if err != nil {
			return nil, err
		}
		inner, np.Refresh = np.Refresh, refresh
		return np, nil
	}
	p.Refresh = refresh
}

func (c *call) room(room string) string {
	if room != "" {
		return room
	}
	return c.sess.RoomID
}

// Tool inputs. Optional arguments are omitempty (pointers where 0 differs
// from absent); descriptions are the schema's. A description does not
// repeat what the schema says (an enum's values).
type (
	noArgs struct{}

	createRoomIn struct {
		Room  string `json:"room,omitempty" jsonschema:"Letters, digits, . _ : @ - (default random)."`
		Label string `json:"label,omitempty"`
	}

	// shaping is how a context is shaped, as sync_read_context and
	// sync_wait take it.
	shaping struct {
		Depth         string `json:"depth,omitempty" jsonschema:"Default lean; full adds action definitions."`
		Only          string `json:"only,omitempty" jsonschema:"Comma-separated: state, views, agents, actions, messages, state.<scope>, views.<id>."`
		MessagesLimit *int64 `json:"messages_limit,omitempty" jsonschema:"1–500 (default 100)."`
		MaxBytes      *int64 `json:"max_bytes,omitempty" jsonschema:"Size budget in bytes (default 32000, at most 40000: page for more)."`
	}

	readContextIn struct {
		Room string `json:"room,omitempty"`
		shaping
		MessagesAfter *int64 `json:"messages_after,omitempty" jsonschema:"Messages after this seq (paging)."`
		Include       string `json:"include,omitempty" jsonschema:"_messages and/or _audit, added to state."`
		KeysAfter     string `json:"keys_after,omitempty" jsonschema:"State keys after this one (paging)."`
		Prefix        string `json:"prefix,omitempty" jsonschema:"State keys starting with this."`
		Thread        int64  `json:"thread,omitempty" jsonschema:"One thread whole."`
	}

	embodyIn struct {
		Room     string `json:"room"`
		Agent    string `json:"agent,omitempty" jsonschema:"Another agent of yours."`
		Role     string `json:"role,omitempty" jsonschema:"A role to fill."`
		Context  string `json:"context,omitempty" jsonschema:"Default arrival."`
		Only     string `json:"only,omitempty" jsonschema:"As in sync_read_context."`
		MaxBytes *int64 `json:"max_bytes,omitempty" jsonschema:"Size budget in bytes (default 6000)."`
	}

	invokeIn struct {
		Action string          `json:"action" `
		Params json.RawMessage `json:"params,omitempty" `
	}

	waitIn struct {
		Condition string `json:"condition,omitempty" jsonschema:"CEL condition."`
		Room      string `json:"room,omitempty"`
		TimeoutMS int64  `json:"timeout_ms,omitempty" jsonschema:"Default 25000, max 45000."`
		Context   string `json:"context,omitempty" jsonschema:"Default delta."`
		Since     *int64 `json:"since,omitempty" jsonschema:"Seq the delta starts after."`
		Thread    int64  `json:"thread,omitempty" jsonschema:"No condition: its next message."`
		waitShaping
	}

	// waitShaping is shaping described briefly: sync_read_context's
	// schema, next to it in the list, says the rest.
	waitShaping struct {
		Depth         string `json:"depth,omitempty" jsonschema:"As in sync_read_context."`
		Only          string `json:"only,omitempty" jsonschema:"As in sync_read_context."`
		MessagesLimit *int64 `json:"messages_limit,omitempty" jsonschema:"As in sync_read_context (default 20 here)."`
		MaxBytes      *int64 `json:"max_bytes,omitempty" jsonschema:"As in sync_read_context."`
	}

	registerActionIn struct {
		ID          string                         `json:"id"`
		Scope       string                         `json:"scope,omitempty" jsonschema:"_shared (default) or your agent id."`
		Description string                         `json:"description,omitempty"`
		Intent      string                         `json:"intent,omitempty"`
		Params      map[string]substrate.ParamSpec `json:"params,omitempty" jsonschema:"name → {type, enum, required, default}."`
		If          string                         `json:"if,omitempty" jsonschema:"CEL precondition."`
		Enabled     string                         `json:"enabled,omitempty" jsonschema:"CEL visibility gate."`
		Writes      []substrate.WriteTemplate      `json:"writes,omitempty" jsonschema:"{scope, key, value|merge|increment|delete, append, expr, if_version, timer}; templates ${params.x}, ${self}, ${now}. if_version: the version sync_read_context {only: \"state.<scope>\"} shows as versions.<scope>.<key>."`
		Result      string                         `json:"result,omitempty" jsonschema:"CEL evaluated after the writes."`
		Timer       *substrate.Timer               `json:"timer,omitempty" jsonschema:"Lifecycle: {ms|at|ticks+tick_on, effect}."`
		OnInvoke    *substrate.OnInvoke            `json:"on_invoke,omitempty" jsonschema:"{timer: …} started at each invocation (a cooldown)."`
	}

	registerViewIn struct {
		ID          string           `json:"id"`
		Expr        string           `json:"expr"`
		Scope       string           `json:"scope,omitempty" jsonschema:"Your agent id (default) or _shared."`
		Description string           `json:"description,omitempty"`
		Enabled     string           `json:"enabled,omitempty" jsonschema:"CEL visibility gate."`
		Render      json.RawMessage  `json:"render,omitempty" jsonschema:"Display hints {type, label, …}."`
		Timer       *substrate.Timer `json:"timer,omitempty" jsonschema:"Lifecycle: {ms|at|ticks+tick_on, effect}."`
	}

	deleteIn struct {
		ID string `json:"id"`
	}

	sendMessageIn struct {
		Body any    `json:"body" jsonschema:"Text or JSON."`
		Kind string `json:"kind,omitempty" jsonschema:"Default chat."`
		To   any    `json:"to,omitempty" jsonschema:"Agent id or ids."`
		// ReplyTo, Subject and Ack: threads and acknowledgements.
		ReplyTo int64  `json:"reply_to,omitempty" jsonschema:"Seq answered."`
		Subject string `json:"subject,omitempty"`
		Ack     bool   `json:"ack,omitempty" jsonschema:"Ask for _ack."`
	}

	searchIn struct {
		Q      string `json:"q" jsonschema:"Words, \"a phrase\", or, -word."`
		Room   string `json:"room,omitempty" jsonschema:"* searches all your rooms."`
		Scope  string `json:"scope,omitempty" jsonschema:"_messages, self, views or a scope."`
		From   string `json:"from,omitempty"`
		Kind   string `json:"kind,omitempty"`
		Thread int64  `json:"thread,omitempty"`
		After  string `json:"after,omitempty" jsonschema:"RFC 3339 or a date, as before."`
		Before string `json:"before,omitempty"`
		Limit  int    `json:"limit,omitempty" jsonschema:"Up to 50."`
		Offset int    `json:"offset,omitempty"`
	}

	helpIn struct {
		Key  string `json:"key,omitempty"`
		Room string `json:"room,omitempty" jsonschema:"Its overrides."`
	}

	evalIn struct {
		Expr   string          `json:"expr"`
		Room   string          `json:"room,omitempty"`
		Params json.RawMessage `json:"params,omitempty" jsonschema:"Bound as params."`
	}

	roomIn struct {
		Room string `json:"room"`
	}

	restrictIn struct {
		Scope string `json:"scope" `
	}

	shareIn struct {
		Room     string `json:"room"`
		Username string `json:"username"`
		Role     string `json:"role,omitempty" jsonschema:"Default participant."`
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
	// Revoked is a room dropped from the connection, and what the person
	// (not the model: no tool widens a connection) does to add it back.
	Revoked struct {
		*lobby.ScopeChange
		Restore string `json:"restore"`
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
		q, err := contextRequest(sh, nil, "", "", nil)
		q.Peek = true
		return q, err
	case "full", "none":
		return contextRequest(sh, nil, "", "", nil)
	}
	return substrate.ContextRequest{}, errs.New(errs.InvalidField, "context %q is not arrival, full or none", in.Context).With("field", "context").
		WithHint(`leave context out for the arrival, or pass "full" for the whole context`)
}

// deleteTool is sync_delete_action or sync_delete_view.
func deleteTool(kind, article string, del func(*substrate.Service, context.Context, *substrate.Principal, string, string) (int64, error)) tool {
	title := "Delete " + article + " " + kind
	// deleted: always true (a failure is an error); id: an echo.
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
		}).unlisted("deleted", "id")
}

// hide leaves rarely used arguments out of a tool's input schema (tools/list
// is paid for in every conversation); they are still taken, and the tool's
// description or help names them.
func hide(t tool, names ...string) tool {
	s := t.def.InputSchema.(*jsonschema.Schema)
	for _, n := range names {
		delete(s.Properties, n)
	}
	return t
}

// tools are sync's MCP tools, in the order clients list them. Result
// fields left out of the output schemas (see unlisted): next is the call
// the model makes next, in its words; an echo is an argument the caller
// sent, returned as sent.
func tools() []tool {
	return []tool{
		lobbyTool(),
		createRoomTool(),
		readContextTool(),
		searchTool(),
		embodyTool(),
		disembodyTool(),
		invokeActionTool(),
		waitTool(),
		registerActionTool(),
		registerViewTool(),
		deleteTool("action", "an", (*substrate.Service).DeleteAction),
		deleteTool("view", "a", (*substrate.Service).DeleteView),
		sendMessageTool(),
		helpTool(),
		evalCelTool(),
		revokeAccessTool(),
		restrictScopeTool(),
		shareRoomTool(),
		loomTool(),
	}
}

// lobbyTool is sync_lobby.
func lobbyTool() tool {
	return typed(&sdk.Tool{Name: "sync_lobby", Title: "Lobby",
		Description: "Start here: your rooms (access, agents, roles), what you embody and focus, whether you may create rooms. Next: sync_read_context to observe, sync_embody to act.",
		Annotations: annotations(true, false, true)}, nil,
		func(ctx context.Context, c *call, _ *noArgs) (*lobby.View, error) {
			return c.opt.Lobby.View(ctx, c.sess)
		}).unlisted("next")
}

// createRoomTool is sync_create_room.
// created: always true
func createRoomTool() tool {
	return typed(&sdk.Tool{Name: "sync_create_room", Title: "Create room",
		Description: "Create a room you own, in this connection's scope (needs create-rooms consent).",
		Annotations: annotations(false, false, false)}, nil,
		func(ctx context.Context, c *call, in *createRoomIn) (*lobby.CreatedRoom, error) {
			return c.opt.Lobby.CreateRoomFor(ctx, c.sess, in.Room, in.Label)
		}).unlisted("created", "next")
}

// readContextTool is sync_read_context.
// builtins: their signatures in one line for the model (depth
// full lists them in actions); params: always {} (no invocation).
func readContextTool() tool {
	return hide(typed(&sdk.Tool{Name: "sync_read_context", Title: "Read room context",
		Description: "What you perceive in a room: state (yours as self), views, agents, actions with availability, messages. Use it to look around; waits return only changes. Narrow with only, prefix or keys_after (only \"state.<scope>\" also shows its entries' versions, for if_version); page messages with messages_after (include adds _messages or _audit to state); _context.budget names the call for what a cut left out. Focuses the room (unless you act in another); marks shown messages read.",
		Annotations: annotations(true, false, true)}, shaped,
		func(ctx context.Context, c *call, in *readContextIn) (*substrate.Envelope, error) {
			q, err := contextRequest(in.shaping, in.MessagesAfter, in.Include, "", nil)
			if err != nil {
				return nil, err
			}
			if in.Thread < 0 {
				return nil, badThread(in.Thread)
			}
			q.KeysAfter, q.Prefix, q.Reserve, q.Thread = in.KeysAfter, in.Prefix, sessionReserve, in.Thread
			return c.opt.Lobby.ReadContext(ctx, c.sess, c.room(in.Room), q, Words)
		}), "include").unlisted("builtins", "params")
}

// searchTool is sync_search.
// more: the next page's call in the model's words (next has its
// offset); query: an echo. hits is never null.
func searchTool() tool {
	return typed(&sdk.Tool{Name: "sync_search", Title: "Search",
		Description: "Full-text search of what you may read (messages, state, views), best first, with snippets.",
		Annotations: annotations(true, false, true)}, nil,
		func(ctx context.Context, c *call, in *searchIn) (*lobby.RoomsSearch, error) {
			req := search.Request{Query: in.Q, Scope: in.Scope, From: in.From, Kind: in.Kind, Thread: in.Thread, Limit: in.Limit, Offset: in.Offset}
			for _, f := range []struct {
				name, v string
				into    **time.Time
			}{{"after", in.After, &req.After}, {"before", in.Before, &req.Before}} {
				if f.v == "" {
					continue
				}
				t, err := search.ParseTime(f.v)
				if err != nil {
					return nil, errs.New(errs.InvalidField, "%s %q is not a time", f.name, f.v).With("field", f.name).WithHint("use RFC 3339 (2026-11-26T09:00:00Z) or a date (2026-11-26)")
				}
				*f.into = &t
			}
			req.MaxBytes = 16000 - sessionReserve
			return c.opt.Lobby.Search(ctx, c.sess, in.Room, req, Words)
		}).unlisted("more", "query").retyped("hits", "array")
}

// embodyTool is sync_embody.
// embodied: always true; status: only a disembodiment has one; room:
// an echo.
func embodyTool() tool {
	return hide(typed(&sdk.Tool{Name: "sync_embody", Title: "Embody an agent",
		Description: "Act in a room as your own agent (made on first use), another of yours (agent) or a role's agent (role); observers cannot. Returns your arrival: who is here, your actions, the newest messages, what needs attention (context full: the room, none: nothing; only, max_bytes as sync_read_context).",
		Annotations: annotations(false, false, true)}, embodyEnum,
		func(ctx context.Context, c *call, in *embodyIn) (*EmbodyResult, error) {
			// The arrival's shape is checked before anything changes.
			q, err := arrivalRequest(in)
			if err != nil {
				return nil, err
			}
			read := &q
			if in.Context == "none" {
				read = nil
			}
			// The result's frame around the context draws on its budget.
			frame := func(e *lobby.Embodiment) int {
				b, _ := json.Marshal(&EmbodyResult{Embodiment: e, Bootstrap: e.Bootstrap})
				return len(b) + sessionReserve
			}
			e, env, err := c.opt.Lobby.EmbodyAndRead(ctx, c.sess, in.Room, in.Agent, in.Role, read, frame, Words)
			if err != nil {
				return nil, err
			}
			return &EmbodyResult{Embodiment: e, Bootstrap: e.Bootstrap, Context: env}, nil
		}), "only", "max_bytes").unlisted("embodied", "status", "next", "room")
}

// disembodyTool is sync_disembody.
// embodied: always false; role and taken_over: only an embodiment
// has them.
func disembodyTool() tool {
	return typed(&sdk.Tool{Name: "sync_disembody", Title: "Stop acting",
		Description: "Stop acting and observe: your agent idles, keeping its state, actions and views, and frees its role; the room stays focused. Returns the lobby.",
		Annotations: annotations(false, false, true)}, nil,
		func(ctx context.Context, c *call, _ *noArgs) (*DisembodyResult, error) {
			e, v, err := c.opt.Lobby.DisembodyToLobby(ctx, c.sess)
			if err != nil {
				return nil, err
			}
			return &DisembodyResult{Embodiment: e, Lobby: v}, nil
		}).unlisted("embodied", "role", "taken_over", "next")
}

// invokeActionTool is sync_invoke_action.
// invoked: always true (a failure is an error); action: an echo; a
// builtin's result is an object, and writes is never null
// (InvokeResult.Summary).
func invokeActionTool() tool {
	return typed(&sdk.Tool{Name: "sync_invoke_action", Title: "Invoke an action",
		Description: "Invoke an action (or a builtin) in your room with its registrar's authority. A failure changes nothing and says why. Returns what it wrote and its result.",
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
			sum := res.Summary()
			sum.Result, sum.Builtin = pageValue(sum.Result, ""), pageValue(sum.Builtin, "")
			return sum, nil
		}).unlisted("invoked", "action").retyped("builtin_result", "object").retyped("writes", "array")
}

// waitTool is sync_wait.
// note: for the model, when a timeout past the cap was shortened.
func waitTool() tool {
	return hide(typed(&sdk.Tool{Name: "sync_wait", Title: "Wait for a condition",
		Description: "Wait instead of polling until a CEL condition holds (e.g. messages.directed_unread > 0). Wakes with what changed since your last read (or since a seq: since); context full: the whole room. Times out after timeout_ms with only the condition: call again. Never wait for what your own next call causes: make that call first.",
		Annotations: annotations(true, false, true)}, waitEnum,
		func(ctx context.Context, c *call, in *waitIn) (*substrate.WaitResult, error) {
			room := c.room(in.Room)
			p, err := c.principal(ctx, room)
			if err != nil {
				return nil, err
			}
			c.recheckToken(p)
			// A wake-up needs the latest few messages, not 100.
			if in.MessagesLimit == nil {
				in.MessagesLimit = ptr(int64(20))
			}
			q, err := contextRequest(shaping(in.waitShaping), nil, "", in.Context, in.Since)
			if err != nil {
				return nil, err
			}
			q.Reserve = sessionReserve + 2*len(in.Condition) + 200
			if in.Thread < 0 {
				return nil, badThread(in.Thread)
			}
			q.Thread = in.Thread
			// The substrate decides the default timeout and the cap (the
			// same for every surface).
			return c.opt.Substrate.Wait(ctx, p, room, in.Condition, time.Duration(in.TimeoutMS)*time.Millisecond, q)
		}), "depth", "messages_limit", "since").unlisted("note")
}

// registerActionTool is sync_register_action.
// value: a view's (an action has none).
func registerActionTool() tool {
	return hide(typed(&sdk.Tool{Name: "sync_register_action", Title: "Register an action",
		Description: "Register or replace an action in your room: named, parameterised, guarded writes anyone may invoke, with your authority. Ready-made ones: sync_help key standard_library (also timer, on_invoke). Returns the definition, changes and warnings.",
		Annotations: annotations(false, true, true)}, nil,
		func(ctx context.Context, c *call, in *registerActionIn) (*substrate.RegisterResult, error) {
			p, err := c.actor(ctx)
			if err != nil {
				return nil, err
			}
			return c.opt.Substrate.RegisterAction(ctx, p, c.sess.RoomID, substrate.ActionDef{ID: in.ID, Scope: in.Scope, Description: in.Description,
				Intent: in.Intent, Params: in.Params, If: in.If, Enabled: in.Enabled, Writes: in.Writes, Result: in.Result, Timer: in.Timer, OnInvoke: in.OnInvoke})
		}), "timer", "on_invoke").retyped("definition", "object").unlisted("value")
}

// registerViewTool is sync_register_view.
func registerViewTool() tool {
	return hide(typed(&sdk.Tool{Name: "sync_register_view", Title: "Register a view",
		Description: "Register or replace a view: a CEL expression evaluated with your read authority whose value is public (also enabled, render and timer). Returns its value.",
		Annotations: annotations(false, true, true)}, nil,
		func(ctx context.Context, c *call, in *registerViewIn) (*substrate.RegisterResult, error) {
			p, err := c.actor(ctx)
			if err != nil {
				return nil, err
			}
			out, err := c.opt.Substrate.RegisterView(ctx, p, c.sess.RoomID, substrate.ViewDef{ID: in.ID, Expr: in.Expr, Scope: in.Scope,
				Description: in.Description, Enabled: in.Enabled, Render: in.Render, Timer: in.Timer})
			if err == nil {
				out.Value = pageValue(out.Value, "views["+strconv.Quote(in.ID)+"]")
			}
			return out, err
		}), "render", "timer", "enabled").retyped("definition", "object")
}

// sendMessageTool is sync_send_message.
// The builtin _send_message: no result of either kind.
func sendMessageTool() tool {
	return typed(&sdk.Tool{Name: "sync_send_message", Title: "Send a message",
		Description: "Post a message as your agent; answers with its seq, which reply_to and _ack take. With to it is directed and raises their directed_unread.",
		Annotations: annotations(false, false, false)}, nil,
		func(ctx context.Context, c *call, in *sendMessageIn) (*substrate.SentMessage, error) {
			p, err := c.actor(ctx)
			if err != nil {
				return nil, err
			}
			raw, _ := json.Marshal(in)
			res, err := c.opt.Substrate.Invoke(ctx, p, c.sess.RoomID, "_send_message", raw)
			if err != nil {
				return nil, err
			}
			// The message's own seq, which reply_to and _ack name it
			// by, not the invocation's (the room's, past it).
			sent, ok := res.Builtin.(*substrate.SentMessage)
			if !ok {
				// The message was sent: a retry would send it twice.
				return nil, errs.New(errs.Internal, "the message was sent, but sync could not say its seq").
					WithHint("read the room's messages to find it; do not send it again")
			}
			return sent, nil
		})
}

// helpTool is sync_help.
// usage: how to call sync_help, in the model's words; key: an echo.
func helpTool() tool {
	return typed(&sdk.Tool{Name: "sync_help", Title: "Help",
		Description: "Help: without key, the list of keys (skill: how to work in rooms well; guide, standard_library, expressions, …); rooms may override keys.",
		Annotations: annotations(true, false, true)}, nil,
		func(ctx context.Context, c *call, in *helpIn) (*substrate.HelpResult, error) {
			room := c.room(in.Room)
			var res *substrate.HelpResult
			var err error
			if room == "" {
				res, err = c.opt.Substrate.SystemHelp(in.Key, Words)
			} else {
				var p *substrate.Principal
				if p, err = c.principal(ctx, room); err != nil {
					return nil, err
				}
				res, err = c.opt.Substrate.Help(ctx, p, room, in.Key)
			}
			return withSkill(res, err, in.Key, c.opt.PublicURL)
		}).unlisted("usage", "key")
}

// withSkill adds the key skill to help: the text Claude Code's skill
// loads (SKILL.md, also served at plugin.SkillPath), unless the room
// overrides it. It lives here, not in the core's help texts, because it
// speaks in tool calls and names the server's URL.
func withSkill(res *substrate.HelpResult, err error, key, public string) (*substrate.HelpResult, error) {
	switch {
	case key == skillKey && errs.Is(err, errs.HelpKeyNotFound):
		var zero int64
		return &substrate.HelpResult{Key: skillKey, Content: string(plugin.Skill(public)), Source: "system", Version: &zero}, nil
	case err == nil && key == "" && !slices.Contains(res.Keys, skillKey):
		res.Keys = append(res.Keys, skillKey)
		slices.Sort(res.Keys)
	case errs.Is(err, errs.HelpKeyNotFound):
		var e *errs.Error
		if errors.As(err, &e) {
			if keys, ok := e.Details["available"].([]string); ok && !slices.Contains(keys, skillKey) {
				keys = append(slices.Clone(keys), skillKey)
				slices.Sort(keys)
				e.With("available", keys)
			}
		}
	}
	return res, err
}

// skillKey is the help key of the skill.
const skillKey = "skill"

// evalCelTool is sync_eval_cel.
// an echo
func evalCelTool() tool {
	return typed(&sdk.Tool{Name: "sync_eval_cel", Title: "Evaluate CEL",
		Description: "Evaluate CEL in a room with your read authority, to test a condition or, binding params, an action's if; false names the failing clause.",
		Annotations: annotations(true, false, true)}, nil,
		func(ctx context.Context, c *call, in *evalIn) (*substrate.EvalResult, error) {
			room := c.room(in.Room)
			p, err := c.principal(ctx, room)
			if err != nil {
				return nil, err
			}
			out, err := c.opt.Substrate.Eval(ctx, p, room, in.Expr, in.Params)
			if err == nil {
				out.Value = pageValue(out.Value, in.Expr)
			}
			return out, err
		}).unlisted("expression")
}

// revokeAccessTool is sync_revoke_access.
func revokeAccessTool() tool {
	return typed(&sdk.Tool{Name: "sync_revoke_access", Title: "Drop a room",
		Description: "Drop a room from this connection now; only the person reconnecting adds it back (the result says how).",
		Annotations: annotations(false, true, true)}, nil,
		func(ctx context.Context, c *call, in *roomIn) (*Revoked, error) {
			ch, err := c.opt.Lobby.RevokeAccess(ctx, c.sess, in.Room)
			if err != nil {
				return nil, err
			}
			out := &Revoked{ScopeChange: ch, Restore: "Tell the person: to give this connection " + in.Room + " again, " +
				Words.Say(errs.Step{Op: errs.OpReauthorize, Room: in.Room}) + "; you cannot undo it with a tool."}
			if ch.Scope == "" {
				out.Restore = "This connection has no rooms left. " + out.Restore
			}
			return out, nil
		})
}

// restrictScopeTool is sync_restrict_scope.
func restrictScopeTool() tool {
	return typed(&sdk.Tool{Name: "sync_restrict_scope", Title: "Narrow scope",
		Description: "Narrow this connection's scope to part of it (rooms:<id>:<level>, rooms:*:<level>, create_rooms); a wider one is refused, nothing changes: widening takes the person's consent.",
		Annotations: annotations(false, true, true)}, nil,
		func(ctx context.Context, c *call, in *restrictIn) (*lobby.ScopeChange, error) {
			return c.opt.Lobby.RestrictScope(ctx, c.sess, in.Scope)
		})
}

// shareRoomTool is sync_share_room.
// always true; echoes
func shareRoomTool() tool {
	return typed(&sdk.Tool{Name: "sync_share_room", Title: "Share a room",
		Description: "Give another sync user a role in a room you own (needs this connection's admin access to it).",
		Annotations: annotations(false, false, true)}, map[string][]string{"role": {"owner", "collaborator", "participant", "observer"}},
		func(ctx context.Context, c *call, in *shareIn) (*Shared, error) {
			role, err := c.opt.Lobby.ShareRoomByName(ctx, c.sess, in.Room, in.Username, in.Role, c.opt.Auth.UserID)
			if err != nil {
				return nil, err
			}
			return &Shared{Shared: true, Room: in.Room, Username: in.Username, Role: role}, nil
		}).unlisted("shared", "room", "username")
}
