package search

import (
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Request is one search.
type Request struct {
	// Query is the text to find, in web-search syntax: words (all must
	// match, stemmed in the search language), "a phrase", or, -word.
	Query string
	// Scope keeps hits of one scope (_messages for messages only, self
	// for the reader's own); "views" keeps views only.
	Scope string
	// From keeps messages from one sender and entries last written by
	// one writer.
	From string
	// Kind keeps messages of one kind (chat, proposal…).
	Kind string
	// Thread keeps the messages of one thread (its first message's seq).
	Thread int64
	// After and Before bound the time of the message or of the entry's
	// last write.
	After, Before *time.Time
	// Limit is the most hits returned: default 10, at most 50.
	Limit int
	// Offset skips that many hits (of those the reader sees, at most
	// 1000): the next page's offset comes back in Result.Next.
	Offset int
	// MaxBytes bounds the result's JSON (0: the default, 16 KiB).
	MaxBytes int
	// Caller is whose searches this one counts among beside the
	// credential (substrate.SearchQuery.Caller): the lobby's user id, ""
	// for a token's caller. Not read from requests.
	Caller string
}

// Search limits.
const (
	defaultLimit = 10
	maxLimit     = 50
	maxQuery     = 500
	// maxTerms bounds a query's words (those of its phrases included):
	// each is a posting list the index reads.
	maxTerms = 16
	// maxOffset bounds paging: the offset counts hits the reader sees,
	// so a page reads every candidate before it.
	maxOffset    = 1000
	snippetRunes = 240
	defaultBytes = 16 << 10
	maxBytes     = 1 << 20
)

// check validates a request and fills its defaults. The scope's name is
// the core's to check (SearchRows), as it checks every name it reads.
func (req *Request) check(p *substrate.Principal, roomID string) error {
	if err := req.checkQuery(p, roomID); err != nil {
		return err
	}
	switch {
	case req.Limit < 0 || req.Limit > maxLimit:
		return errs.New(errs.InvalidField, "limit %d is not between 1 and %d", req.Limit, maxLimit).With("field", "limit").WithHint("use 1–%d (default %d)", maxLimit, defaultLimit)
	case req.Offset < 0 || req.Offset > maxOffset:
		return errs.New(errs.InvalidField, "offset %d is not between 0 and %d", req.Offset, maxOffset).With("field", "offset").WithHint("pass the next offset a search returned; narrow the query (scope, from, a time range) to reach further")
	case req.Thread < 0:
		return errs.New(errs.InvalidField, "thread %d is not a message seq", req.Thread).With("field", "thread").WithHint("pass the seq of the thread's first message")
	case req.MaxBytes != 0 && (req.MaxBytes < 1024 || req.MaxBytes > maxBytes):
		return errs.New(errs.InvalidField, "max_bytes %d is not between 1024 and %d", req.MaxBytes, maxBytes).With("field", "max_bytes").WithHint("leave it out for the default (16 KiB)")
	case req.After != nil && req.Before != nil && !req.After.Before(*req.Before):
		return errs.New(errs.InvalidField, "after is not before before").With("field", "after").WithHint("give a time range that is not empty")
	}
	if req.Limit == 0 {
		req.Limit = defaultLimit
	}
	return nil
}

// checkQuery trims the request's query and validates it.
func (req *Request) checkQuery(p *substrate.Principal, roomID string) error {
	req.Query = strings.TrimSpace(req.Query)
	example := p.Say(errs.Step{Op: errs.OpSearch, Room: roomID, Args: map[string]any{"q": "deadline"}})
	switch {
	case req.Query == "":
		return errs.New(errs.InvalidField, "search needs a query").With("field", "q").WithHint("search for words, e.g. %s", example)
	case len(req.Query) > maxQuery:
		return errs.New(errs.InvalidField, "the query is %d bytes, over the limit of %d", len(req.Query), maxQuery).With("field", "q").WithHint("search for fewer words")
	case terms(req.Query) > maxTerms:
		return errs.New(errs.InvalidField, "the query has %d words, over the limit of %d", terms(req.Query), maxTerms).With("field", "q").With("limit", maxTerms).
			WithHint("search for at most %d words: the rarest ones find the most", maxTerms)
	case !utf8.ValidString(req.Query) || strings.ContainsRune(req.Query, 0):
		return errs.New(errs.InvalidField, "the query is not valid text").With("field", "q").WithHint("send UTF-8 text without NUL characters")
	}
	return nil
}

// terms counts a query's words, those of its phrases included, and not
// its operators (or, a lone -).
func terms(q string) int {
	n := 0
	for _, w := range strings.FieldsFunc(q, func(r rune) bool { return unicode.IsSpace(r) || r == '"' }) {
		if w = strings.TrimLeft(w, "-"); w != "" && !strings.EqualFold(w, "or") {
			n++
		}
	}
	return n
}

// args are the request as a step's arguments (for the next page).
func (req Request) args() map[string]any {
	a := map[string]any{"q": req.Query}
	if req.Scope != "" {
		a["scope"] = req.Scope
	}
	if req.From != "" {
		a["from"] = req.From
	}
	if req.Kind != "" {
		a["kind"] = req.Kind
	}
	if req.Thread != 0 {
		a["thread"] = req.Thread
	}
	if req.After != nil {
		a["after"] = req.After.Format(time.RFC3339Nano)
	}
	if req.Before != nil {
		a["before"] = req.Before.Format(time.RFC3339Nano)
	}
	if req.Limit != defaultLimit {
		a["limit"] = req.Limit
	}
	return a
}

// ParseRequest reads a search from a query string (REST, pages).
func ParseRequest(get func(string) string) (Request, error) {
	req := Request{Query: get("q"), Scope: get("scope"), From: get("from"), Kind: get("kind")}
	num := func(name string, into *int) error {
		if v := get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return errs.New(errs.InvalidField, "%s %q is not a number", name, v).With("field", name).WithHint("pass a whole number")
			}
			*into = n
		}
		return nil
	}
	if err := num("limit", &req.Limit); err != nil {
		return req, err
	}
	if err := num("offset", &req.Offset); err != nil {
		return req, err
	}
	if err := num("max_bytes", &req.MaxBytes); err != nil {
		return req, err
	}
	var thread int
	if err := num("thread", &thread); err != nil {
		return req, err
	}
	req.Thread = int64(thread)
	for _, f := range []struct {
		name string
		into **time.Time
	}{{"after", &req.After}, {"before", &req.Before}} {
		if v := get(f.name); v != "" {
			t, err := ParseTime(v)
			if err != nil {
				return req, errs.New(errs.InvalidField, "%s %q is not a time", f.name, v).With("field", f.name).
					WithHint("use RFC 3339 (2026-11-26T09:00:00Z) or a date (2026-11-26)")
			}
			*f.into = &t
		}
	}
	return req, nil
}

// ParseTime reads a search's time bound: RFC 3339 or a date (UTC).
func ParseTime(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	return time.Parse("2006-01-02", v)
}
