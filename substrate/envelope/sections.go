package envelope

// The envelope put together section by section: which sections a
// request shows, what the envelope then says it holds and left out, the
// help its contents call for, and how a read since a seq is shaped. The
// core fills each section from the reader's room; these decide from what
// it filled and the request alone.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/syncsubstrate/sync/substrate/defs"
)

// Shows reports whether the read shows a section: those it wants
// (Wants), less actions and messages when it drops them.
func (r ContextRequest) Shows(sec string) bool {
	if (sec == "actions" && r.NoActions) || (sec == "messages" && r.NoMessages) {
		return false
	}
	return r.Wants(sec)
}

// New begins the envelope of a read by self (its params as CEL sees
// them, {} when none). A whole read says what the room is for (about);
// its pages need not.
func New[A any](req ContextRequest, self string, params map[string]any, about *RoomAbout) *Envelope[A] {
	env := &Envelope[A]{Self: self, Params: params}
	if len(req.Only) == 0 && !req.Paged() && req.MessagesAfter == nil && req.Thread == 0 {
		env.About = about
	}
	if env.Params == nil {
		env.Params = map[string]any{}
	}
	return env
}

// Finish says what the filled envelope holds: the sections req shows,
// those it left out and the read (expand words it) that shows them, the
// help keys its contents call for, the request, the seq it was read at
// and how many entries it left unevaluated.
func (e *Envelope[A]) Finish(req ContextRequest, seq int64, unevaluated int, help []string, expand func(args map[string]any) string) {
	meta := &e.Context
	meta.Depth = req.Depth
	var present, elided, more []string
	for _, sec := range sections {
		if req.Shows(sec) {
			present = append(present, sec)
		} else {
			elided = append(elided, sec)
		}
	}
	meta.Sections = present
	if len(elided) > 0 {
		meta.Elided = elided
		// What was left out, read on its own.
		more = append(more, expand(map[string]any{"only": strings.Join(elided, ",")}))
	}
	meta.Expand, meta.Help = more, help
	meta.Request = req.Echo()
	meta.Seq = seq
	meta.EntriesUnevaluated = unevaluated
}

