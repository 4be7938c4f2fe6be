// What a context read asks for: the request, the parameters a surface
// received and their checks, and the echo of them a cut envelope carries.

package envelope

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// ContextRequest shapes a context read (reference §3.1).
type ContextRequest struct {
	// Depth is lean (default), full (action params, writes, if, scope,
	// intent) or usage (full plus invocation counts).
	Depth string
	// Only keeps the named sections (state, views, agents, actions,
	// messages) or single scopes (state.<scope>).
	Only []string
	// NoActions and NoMessages drop those sections.
	NoActions, NoMessages bool
	// MessagesAfter returns messages with seq > it (oldest first) instead
	// of the newest ones.
	MessagesAfter *int64
	// MessagesLimit caps recent messages: default 100, max 500.
	MessagesLimit int
	// Include adds log scopes (_messages, _audit) to state, newest
	// MessagesLimit entries each.
	Include []string
	// NoContext (context=none) makes a wait return only whether its
	// condition held, with the room seq: no envelope, nothing marked read.
	NoContext bool
	// Full (context=full) makes a wait return the whole context, on a
	// wake-up and on a timeout; Delta (context=delta) what changed since
	// the reader's last read, on a timeout too. Without either a wait
	// wakes with the delta and times out with the condition alone.
	Full, Delta bool
	// Since is where a delta starts (default: the reader's last context
	// read, or for a reader without an agent the room seq when the wait
	// began). Setting it makes a context read a delta too.
	Since *int64
	// MaxBytes is the envelope's size budget in bytes of JSON (0: none);
	// see Fit. At most 4 MiB.
	MaxBytes int
	// KeysAfter and Prefix narrow state to the keys after KeysAfter (in
	// key order) that start with Prefix: how a scope too large for one
	// budget is read page by page. With either, or with only naming a
	// single scope, the budget keeps keys in key order, so that the next
	// page (keys_after the last key returned) starts exactly after it.
	KeysAfter, Prefix string
	// AdviseMax is the largest max_bytes a cut's read may advise (0: the
	// 4 MiB any request may ask): a surface whose results have a limit
	// sets what it can hold, and a value larger than that is advised as
	// the expression that evaluates to it, which that surface pages.
	AdviseMax int
	// Reserve is room the budget leaves for what the caller wraps the
	// envelope in (a tool result's other fields): MaxBytes is a ceiling
	// on the whole result.
	Reserve int
	// Peek reads without counting as the reader's read: nothing is marked
	// read and the first read's depth full is kept for the next one (an
	// embodiment's arrival, which shows a part of the room).
	Peek bool
	// Thread narrows messages to one thread (the seq of its first
	// message), oldest first, paged with MessagesAfter; a wait with a
	// thread (and no condition) waits for a message in it.
	Thread int64
}

// adviseMax is the largest budget a cut's read may name.
func (r ContextRequest) adviseMax() int {
	if r.AdviseMax > 0 {
		return min(r.AdviseMax, maxContextBytes)
	}
	return maxContextBytes
}

// Wants reports whether the read shows a section: every one, unless it
// names some (a section, or a part of one: state.<scope>, views.<id>).
func (r ContextRequest) Wants(sec string) bool {
	if len(r.Only) == 0 {
		return true
	}
	for _, o := range r.Only {
		if o == sec || strings.HasPrefix(o, sec+".") {
			return true
		}
	}
	return false
}

// Paged reports a read that walks state in key order.
func (r ContextRequest) Paged() bool {
	if r.KeysAfter != "" || r.Prefix != "" {
		return true
	}
	for _, o := range r.Only {
		if strings.HasPrefix(o, "state.") {
			return true
		}
	}
	return false
}

// keyWanted reports whether a state key is in the read's key range.
func (r ContextRequest) keyWanted(k string) bool {
	return (r.KeysAfter == "" || k > r.KeysAfter) && strings.HasPrefix(k, r.Prefix)
}

// KeyRange is a scope's entries narrowed to the request's key range (a
// copy: the snapshot's maps are shared between reads).
func (r ContextRequest) KeyRange(v any) any {
	switch m := v.(type) {
	case map[string]json.RawMessage:
		out := map[string]json.RawMessage{}
		for k, raw := range m {
			if r.keyWanted(k) {
				out[k] = raw
			}
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, val := range m {
			if r.keyWanted(k) {
				out[k] = val
			}
		}
		return out
	}
	return v
}

// ContextParams are a read's parameters as a surface received them,
// before they are checked: a query string's words parsed into numbers
// (ParseContextRequest), or a tool's typed arguments as they are. A field
// left zero (nil) takes the read's default.
type ContextParams struct {
	Depth string // lean (default), full or usage
	// Only and Include are comma-separated lists: sections (a scope is
	// state.<scope>) and the log scopes _messages and _audit.
	Only, Include string
	// Context is full (default), delta or none.
	Context           string
	MaxBytes          *int
	KeysAfter, Prefix string
	Since             *int64
	NoActions         bool
	NoMessages        bool
	MessagesAfter     *int64
	Thread            *int64
	MessagesLimit     *int // default 100
}

// ParseContextRequest reads the context parameters from a query string.
func ParseContextRequest(get func(string) string) (ContextRequest, error) {
	p := ContextParams{Depth: get("depth"), Only: get("only"), Include: get("include"), Context: get("context"),
		KeysAfter: get("keys_after"), Prefix: get("prefix"),
		NoActions: get("actions") == "false", NoMessages: get("messages") == "false"}
	// A word that is not a number is refused with the same words as a
	// number out of range.
	if v := get("max_bytes"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return ContextRequest{}, maxBytesRefused(v)
		}
		p.MaxBytes = &n
	}
	var err error
	if p.Since, err = queryInt(get, "since", sinceRefused); err != nil {
		return ContextRequest{}, err
	}
	if p.MessagesAfter, err = queryInt(get, "messages_after", messagesAfterRefused); err != nil {
		return ContextRequest{}, err
	}
	if p.Thread, err = queryInt(get, "thread", threadRefused); err != nil {
		return ContextRequest{}, err
	}
	if v := get("messages_limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return ContextRequest{}, messagesLimitRefused(v)
		}
		p.MessagesLimit = &n
	}
	return p.Request()
}

