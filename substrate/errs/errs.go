// Package errs is the one error type every layer returns to clients: a
// stable code, a message saying what was wrong, a hint saying what to do
// instead, and optional details. The code decides the HTTP status, and the
// MCP layer reports the same code in tool errors.
package errs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// Code is a stable, machine-readable error code.
type Code string

// The codes, grouped by the HTTP status they map to.
const (
	// 400
	InvalidJSON  Code = "invalid_json"
	InvalidField Code = "invalid_field"
	// InvalidValue: well-formed JSON the server does not store (nested
	// deeper than Limits.MaxValueDepth).
	InvalidValue Code = "invalid_value"
	// 401
	Unauthorized Code = "unauthorized"
	// 403
	Forbidden     Code = "forbidden"
	ScopeDenied   Code = "scope_denied"
	ReadOnlyToken Code = "read_only_token"
	// 404
	NotFound      Code = "not_found"
	RoomNotFound  Code = "room_not_found"
	AgentNotFound Code = "agent_not_found"
	KeyNotFound   Code = "key_not_found"
	// 405
	MethodNotAllowed Code = "method_not_allowed"
	// 409
	RoomExists      Code = "room_exists"
	AgentExists     Code = "agent_exists"
	VersionConflict Code = "version_conflict"
	KeyExists       Code = "key_exists"
	AppendOnly      Code = "append_only"
	NotMergeable    Code = "not_mergeable"
	ScopeInUse      Code = "scope_in_use"
	ScopeFull       Code = "scope_full"
	// HistoryIncomplete: a replay needs audit entries that are missing or
	// predate state deltas.
	HistoryIncomplete Code = "history_incomplete"
	// ViewBudget: a view registration would make the room's views cost
	// more per read than the server evaluates.
	ViewBudget Code = "view_budget_exceeded"
	// EnabledBudget: a write would make the room's entry-level enabled
	// expressions cost more per read than the server evaluates.
	EnabledBudget Code = "enabled_budget_exceeded"
	// ActionBudget: an action registration would make the room's actions'
	// availability cost more per read than the limit.
	ActionBudget Code = "action_budget_exceeded"
	NotNumeric   Code = "not_numeric"
	// BranchHeld: another participant has the turn on a loom branch.
	BranchHeld Code = "branch_held"
	// LastOwner: a membership change (a share, a leave) would leave a
	// room with no owner (lobby).
	LastOwner Code = "last_owner"
	// Actions, views, CEL (400/403/404/409 as listed in statusOf).
	ActionNotFound     Code = "action_not_found"
	ActionCooldown     Code = "action_cooldown"
	ActionDisabled     Code = "action_disabled"
	ActionOwned        Code = "action_owned"
	InvalidParam       Code = "invalid_param"
	PreconditionFailed Code = "precondition_failed"
	CELError           Code = "cel_error"
	ViewNotFound       Code = "view_not_found"
	HelpKeyNotFound    Code = "help_key_not_found"
	// MCP sessions (lobby).
	RoomNotInScope Code = "room_not_in_scope"
	NotEmbodied    Code = "not_embodied"
	// 413
	BodyTooLarge  Code = "body_too_large"
	ValueTooLarge Code = "value_too_large"
	// 429
	RateLimited Code = "rate_limited"
	// RoomBusy: the room spent its expression budget per second (work,
	// not requests); retry after details.retry_after_ms.
	RoomBusy Code = "room_busy"
	// 500, 503
	Internal    Code = "internal"
	Unavailable Code = "unavailable"
)

var statusOf = map[Code]int{
	InvalidJSON: 400, InvalidField: 400, InvalidValue: 400,
	Unauthorized: 401,
	Forbidden:    403, ScopeDenied: 403, ReadOnlyToken: 403,
	NotFound: 404, RoomNotFound: 404, AgentNotFound: 404, KeyNotFound: 404,
	MethodNotAllowed: 405,
	RoomExists:       409, AgentExists: 409, VersionConflict: 409, KeyExists: 409,
	AppendOnly: 409, NotMergeable: 409, ScopeInUse: 409, ScopeFull: 409, HistoryIncomplete: 409, ViewBudget: 409, EnabledBudget: 409, ActionBudget: 409, NotNumeric: 409, BranchHeld: 409, LastOwner: 409,
	ActionNotFound: 404, ViewNotFound: 404, HelpKeyNotFound: 404,
	ActionCooldown: 409, ActionDisabled: 409, PreconditionFailed: 409,
	ActionOwned: 403, InvalidParam: 400, CELError: 400,
	RoomNotInScope: 403, NotEmbodied: 409,
	BodyTooLarge: 413, ValueTooLarge: 413,
	RateLimited: 429, RoomBusy: 429,
	Internal: 500, Unavailable: 503,
}