// ViewsShown are the views (id → value) narrowed to those the request
// names when it names views.<id> (and not views).
func ViewsShown(views map[string]any, req ContextRequest) map[string]any {
	var ids []string
	for _, o := range req.Only {
		if id, ok := strings.CutPrefix(o, "views."); ok {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 || slices.Contains(req.Only, "views") {
		return views
	}
	out := map[string]any{}
	for _, id := range ids {
		if v, ok := views[id]; ok {
			out[id] = v
		}
	}
	return out
}

// ErrorText is an error as a reader is shown it in a value (a failing
// view's {"_error": …}): a coded error's message, else its text.
func ErrorText(err error) string {
	if e, ok := err.(interface{ Body() map[string]any }); ok {
		if m, ok := e.Body()["message"].(string); ok {
			return m
		}
	}
	return err.Error()
}

// HelpKeys are the help keys a room's contents call for: how to begin a
// vocabulary (custom, the room's own actions shown, is 0), what a
// directed message asks, how contested actions are settled.
func HelpKeys(custom int, directedUnread int64, contested bool) []string {
	var help []string
	if custom == 0 {
		help = append(help, "vocabulary_bootstrap")
	}
	if directedUnread > 0 {
		help = append(help, "directed_messages")
	}
	if contested {
		help = append(help, "contested_actions")
	}
	return help
}

// deltaWholeAt is the share of the entries a reader sees that, changed
// since a delta's start, make it answer with the whole context instead:
// the delta would repeat nearly the whole room, and its list of changed
// keys made it larger than the room (the 500-key room with every key
// changed since the reader's last read: 52,136 bytes as a delta, 43,404
// whole). Rooms with fewer entries than deltaWholeMin always get deltas.
const (
	deltaWholeAt  = 0.8
	deltaWholeMin = 20
)

// MostlyChanged reports whether at least deltaWholeAt of the entries of
// state (the reader's, scope → entries) changed since a delta's start
// (changed says of one).
func MostlyChanged(state map[string]any, changed func(scope, key string) bool) bool {
	total, n := 0, 0
	count := func(scope, key string) {
		total++
		if changed(scope, key) {
			n++
		}
	}
	for scope, v := range state {
		switch m := v.(type) {
		case map[string]any:
			for k := range m {
				count(scope, k)
			}
		case map[string]json.RawMessage:
			for k := range m {
				count(scope, k)
			}
		}
	}
	return total >= deltaWholeMin && float64(n) >= deltaWholeAt*float64(total)
}

// DeltaRequest shapes a read since a seq: the whole context, with a note
// that says so, when most of what the reader sees changed since
// (mostlyChanged); else a delta, which reads the messages since (up to
// the most a read returns) to show the newest of them. shown is the
// number of messages the read shows.
func DeltaRequest(req *ContextRequest, mostlyChanged func(since int64) bool) (note string, shown int) {
	if req.Since != nil && mostlyChanged(*req.Since) {
		note = fmt.Sprintf("most of what you see changed since seq %d: this is the whole context, not a delta", *req.Since)
		req.Since = nil
	}
	shown = req.MessagesLimit
	if req.Since != nil {
		if req.MessagesAfter == nil {
			req.MessagesAfter = req.Since
		}
		// A delta shows the newest of the messages since (the core's
		// deltaOf), so it reads them all, up to the most a read returns.
		req.MessagesLimit = 500
	}
	return note, shown
}

// YouElided adds to the envelope's attention the sections that changed
// since the reader's last read (changed says which, of those given) that
// the budget cut (sections and scopes, not single keys).
func YouElided[A any](env *Envelope[A], changed func(since *SinceLastRead, cut []string) []string) {
	at := env.Context.Attention
	if at == nil || env.Context.Budget == nil || at.SinceYourLastRead == nil {
		return
	}
	var cut []string
	for _, c := range env.Context.Budget.Cuts {
		if strings.Count(c.Section, ".") <= 1 {
			cut = append(cut, c.Section)
		}
	}
	for _, sec := range changed(at.SinceYourLastRead, cut) {
		if !slices.Contains(at.YouElided, sec) {
			at.YouElided = append(at.YouElided, sec)
		}
	}
}

// Attend adds the acknowledgements overdue to the envelope's attention.
func (e *Envelope[A]) Attend(overdue []OverdueAck) {
	if len(overdue) == 0 {
		return
	}
	if e.Context.Attention == nil {
		e.Context.Attention = &Attention{}
	}
	e.Context.Attention.OverdueAcks = overdue
}

// StateShown is the state section req shows of the reader's state (scope
// → its entries; self's own scope is there under its id and under
// "self", and shown as self only): the scopes req names, its key range
// applied. A scope the read left as the snapshot holds it (in stored,
// not in modified) is shown as its stored JSON, which is far cheaper to
// encode than decoded values, and when req takes it whole e shares the
// snapshot's encoding of it (Share, with enc).
func (e *Envelope[A]) StateShown(req ContextRequest, self string, state map[string]any, stored map[string]map[string]json.RawMessage, modified map[string]bool, enc ScopeEncoder) map[string]any {
	st := map[string]any{}
	ranged := req.KeysAfter != "" || req.Prefix != ""
	for scope, v := range state {
		if self != "" && scope == self {
			continue // shown as self
		}
		if len(req.Only) > 0 && !slices.Contains(req.Only, "state") && !slices.Contains(req.Only, "state."+scope) {
			continue
		}
		name := scope
		if scope == defs.ScopeSelf {
			name = self
		}
		if r, ok := stored[name]; ok && !modified[name] {
			st[scope] = r
			if !ranged {
				e.Share(scope, name, r, enc)
			}
		} else {
			st[scope] = v
		}
		if ranged {
			st[scope] = req.KeyRange(st[scope])
		}
	}
	return st
}