// queryInt reads an optional whole number from a query string.
func queryInt(get func(string) string, name string, refused func(string) error) (*int64, error) {
	v := get(name)
	if v == "" {
		return nil, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return nil, refused(v)
	}
	return &n, nil
}

func maxBytesRefused(v string) error {
	return errs.New(errs.InvalidField, "max_bytes %s is not between %d and %d", v, minContextBytes, maxContextBytes).With("field", "max_bytes").
		WithHint("ask for what you need: the default fits a model's context; raise it to read more at once")
}

func sinceRefused(v string) error {
	return errs.New(errs.InvalidField, "since %s is not a non-negative integer", v).With("field", "since").WithHint("pass the seq of your last read (every result carries it)")
}

func messagesAfterRefused(v string) error {
	return errs.New(errs.InvalidField, "messages_after %s is not a non-negative integer", v).With("field", "messages_after").WithHint("pass the seq of the last message you saw")
}

func threadRefused(v string) error {
	return errs.New(errs.InvalidField, "thread %s is not a message seq", v).With("field", "thread").WithHint("pass the seq of the thread's first message (messages.threads lists them)")
}

func messagesLimitRefused(v string) error {
	return errs.New(errs.InvalidField, "messages_limit %s is not between 1 and 500", v).With("field", "messages_limit").WithHint("use 1–500 (default 100)")
}

// Request checks the parameters and makes the read they ask for: the
// one place a read's parameters are judged, whichever surface sent them.
func (p ContextParams) Request() (ContextRequest, error) {
	var q ContextRequest
	q.Depth = p.Depth
	switch q.Depth {
	case "", "lean", "full", "usage":
	default:
		return q, errs.New(errs.InvalidField, "depth %q is not lean, full or usage", q.Depth).With("field", "depth").WithHint("use depth lean (the default), full or usage")
	}
	if q.Depth == "" {
		q.Depth = "lean"
	}
	q.Only = splitList(p.Only)
	for _, o := range q.Only {
		sec, _, _ := strings.Cut(o, ".")
		if !slices.Contains(sections, sec) {
			return q, errs.New(errs.InvalidField, "only %q names no section", o).With("field", "only").WithHint("sections are %s; a scope is state.<scope>", strings.Join(sections, ", "))
		}
	}
	q.Include = splitList(p.Include)
	for _, inc := range q.Include {
		if inc != authority.ScopeMessages && inc != authority.ScopeAudit {
			return q, errs.New(errs.InvalidField, "include %q: only _messages and _audit can be included", inc).With("field", "include").WithHint(`include "_messages", "_audit" or "_messages,_audit"`)
		}
	}
	if p.MaxBytes != nil {
		if n := *p.MaxBytes; n < minContextBytes || n > maxContextBytes {
			return q, maxBytesRefused(strconv.Itoa(n))
		}
		q.MaxBytes = *p.MaxBytes
	}
	q.KeysAfter, q.Prefix = p.KeysAfter, p.Prefix
	switch p.Context {
	case "":
	case "full":
		q.Full = true
	case "none":
		q.NoContext = true
	case "delta":
		q.Delta = true
	default:
		return q, errs.New(errs.InvalidField, "context %q is not delta, full or none", p.Context).With("field", "context").WithHint(`context "delta" (the default) returns what changed, "full" the whole context, "none" only whether the condition held`)
	}
	if p.Since != nil {
		if *p.Since < 0 {
			return q, sinceRefused(strconv.FormatInt(*p.Since, 10))
		}
		q.Since = p.Since
	}
	q.NoActions, q.NoMessages = p.NoActions, p.NoMessages
	if p.MessagesAfter != nil {
		if *p.MessagesAfter < 0 {
			return q, messagesAfterRefused(strconv.FormatInt(*p.MessagesAfter, 10))
		}
		q.MessagesAfter = p.MessagesAfter
	}
	if p.Thread != nil {
		if *p.Thread <= 0 {
			return q, threadRefused(strconv.FormatInt(*p.Thread, 10))
		}
		q.Thread = *p.Thread
	}
	q.MessagesLimit = 100
	if p.MessagesLimit != nil {
		if n := *p.MessagesLimit; n < 1 || n > 500 {
			return q, messagesLimitRefused(strconv.Itoa(n))
		}
		q.MessagesLimit = *p.MessagesLimit
	}
	return q, nil
}

// splitList reads a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

var sections = []string{"state", "views", "agents", "actions", "messages"}

// Echo is the request as its envelope repeats it.
func (r ContextRequest) Echo() RequestEcho {
	var e RequestEcho
	no := false
	if r.Depth != "lean" {
		e.Depth = r.Depth
	}
	e.Only = strings.Join(r.Only, ",")
	if r.NoActions {
		e.Actions = &no
	}
	if r.NoMessages {
		e.Messages = &no
	}
	e.MessagesAfter = r.MessagesAfter
	if r.MessagesLimit != 100 {
		e.MessagesLimit = r.MessagesLimit
	}
	e.MaxBytes = r.MaxBytes
	e.Include = strings.Join(r.Include, ",")
	e.KeysAfter, e.Prefix = r.KeysAfter, r.Prefix
	return e
}
