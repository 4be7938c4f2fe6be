// Package envelope is the context read's envelope: its shape, the
// request that shapes it, the versions it shows, its encoding, and the
// fitting of it to a size budget; its filling, section by section, from
// a Reading (fill.go); and the rules of the reader's state it is filled
// from: the entries the read rule hides one by one, those the gates
// admit, and the gates' evaluation (readerstate.go, gates.go). The core
// hands it a reader's read already narrowed by the read rule, the
// snapshot's rows as plain values and the statements that read the rest;
// this package never sees a room, a transaction or a cache, so what it
// decides is a function of what the core put in.
//
// Sections a request left out are absent (omitzero keeps a present but
// empty one).
package envelope

// Envelope is what a context read returns (ARCHITECTURE §7). A is how
// the core shows an action (its ActionView): the envelope knows actions
// only through the functions a fit is given (Fitting.Actions), not their
// definitions.
type Envelope[A any] struct {
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
	Agents  map[string]any `json:"agents,omitzero"`
	Actions map[string]A   `json:"actions,omitzero"`
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

// OverdueAck is an acknowledgement asked of the reader and not given
// within the core's Options.AckOverdue.
type OverdueAck struct {
	Seq  int64  `json:"seq"`
	From string `json:"from"`
	// AgoS is how long ago it was asked, in seconds.
	AgoS int64  `json:"ago_s"`
	Ack  string `json:"_ack"`
}

// Receipts is who has read and who has acknowledged a message that asked
// for acknowledgement.
type Receipts struct {
	To      []string `json:"to"`
	ReadBy  []string `json:"read_by"`
	AckedBy []string `json:"acked_by"`
	Pending []string `json:"pending"`
}

// Attention is _context._attention: what the substrate thinks deserves
// the reader's attention, from metadata only.
type Attention struct {
	// BrokenViews are the views whose value is an error.
	BrokenViews []string `json:"broken_views,omitempty"`
	// YourBrokenViews are the reader's own broken views with their
	// errors, shown whatever the request left out: its model of the room
	// is wrong, which is always worth knowing.
	YourBrokenViews map[string]any `json:"your_broken_views,omitempty"`
	// StaleActions are actions registered a while ago and never invoked
	// since.
	StaleActions []string `json:"stale_actions,omitempty"`
	// SinceYourLastRead is what changed since the reader's previous
	// context read (absent on its first).
	SinceYourLastRead *SinceLastRead `json:"since_your_last_read,omitempty"`
	// YouElided are sections this read left out (by request or budget)
	// that changed since the reader's last read.
	YouElided []string `json:"you_elided,omitempty"`
	// Contested are claims two or more agents made on the same thing in a
	// short while (help key vocabulary_review says how they are found).
	Contested []Contest `json:"contested,omitempty"`
	// Blocked are the work items whose fields say they are blocked or
	// waiting on something (at most a few; BlockedMore counts the rest).
	Blocked     []Blocked `json:"blocked,omitempty"`
	BlockedMore int       `json:"blocked_more,omitempty"`
	// LowSalience are actions nobody has invoked for a long while (they
	// still work); Omitted counts those a lean read left out.
	LowSalience []string `json:"low_salience,omitempty"`
	Omitted     *Omitted `json:"low_salience_omitted,omitempty"`
	// VocabularyHealth is the room's assessment: progressive, stable or
	// degenerating (details in the _vocabulary_health view).
	VocabularyHealth string `json:"vocabulary_health,omitempty"`
	// Finding is the health's strongest finding, in one line, so that a
	// read whose budget cut the _vocabulary_health view still carries it.
	Finding string `json:"finding,omitempty"`
	// OverdueAcks are acknowledgements asked of the reader and not given
	// within Options.AckOverdue (the core's, with or without salience).
	OverdueAcks []OverdueAck `json:"overdue_acks,omitempty"`
}

// Contest is a claim several agents made on one target: the same action
// invoked with the same arguments by each (Params), or the same entry
// written directly by each (Entry).
type Contest struct {
	Action string         `json:"action,omitempty"`
	Params map[string]any `json:"params,omitempty"`
	Entry  string         `json:"entry,omitempty"`
	Agents []string       `json:"agents"`
	// Seq is the latest of the competing claims.
	Seq int64 `json:"seq"`
}

// Blocked is a work item whose status says it is blocked or waiting, or
// that names what it waits on: Entry is scope.key, and [id] (or [index])
// for an item of a list.
type Blocked struct {
	Entry     string `json:"entry"`
	Status    string `json:"status,omitempty"`
	WaitingOn any    `json:"waiting_on,omitempty"`
}

// Omitted counts what a lean read left out for low salience, and the read
// that shows it.
type Omitted struct {
	Actions int    `json:"actions"`
	Expand  string `json:"expand"`
}

// SinceLastRead is the room's change since the reader's last context read.
type SinceLastRead struct {
	FromSeq        int64    `json:"from_seq"`
	StateChanges   int      `json:"state_changes"`
	NewActions     []string `json:"new_actions"`
	ActionsInvoked []string `json:"actions_invoked"`
	ViewsChanged   []string `json:"views_changed"`
	NewMessages    int64    `json:"new_messages"`
}

// ChangesSince says which changes a delta context holds.
type ChangesSince struct {
	FromSeq int64 `json:"from_seq"`
	// Changed maps each changed state entry (scope.key) to the seq of its
	// change. Deletions are not listed (the room keeps no tombstones);
	// a full read shows what is there.
	Changed map[string]int64 `json:"changed"`
	// OlderMessages counts messages since that the delta left out (it
	// shows the newest), and More is the read that returns them.
	OlderMessages int    `json:"older_messages,omitempty"`
	More          string `json:"more,omitempty"`
	// Full is the read of the whole context.
	Full string `json:"full"`
}
