package substrate

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
)

// The envelope (a context read's result) is shaped, encoded and fitted
// to its budget in substrate/envelope, from what the core puts in it; the
// core's names for it are these. Here is what only the core knows: which
// keys a reader's room makes salient, which versions a read shows, and
// the results of wait, eval and help.

type (
	Envelope       = envelope.Envelope[ActionView]
	RoomAbout      = envelope.RoomAbout
	Messages       = envelope.Messages
	MessagesElided = envelope.MessagesElided
	ContextMeta    = envelope.ContextMeta
	RequestEcho    = envelope.RequestEcho
	ContextRequest = envelope.ContextRequest
	ContextParams  = envelope.ContextParams
	Budget         = envelope.Budget
	Cut            = envelope.Cut
	EntryVersions  = envelope.EntryVersions
	ThreadSummary  = envelope.ThreadSummary
	OverdueAck     = envelope.OverdueAck
	Receipts       = envelope.Receipts
	Attention      = envelope.Attention
	Contest        = envelope.Contest
	Blocked        = envelope.Blocked
	Omitted        = envelope.Omitted
	SinceLastRead  = envelope.SinceLastRead
	ChangesSince   = envelope.ChangesSince
	ActionView     = envelope.ActionView
)

// The definitions of actions and views are package defs's, beneath the
// core (it needs no room to say what a valid one is); the names stay the
// core's API.
type (
	ActionDef     = defs.ActionDef
	OnInvoke      = defs.OnInvoke
	ParamSpec     = defs.ParamSpec
	WriteTemplate = defs.WriteTemplate
	ViewDef       = defs.ViewDef
	Timer         = defs.Timer
)

// DefaultBudget is the budget a hint's read gets when it names none: the
// MCP adapter's default (mcp.DefaultMaxBytes). A value larger than this
// can only be read by asking for more, which a hint then says.
const DefaultBudget = envelope.DefaultBudget

// ParseContextRequest reads the context parameters from a query string.
func ParseContextRequest(get func(string) string) (ContextRequest, error) {
	return envelope.ParseContextRequest(get)
}

// fitBudget shrinks env to at most req.MaxBytes bytes of JSON
// (envelope.Fit), its messages marked read only up to those it still
// shows.
func fitBudget(env *Envelope, rc *roomCtx, roomID string, req ContextRequest) {
	envelope.Fit(env, envelope.Fitting[ActionView]{Req: req, Self: rc.self, Room: roomID, Say: rc.p.Say,
		Rank:    func(scope string, keys map[string]json.RawMessage) []string { return rankKeys(rc, scope, keys) },
		Actions: envelope.Actions, ReadUpTo: &rc.readUpTo})
}

// expand words the context read with args for the reader.
func expand(rc *roomCtx, roomID string, args map[string]any) string {
	return rc.p.Say(errs.Step{Op: errs.OpReadContext, Room: roomID, Args: args})
}

// rankKeys orders a scope's keys by salience for the reader
// (envelope.RankKeys): the entries it wrote, those the room's rules read
// or several actions write (watchedKeys), open work, the most recently
// changed.
func rankKeys(rc *roomCtx, scope string, keys map[string]json.RawMessage) []string {
	name := scope
	if scope == ScopeSelf {
		name = rc.self
	}
	rows := rc.snap.scopes[name]
	mine := func(k string) bool { r := rows[k]; return r != nil && rc.self != "" && r.Writer == rc.self }
	rev := func(k string) int64 {
		if r := rows[k]; r != nil {
			return r.Revision
		}
		return 0
	}
	return envelope.RankKeys(keys, mine, watchedKeys(rc, scope), rev)
}

// watchedKeys are the keys of scope that the room's action guards and views
// read, or that several actions write.
func watchedKeys(rc *roomCtx, scope string) map[string]bool {
	out := map[string]bool{}
	add := func(src string) {
		for _, m := range defs.FactsOf(src).Paths {
			if m[0] == scope {
				out[m[1]] = true
			}
		}
	}
	for _, a := range rc.snap.actions {
		add(a.def.If)
		add(a.def.Enabled)
	}
	for _, v := range rc.snap.views {
		add(v.def.Expr)
	}
	if c, ok := rc.views[viewContested].(map[string]any); ok {
		for target := range c {
			if sc, key, ok := strings.Cut(target, "."); ok && sc == scope {
				out[key] = true
			}
		}
	}
	return out
}

// versionsRead is the read that shows the versions of scope's entries,
// as a step's arguments: what the if_version help and a version
// conflict's hint name.
func versionsRead(scope string) map[string]any {
	return map[string]any{"only": "state." + scope}
}

// setVersions records the versions of the scopes req names one by one
// (only: "state.<scope>") that env's state shows (envelope.EntryVersions).
func setVersions(env *Envelope, rc *roomCtx, req ContextRequest) {
	var all map[string]map[string]int64
	for scope := range env.State {
		if !slices.Contains(req.Only, "state."+scope) {
			continue
		}
		name := scope
		if scope == ScopeSelf {
			name = rc.self
		}
		rows := rc.snap.scopes[name]
		if len(rows) == 0 {
			continue
		}
		vs := make(map[string]int64, len(rows))
		for k, r := range rows {
			vs[k] = r.Version
		}
		if all == nil {
			all = map[string]map[string]int64{}
		}
		all[scope] = vs
	}
	env.ShowVersions(all)
}

// ScopeJSON returns raw[name] encoded, encoding it on first use: the
// envelope's encoding of a scope it shows as the snapshot holds it
// (envelope.ScopeEncoder).
func (l *liveState) ScopeJSON(name string) ([]byte, error) {
	return l.enc.Get(name, func() any { return l.raw[name] })
}

// WaitResult is what a wait returns: the context once the condition held,
// or Timeout with the context as it was (and why the condition could not
// be evaluated, when it could not).
type WaitResult struct {
	Triggered      bool           `json:"triggered"`
	Timeout        bool           `json:"timeout,omitempty"`
	Condition      string         `json:"condition"`
	ElapsedMS      int64          `json:"elapsed_ms"`
	ConditionError map[string]any `json:"condition_error,omitempty"`
	// Unmet explains, on a timeout, which clause of the condition did not
	// hold at the last evaluation and what it read.
	Unmet *expr.Explanation `json:"unmet,omitempty"`
	// Seq is the room seq the result describes.
	Seq int64 `json:"seq"`
	// Note says when the wait did not do exactly what was asked (a
	// timeout past the cap was shortened).
	Note string `json:"note,omitempty"`
	// Context is the envelope, absent with context=none.
	Context *Envelope `json:"context,omitempty"`
}

// EvalResult is an expression's value, read at Seq.
//
// Fields are in reading order (a model reads the JSON): the value and why
// it is false first, the echo of the expression last.
type EvalResult struct {
	Value any `json:"value"`
	// Unmet explains a false condition: its first false clause and what
	// that clause read.
	Unmet      *expr.Explanation `json:"unmet,omitempty"`
	Seq        int64             `json:"seq"`
	Expression string            `json:"expression"`
}

// HelpResult is one help key, or (Key empty) the list of keys.
type HelpResult struct {
	Keys    []string `json:"keys,omitempty"`
	Usage   string   `json:"usage,omitempty"`
	Key     string   `json:"key,omitempty"`
	Content any      `json:"content,omitempty"`
	// Source is "room" for a room's override, "system" otherwise.
	Source  string `json:"source,omitempty"`
	Version *int64 `json:"version,omitempty"`
}
