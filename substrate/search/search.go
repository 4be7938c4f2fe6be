// Package search is full-text search over what a reader may read of a
// room (issue 31): messages, mutable entries (keys and values) and views.
//
// It is a feature built on rooms (ARCHITECTURE §2): the request and its
// checks, the views matched beside the rows, paging by the result's
// bytes and the snippets' length are here; the statements over room
// rows and the read rule they apply are the core's
// (substrate.Service.SearchRows), which returns only rows and views the
// reader may see. So a search can never tell a reader that a private
// entry exists, let alone what it says.
package search

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Hit is one match.
type Hit struct {
	// Room is set in a search of several rooms.
	Room string `json:"room,omitempty"`
	// Kind is message, entry, log (a log entry of another scope) or view.
	Kind  string `json:"kind"`
	Scope string `json:"scope,omitempty"`
	Key   string `json:"key,omitempty"`
	// Seq is a message's seq; Version an entry's.
	Seq     int64  `json:"seq,omitempty"`
	Version int64  `json:"version,omitempty"`
	From    string `json:"from,omitempty"`
	MsgKind string `json:"message_kind,omitempty"`
	Thread  int64  `json:"thread,omitempty"`
	// Snippet is the text around the match, matched words in «».
	Snippet string    `json:"snippet"`
	Rank    float64   `json:"rank"`
	At      time.Time `json:"at,omitzero"`
}

// Result is a page of hits, best first.
type Result struct {
	Room  string `json:"room"`
	Query string `json:"query"`
	Hits  []Hit  `json:"hits"`
	// Next is the offset of the next page (absent: no more).
	Next *int `json:"next,omitempty"`
	// More says how to read the next page, in the caller's words.
	More string `json:"more,omitempty"`
	// Seq is the room seq the search read at.
	Seq int64 `json:"seq"`
}

// Room finds what p may read of the room that matches req.
func Room(ctx context.Context, svc *substrate.Service, p *substrate.Principal, roomID string, req Request) (*Result, error) {
	if err := svc.RequireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	if err := req.check(p, roomID); err != nil {
		return nil, err
	}
	// One row past the page: a hit the reader sees lies past it.
	read, err := svc.SearchRows(ctx, p, roomID, substrate.SearchQuery{
		Query: req.Query, Scope: req.Scope, From: req.From, Kind: req.Kind, Thread: req.Thread,
		After: req.After, Before: req.Before, Limit: req.Limit + 1, Offset: req.Offset,
		Views: wantsViews(req), Caller: req.Caller,
	})
	if err != nil {
		return nil, err
	}
	res := &Result{Room: roomID, Query: req.Query, Hits: []Hit{}, Seq: read.Seq}
	hits := make([]Hit, 0, len(read.Rows))
	for _, r := range read.Rows {
		hits = append(hits, hitOf(r))
	}
	// more is set only when a hit the reader sees lies past the page: a
	// "more" over candidates it cannot see would tell it they exist.
	more := false
	if len(hits) > req.Limit {
		hits, more = hits[:req.Limit], true
	}
	shown, full := res.page(req, hits, bestViews(read.Views, req.Query))
	if (more || full) && shown > 0 {
		next := req.Offset + shown
		res.Next = &next
		args := req.args()
		args["offset"] = next
		res.More = p.Say(errs.Step{Op: errs.OpSearch, Room: roomID, Args: args})
	}
	return res, nil
}

// hitOf is a row the core's search read, as a hit.
func hitOf(r substrate.SearchRow) Hit {
	return Hit{Kind: r.Kind, Scope: r.Scope, Key: r.Key, Seq: r.Seq, Version: r.Version, From: r.From,
		MsgKind: r.MsgKind, Thread: r.Thread, Snippet: clipSnippet(r.Snippet), Rank: r.Rank, At: r.At}
}

// wantsViews says whether views are matched beside the rows: on a first
// page the request does not narrow to entries or messages (the core
// leaves them out of a search of one scope).
func wantsViews(req Request) bool {
	return req.Offset == 0 && req.From == "" && req.Kind == "" && req.Thread == 0 && req.After == nil && req.Before == nil
}

// bestViews are the views the reader's context evaluated that match:
// there are few, they are matched in their shown JSON, and the best five
// are kept, with room in the budget made for them first.
func bestViews(views map[string]json.RawMessage, query string) []Hit {
	if views == nil {
		return nil
	}
	found := matchViews(views, query)
	sort.SliceStable(found, func(i, j int) bool { return found[i].Rank > found[j].Rank })
	return found[:min(len(found), 5)]
}

// page fills res with the views and as many hits as the request's bytes
// hold (the first always), ranked together; shown is the number of hits
// kept, full whether the bytes left some out (they start the next page).
func (res *Result) page(req Request, hits []Hit, views []Hit) (shown int, full bool) {
	budget := req.MaxBytes
	if budget == 0 {
		budget = defaultBytes
	}
	size := 300 + 2*len(req.Query)
	for _, v := range views {
		raw, _ := json.Marshal(v)
		size += len(raw) + 1
	}
	for i, h := range hits {
		raw, _ := json.Marshal(h)
		if size+len(raw)+1 > budget && i > 0 {
			full = true
			break
		}
		size += len(raw) + 1
		res.Hits = append(res.Hits, h)
		shown++
	}
	if len(views) > 0 {
		res.Hits = append(res.Hits, views...)
		sort.SliceStable(res.Hits, func(i, j int) bool { return res.Hits[i].Rank > res.Hits[j].Rank })
	}
	return shown, full
}

// matchViews matches the views the reader's context evaluated: every
// word of the query (lower-cased, operators dropped) in the view's id or
// its JSON.
func matchViews(views map[string]json.RawMessage, query string) []Hit {
	var words []string
	for _, w := range strings.Fields(strings.ToLower(query)) {
		w = strings.Trim(w, `"()`)
		if w == "" || w == "or" || strings.HasPrefix(w, "-") {
			continue
		}
		words = append(words, w)
	}
	if len(words) == 0 {
		return nil
	}

	ids := make([]string, 0, len(views))
	for id := range views {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []Hit
	for _, id := range ids {
		raw := views[id]
		text := strings.ToLower(id + ": " + string(raw))
		at, n := -1, 0
		for _, w := range words {
			i := strings.Index(text, w)
			if i < 0 {
				n = 0
				break
			}
			n += strings.Count(text, w)
			if at < 0 || i < at {
				at = i
			}
		}
		if n == 0 {
			continue
		}
		orig := id + ": " + string(raw)
		if len(orig) != len(text) {
			at = 0 // lower-casing changed lengths: show from the start
		}
		start := max(0, at-60)
		for start > 0 && !utf8.RuneStart(orig[start]) {
			start--
		}
		out = append(out, Hit{Kind: "view", Key: id, Snippet: clipSnippet(orig[start:]), Rank: 0.1 * float64(min(n, 10))})
	}
	return out
}

// clipSnippet bounds a snippet to snippetRunes.
func clipSnippet(s string) string {
	// Counted up to the cut, not over the whole text: a view's JSON may
	// be long, and a snippet costs what it shows.
	n := 0
	for i := range s {
		if n == snippetRunes {
			return s[:i] + "…"
		}
		n++
	}
	return s
}
