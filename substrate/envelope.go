package substrate

import "github.com/syncsubstrate/sync/substrate/expr"

// Typed results of the context read, wait, eval and help. Sections a
// request left out are absent (omitzero keeps a present but empty one).

// Envelope is what a context read returns (ARCHITECTURE §7).
type Envelope struct {
	// About is what the room is for (its meta's description), first: it
	// frames everything after it. Absent for a room without one.
	About *RoomAbout `json:"about,omitempty"`
	// Self is the reader's agent id ("" for tokens and observers).
	Self string `json:"self"`
	// Context comes before the sections: what deserves attention, what
	// changed and what the budget left out frame what follows.
	Context ContextMeta `json:"_context"`
	// State maps each visible scope to its entries (key → value; the
	// stored JSON is passed through as json.RawMessage).
	State map[string]any `json:"state,omitzero"`
	// Versions are, on a read of single scopes (only: "state.<scope>"),
	// the versions of the entries it shows, scope → key → version: what
	// a write's if_version names. Absent from every other read.
	Versions *EntryVersions `json:"versions,omitzero"`
	// Views maps view ids to values ({"_error": …} for a failing one).
	Views map[string]any `json:"views,omitzero"`
	// Agents maps agent ids to their presence.
	Agents  map[string]any        `json:"agents,omitzero"`
	Actions map[string]ActionView `json:"actions,omitzero"`
	// Builtins lists the builtin actions in one line at the lean depth
	// (in full, they are in Actions).
	Builtins string    `json:"builtins,omitempty"`
	Messages *Messages `json:"messages,omitempty"`
	// Params are the invocation's params, as CEL sees them (seed 001's
	// context example): {} for a context read or wait, which invoke
	// nothing; an action's expressions read them as params.<name>.
	Params map[string]any `json:"params,omitzero"`

	// shared are the scopes of State shown as the snapshot holds them,
	// whose encoding is shared between reads (EncodeJSON).
	shared map[string]sharedScope
	// summarized are the scopes of State a budget cut: their _summary is
	// the cut's, not an entry (an entry of that name is not shown, and
	// neither is its version).
	summarized map[string]bool
}

// RoomAbout is a room's label and description, as its meta holds them.
type RoomAbout struct {
	Label       string `json:"label,omitempty"`
	Description string `json:"description"`
}

// ActionView is an action (or builtin) as the reader sees it; the
// definition's fields are shown beyond the lean depth.
type ActionView struct {
	// Signature is the call in brief: move(cell*: integer 0…8).
	Signature       string               `json:"signature,omitempty"`
	Available       bool                 `json:"available"`
	Builtin         bool                 `json:"builtin,omitempty"`
	Description     string               `json:"description"`
	Cooldown        map[string]any       `json:"cooldown,omitempty"`
	Params          map[string]ParamSpec `json:"params,omitempty"`
	Writes          []WriteTemplate      `json:"writes,omitempty"`
	If              string               `json:"if,omitempty"`
	Enabled         *bool                `json:"enabled,omitempty"`
	Scope           string               `json:"scope,omitempty"`
	RegisteredBy    string               `json:"registered_by,omitempty"`
	Intent          string               `json:"intent,omitempty"`
	Result          string               `json:"result,omitempty"`
	InvocationCount *int                 `json:"invocation_count,omitempty"`
	// Stale (at depth usage) marks an action registered a while ago and
	// never invoked since; LowSalience one nobody has used for long. Both
	// still work.
	Stale       bool `json:"_stale,omitempty"`
	LowSalience bool `json:"_low_salience,omitempty"`
}

// Messages is the messages section: counters and the recent messages.
type Messages struct {
	Count          int64            `json:"count"`
	Unread         int64            `json:"unread"`
	DirectedUnread int64            `json:"directed_unread"`
	Recent         []map[string]any `json:"recent"`
	// Threads are the room's most recently active threads (unread first);
	// Thread is set when the read asked for one thread whole.
	Threads []ThreadSummary `json:"threads,omitempty"`
	Thread  *int64          `json:"thread,omitempty"`
	Elided  *MessagesElided `json:"_elided,omitempty"`
}

// MessagesElided says how many messages the section left out and how to
// read them.
type MessagesElided struct {
	Total     int64  `json:"total"`
	Returned  int    `json:"returned"`
	OldestSeq int64  `json:"oldest_seq"`
	Expand    string `json:"_expand"`
}

// ContextMeta describes the read: what deserves attention, what changed,
// what it left out and how to expand it, help keys worth reading, the
// request and the room seq. Fields are in reading order (Claude Code's
// model reads the JSON): what the reader acts on first, the echo of the
// request last.
type ContextMeta struct {
	// Attention is adaptive salience's opinion on what deserves the
	// reader's attention; Note says when the substrate changed the
	// request (an agent's first read is at depth full).
	Attention *Attention `json:"_attention,omitempty"`
	Note      string     `json:"note,omitempty"`
	// Delta marks a context of changes only: what changed after FromSeq.
	Delta *ChangesSince `json:"delta,omitempty"`
	// Budget says how the envelope was fitted to max_bytes, and what it
	// left out.
	Budget            *Budget         `json:"budget,omitempty"`
	Elided            []string        `json:"elided,omitempty"`
	Expand            []string        `json:"_expand,omitempty"`
	MessagesTruncated *MessagesElided `json:"messages_truncated,omitempty"`
	Help              []string        `json:"help,omitempty"`
	// EntriesUnevaluated counts the state entries hidden from this read
	// because the room's entry-level enabled expressions cost more than
	// the server evaluates per read (Limits.EnabledCostPerRead): their
	// gates were not evaluated, so they are not shown.
	EntriesUnevaluated int         `json:"entries_unevaluated,omitempty"`
	Depth              string      `json:"depth"`
	Sections           []string    `json:"sections"`
	Request            RequestEcho `json:"request"`
	Seq                int64       `json:"seq"`
}

// RequestEcho repeats the shaping parameters a request set (defaults are
// left out).
type RequestEcho struct {
	Depth         string `json:"depth,omitempty"`
	Only          string `json:"only,omitempty"`
	Actions       *bool  `json:"actions,omitempty"`
	Messages      *bool  `json:"messages,omitempty"`
	MessagesAfter *int64 `json:"messages_after,omitempty"`
	MessagesLimit int    `json:"messages_limit,omitempty"`
	MaxBytes      int    `json:"max_bytes,omitempty"`
	Include       string `json:"include,omitempty"`
	KeysAfter     string `json:"keys_after,omitempty"`
	Prefix        string `json:"prefix,omitempty"`
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
