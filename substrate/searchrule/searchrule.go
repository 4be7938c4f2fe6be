// Package searchrule is full-text search's own rules (issue 31, issue 41,
// issue 45 item 1): what a search of a room's rows asks and returns, which
// private scopes its statement narrows a reader to, what it costs the
// room's expression budget and how many one credential runs at once, the
// refusals, and which search languages there are. It needs no room and no
// SQL: the core (substrate/search.go) runs the statements and applies the
// one read rule to what they find; the feature substrate/search shapes
// the request and the result around them.
package searchrule

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Query is one search of a room's rows, as its caller checked it
// (substrate/search bounds the query's words, the limit and the offset).
type Query struct {
	// Query is the text to find, in web-search syntax
	// (websearch_to_tsquery).
	Query string
	// Scope keeps rows of one scope (self: the reader's own); "views"
	// reads no rows, only the views.
	Scope string
	// From keeps messages from one sender and entries last written by
	// one writer; Kind messages of one kind; Thread the messages of one
	// thread (its first message's seq).
	From, Kind string
	Thread     int64
	// After and Before bound the time of the message or of the entry's
	// last write.
	After, Before *time.Time
	// Limit rows after the first Offset the reader sees.
	Limit, Offset int
	// Views asks for the views the reader's context evaluated too, when
	// the scope is every one or views.
	Views bool
	// Caller is whose searches this one counts among (AtOnce) beside the
	// credential: the lobby's user id. Principals without a token of
	// their own (the lobby's observers, an owner's room authority on the
	// pages) are alike for every person, so without it one person's two
	// searches refused everyone else's. "" for a token's caller, whom its
	// token tells apart.
	Caller string
}

// Row is one row a search matched that its reader may see.
type Row struct {
	// Kind is message, entry or log (a log entry of another scope).
	Kind       string
	Scope, Key string
	// Seq is a message's or log entry's seq; Version an entry's.
	Seq, Version int64
	From         string
	// MsgKind and Thread are a message's kind and thread.
	MsgKind string
	Thread  int64
	// Snippet is the text around the match, matched words in «», as the
	// statement cut it (not yet bounded in runes).
	Snippet string
	Rank    float64
	At      time.Time
}

// Read is what a search read of a room: the rows, best first, and the
// views the reader's context evaluated, as JSON (when asked for).
type Read struct {
	// Seq is the room seq the search read at.
	Seq int64
	// Scope is the query's scope, self resolved to the reader's.
	Scope string
	Rows  []Row
	Views map[string]json.RawMessage
}

// Views is the scope a search of views alone names: it reads no rows.
const Views = "views"

// ValidScope refuses a scope a search may not name before any room is
// read: "" (every one), self, views, or a valid scope name.
func ValidScope(scope string) error {
	if scope == "" || scope == authority.ScopeSelf || scope == Views {
		return nil
	}
	if err := authority.ValidName("scope", scope, 128, true); err != nil {
		return err.(*errs.Error).With("field", "scope")
	}
	return nil
}

// Narrowing is the scope rule a search statement applies itself: a
// restricted reader (an agent, not room or view authority, reading as
// itself) finds rows of communal scopes and of mine, its own scope and
// its grants, alone. The statement narrows; the reader's context decides
// the rest.
func Narrowing(p *authority.Principal) (restricted bool, mine []string) {
	restricted = p != nil && !(p.Kind == authority.KindRoom || p.Kind == authority.KindView || p.ReadsAll || p.Admin())
	mine = []string{}
	if restricted {
		if p.AgentID != "" {
			mine = append(mine, p.AgentID)
		}
		mine = append(mine, p.Grants...)
	}
	return restricted, mine
}

// Classify sets what kind of row h is from the statement's columns: an
// entry without a sort key, else a log entry, which in _messages is a
// message (its kind and thread, and no key or version).
func Classify(h *Row, sortKey *int64, kind, thread *string) {
	h.Kind = "entry"
	if sortKey == nil {
		return
	}
	h.Kind, h.Seq = "log", *sortKey
	if h.Scope != authority.ScopeMessages {
		return
	}
	h.Kind, h.Key, h.Version = "message", "", 0
	if kind != nil {
		h.MsgKind = *kind
	}
	if thread != nil {
		h.Thread, _ = strconv.ParseInt(*thread, 10, 64)
	}
}

// LogKey is the key a read rule decides a log row under: a message's seq.
func LogKey(h *Row) string {
	if h.Kind == "message" {
		return strconv.FormatInt(h.Seq, 10)
	}
	return h.Key
}

// MaxGates bounds the (log scope, gate) pairs one search decides (the
// gates statement's limit less one): the entries of pairs past it are
// left out (fail closed), as a read leaves out the gates its budget could
// not afford.
const MaxGates = 1024

// NotIndexed are the scopes migration 0015 does not index: the rule need
// not say anything of them.
var NotIndexed = map[string]bool{"_audit": true, "_actions": true, "_views": true, "_agents": true, "_cooldowns": true, "_acks": true, "_threads": true}
