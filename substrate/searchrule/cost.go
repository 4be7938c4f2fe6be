package searchrule

import (
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// A search costs the database more than any evaluation it makes: each
// statement's time is charged to the room's expression budget (Cost), one
// statement runs at most StatementTime, and one credential runs at most
// AtOnce (issue 41 item 3).

// CostPerMS is what a millisecond of a search statement's database time
// costs the room's expression budget (work). A search's work is mostly
// PostgreSQL's (the index, ranking, snippets), which no evaluation
// counts; billed so, a flood of searches spends its room's budget, not
// the whole server's database. A quarter of the budget's CPU scale
// (2,000,000 a second is some 100 ms of CPU): the time is wall time,
// which a loaded machine inflates, and at the full scale one observer's
// few ordinary searches in a second already spent the observers' share;
// at this rate a room affords some 400 ms of search statements a second,
// and the two-at-once cap per credential keeps one flood from taking it.
const CostPerMS = 5_000

// Cost is what a statement that took d costs the room's budget.
func Cost(d time.Duration) uint64 { return uint64(d.Microseconds() * CostPerMS / 1000) }

// StatementTime bounds one search statement: past it the search is
// cancelled and the caller told to narrow it (TooLong). It also bounds the
// debt one search can leave its room's budget (some 30 s of it at the
// default).
const StatementTime = 3 * time.Second

// TooLong is the refusal of a search stopped after limit.
func TooLong(limit time.Duration) *errs.Error {
	return errs.New(errs.InvalidField, "the search took longer than %s and was stopped", limit).With("field", "q").
		WithHint("narrow it: rarer words, a scope, from, or a time range (after, before)")
}

// AtOnce is the most searches one credential runs at once; past it a
// search is refused with room_busy (Busy). Sixteen at once from one agent
// token held the pool and slowed every other room (issue 41 item 3).
const AtOnce = 2

// SlotKey is whose searches of roomID one by p counts among (AtOnce): a
// credential is a token (its hash), else the principal's kind and agent;
// the lobby's principals carry no token, so the caller it names
// (Query.Caller) tells its people apart.
func SlotKey(p *authority.Principal, roomID, caller string) string {
	if p == nil {
		return roomID + "\x00system\x00" + caller
	}
	return roomID + "\x00" + string(p.Kind) + "\x00" + p.AgentID + "\x00" + p.ReadsAs() + "\x00" + string(p.TokenHash()) + "\x00" + caller
}

// Busy is the refusal of a search past AtOnce of one credential's.
func Busy(roomID string) *errs.Error {
	return errs.New(errs.RoomBusy, "%d searches of yours are running in room %q, the most one credential runs at once", AtOnce, roomID).
		With("retry_after_ms", int64(1000)).With("limit", AtOnce).
		WithHint("retry after 1 s, once one of them has answered; search one query at a time")
}

// TokenTypes are the parser's word tokens a language stems (the others,
// numbers, URLs and e-mail addresses, are indexed as they are).
const TokenTypes = `asciiword, asciihword, hword_asciipart, word, hword, hword_part`

// Dictionary is the PostgreSQL dictionary a search language names
// (trimmed, any case): "simple" (no stemming, no stop words) or
// <language>_stem; "" for no language (nothing to configure).
func Dictionary(language string) string {
	language = strings.ToLower(strings.TrimSpace(language))
	switch language {
	case "", "simple":
		return language
	}
	return language + "_stem"
}

// NoLanguage is the refusal of a language PostgreSQL has no dictionary for.
func NoLanguage(language string) *errs.Error {
	return errs.New(errs.InvalidField, "search language %q is not one PostgreSQL has", strings.ToLower(strings.TrimSpace(language))).
		WithHint("use simple or a language with a stemmer: SELECT dictname FROM pg_ts_dict WHERE dictname LIKE '%%_stem'")
}

// Ident quotes an identifier for a statement that takes no parameters
// (DDL).
func Ident(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