// Status is the HTTP status for code; unknown codes are 500.
func (c Code) Status() int {
	if s, ok := statusOf[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Error is a client-facing error.
type Error struct {
	Code    Code
	Message string
	Hint    string
	// Details are extra fields merged into the JSON body (for example
	// current_version on a version_conflict).
	Details map[string]any
	// Next is the operation that moves the caller on, worded by the
	// surface (In) as the body's "next".
	Next *Step
	// Options are the ways out the caller may choose between (seed 003's
	// room_not_in_scope), worded by the surface as the body's "options".
	Options []Step
	words   Words
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// New makes an error with a formatted message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WithHint sets what the client should do instead.
func (e *Error) WithHint(format string, args ...any) *Error {
	e.Hint = fmt.Sprintf(format, args...)
	return e
}

// With adds a detail field.
func (e *Error) With(key string, value any) *Error {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	e.Details[key] = value
	return e
}

// From returns err as an *Error; anything else becomes an internal error
// whose message hides the cause (which the caller should log).
func From(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if down, before := storeUnavailable(err); down {
		hint := "retry after the Retry-After seconds; the database was not reached, so nothing of this request was applied"
		if !before {
			hint = "retry after the Retry-After seconds. The connection to the database was lost mid-request, so a write may or may not " +
				"have been applied (the loss may have come during its commit): before retrying one that must not apply twice, " +
				"read the room's context (its seq, or the key the write sets) to see whether it took; a read changed nothing"
		}
		return &Error{Code: Unavailable, Message: "the database is unavailable right now", Hint: hint}
	}
	return &Error{Code: Internal, Message: "internal error", Hint: "retry later; if it persists, report it with the time of the request"}
}

// RetryAfter is the Retry-After (seconds) sent with an Unavailable error.
const RetryAfter = 5

// storeUnavailable recognises a database that cannot be reached (a
// refused or dropped connection, a server shutting down or starting, no
// connection slots; on Citus, the coordinator's connection to a worker
// lost) as opposed to a failing statement; before says the request never
// reached the database (a connection refused or not made), so that
// nothing of it was applied. It duck-types pgx's errors so this package
// needs no database driver.
func storeUnavailable(err error) (down, before bool) {
	var state interface{ SQLState() string }
	if errors.As(err, &state) {
		c := state.SQLState()
		switch {
		case c == "53300" || c == "57P03" || c == "08001" || c == "08004":
			// No connection slot, the server starting, a connection
			// refused: the session never began.
			return true, true
		case strings.HasPrefix(c, "08") || c == "57P01" || c == "57P02":
			return true, false
		case c == "XX000":
			return citusNodeLost(err.Error()), false
		}
		return false, false
	}
	var retry interface{ SafeToRetry() bool }
	if errors.As(err, &retry) && retry.SafeToRetry() {
		// pgx: nothing was sent on the connection.
		return true, true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true, false
	}
	// A pooled connection the server dropped ends its statement so.
	return errors.Is(err, io.ErrUnexpectedEOF), false
}

// citusNodeLost recognises Citus's internal errors (SQLSTATE XX000) for a
// worker the coordinator lost its connection to, or cannot reach: the
// statement failed for the node's sake, not its own. (Citus reports most
// such losses as 08006; these it raises as internal errors.)
func citusNodeLost(msg string) bool {
	for _, s := range []string{
		"connection to the remote node",             // connection to the remote node user@host:port failed ...
		"failure on connection marked as essential", // a COMMIT whose worker connection died in the transaction
		"could not establish any connections to the node",
		"connection not open",
		"terminating connection due to unexpected postmaster exit",
		"the connection to the node", // ... is lost / was lost
		// A worker's result without an SQLSTATE, which Citus re-raises as
		// XX000 with libpq's own words for the connection it lost
		// (ReportResultError): a worker killed mid-statement.
		"server closed the connection unexpectedly",
		"no connection to the server",
		"could not receive data from server",
		"could not send data to server",
		"lost synchronization with server",
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// Is reports whether err carries code.
func Is(err error, code Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// Body is the JSON shape of an error response.
func (e *Error) Body() map[string]any {
	b := make(map[string]any, len(e.Details)+3)
	for k, v := range e.Details {
		b[k] = v
	}
	b["error"] = string(e.Code)
	b["message"] = e.Message
	if e.Hint != "" {
		b["hint"] = e.Hint
	}
	if e.Next != nil {
		w := e.words
		if w == nil {
			w = Plain
		}
		b["next"] = w.Say(*e.Next)
	}
	if len(e.Options) > 0 {
		w := e.words
		if w == nil {
			w = Plain
		}
		opts := make([]string, 0, len(e.Options))
		for _, s := range e.Options {
			if said := w.Say(s); said != "" {
				opts = append(opts, said)
			}
		}
		b["options"] = opts
	}
	return b
}

// Step is an operation a caller can make next, named the same way by every
// surface; each surface words it in its own vocabulary (Words): a route
// for the REST API, a tool call for MCP. The domain says what to do, never
// how a surface spells it.
type Step struct {
	Op Op
	// Room is the room the operation applies to ("" for none).
	Room string
	// Args are the operation's arguments by the names both surfaces use
	// (only, depth, messages_after, max_bytes, key, condition, action…).
	Args map[string]any
}

// Op names an operation of the substrate.
type Op string

// The operations steps point to.
const (
	// OpReadContext reads the room's context; Args are its shaping fields.
	OpReadContext Op = "read_context"
	// OpInvoke invokes Args["action"] with Args["params"].
	OpInvoke Op = "invoke"
	// OpWait waits for Args["condition"].
	OpWait Op = "wait"
	// OpHelp reads help key Args["key"] (the list without one).
	OpHelp Op = "help"
	// OpEval evaluates Args["expr"].
	OpEval Op = "eval"
	// OpJoin makes the caller an agent of the room (MCP: embody).
	OpJoin Op = "join"
	// OpCreateRoom creates a room.
	OpCreateRoom Op = "create_room"
	// OpRegisterAction and OpRegisterView register a definition.
	OpRegisterAction Op = "register_action"
	OpRegisterView   Op = "register_view"
	// OpWriteState writes state directly (REST only; MCP writes through
	// actions).
	OpWriteState Op = "write_state"
	// OpShareRoom is an owner of Room sharing it with Args["username"]:
	// a step for someone else, which the caller asks of them.
	OpShareRoom Op = "share_room"
	// OpReauthorize is the user authorizing the client again, ticking
	// Room on the consent screen (Args["allow_shared"]: or allowing new
	// shared rooms there).
	OpReauthorize Op = "reauthorize"
	// OpSearch searches the room for Args["q"] (filters and offset in
	// Args).
	OpSearch Op = "search"
)

// Words renders steps in one surface's vocabulary.
type Words interface {
	Say(Step) string
}

// Plain words a step by its operation and arguments as JSON, the form
// used when no surface is known: read_context {"only":"actions"}.
var Plain Words = plain{}

type plain struct{}

func (plain) Say(s Step) string { return SayCall(string(s.Op), s, "room") }

// SayCall words a step as name {args}, with the step's room as the
// argument roomArg when it has one ("" leaves it out). Arguments are
// sorted (encoding/json sorts map keys), so the text is stable.
func SayCall(name string, s Step, roomArg string) string {
	args := make(map[string]any, len(s.Args)+1)
	for k, v := range s.Args {
		args[k] = v
	}
	if s.Room != "" && roomArg != "" {
		args[roomArg] = s.Room
	}
	if len(args) == 0 {
		return name
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(args)
	return name + " " + strings.TrimSpace(b.String())
}

// WithOptions sets the ways out the caller may choose between.
func (e *Error) WithOptions(steps ...Step) *Error {
	e.Options = steps
	return e
}

// WithNext sets the operation that moves the caller on; the surface words
// it as the body's "next".
func (e *Error) WithNext(s Step) *Error {
	e.Next = &s
	return e
}

// In returns a copy of e whose next step is worded by w.
func (e *Error) In(w Words) *Error {
	c := *e
	c.words = w
	return &c
}
