package substrate

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Search (issue 31 item 1): full-text search over what a reader may read
// of a room: messages, mutable entries (keys and values) and views.
//
// PostgreSQL finds and ranks the matches (state.search_tsv, a generated
// tsvector with a GIN index: migration 0015) among those the one read
// rule lets the reader see, decided as a context read would show them: a
// mutable entry matches only when the reader's context holds it (scope
// rule, features' read rules, entry gates, timers), a message only when
// the reader's log pages would show it (its gate evaluated as the
// reader), a view only when the reader's context evaluates it. The rule
// is applied before ranking and paging (issue 41 item 4: hidden matches
// ranked first had pushed the reader's own out of the rows read), and
// snippets are cut in the same statement, from the rows it admitted
// (item 2). So a search can never tell a reader that a private entry
// exists, let alone what it says.
//
// A search costs the database more than any evaluation it makes: each
// statement's time is charged to the room's expression budget (work),
// one credential runs at most searchesAtOnce, and a query has at most
// searchMaxTerms words (issue 41 item 3).

// SearchRequest is one search.
type SearchRequest struct {
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
	// 1000): the next page's offset comes back in SearchResult.Next.
	Offset int
	// MaxBytes bounds the result's JSON (0: the default, 16 KiB).
	MaxBytes int
	// Caller is whose searches this one counts among (searchesAtOnce)
	// beside the credential: the lobby's user id. Principals without a
	// token of their own (the lobby's observers, an owner's room
	// authority on the pages) are alike for every person, so without it
	// one person's two searches refused everyone else's. "" for a
	// token's caller, whom its token tells apart. Not read from requests.
	Caller string
}

// Search limits.
const (
	searchDefaultLimit = 10
	searchMaxLimit     = 50
	searchMaxQuery     = 500
	// searchMaxTerms bounds a query's words (those of its phrases
	// included): each is a posting list the index reads.
	searchMaxTerms = 16
	// searchesAtOnce is the most searches one credential runs at once;
	// past it a search is refused with room_busy. Sixteen at once from
	// one agent token held the pool and slowed every other room
	// (issue 41 item 3).
	searchesAtOnce = 2
	// searchMaxOffset bounds paging: the offset counts hits the reader
	// sees, so a page reads every candidate before it.
	searchMaxOffset    = 1000
	searchSnippetRunes = 240
	searchDefaultBytes = 16 << 10
	searchMaxBytes     = 1 << 20
)

// SearchHit is one match.
type SearchHit struct {
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

// SearchResult is a page of hits, best first.
type SearchResult struct {
	Room  string      `json:"room"`
	Query string      `json:"query"`
	Hits  []SearchHit `json:"hits"`
	// Next is the offset of the next page (absent: no more).
	Next *int `json:"next,omitempty"`
	// More says how to read the next page, in the caller's words.
	More string `json:"more,omitempty"`
	// Seq is the room seq the search read at.
	Seq int64 `json:"seq"`
}

// searchRule decides what the reader may see of the room for a search
// and returns the search statements' arguments ($1..$18) that say it: the
// reader's snapshot decides mutable entries (those it holds that the
// reader's context does not show are named), and the log entries' (scope,
// gate) pairs the query matches are decided one by one, as a log page
// decides them.
func (s *Service) searchRule(ctx context.Context, rc *roomCtx, p *Principal, roomID, scope string, req SearchRequest) ([]any, error) {
	restricted := p != nil && !(p.Kind == KindRoom || p.Kind == KindView || p.ReadsAll || p.Admin())
	mine := []string{}
	if restricted {
		if p.AgentID != "" {
			mine = append(mine, p.AgentID)
		}
		mine = append(mine, p.Grants...)
	}
	args := []any{roomID, req.Query, rc.snap.seq, scope, req.From, req.Kind, req.Thread, req.After, req.Before, mine, restricted}
	hiddenScopes, hiddenIn, hiddenKeys := s.searchHidden(ctx, rc, scope, restricted, mine)
	pairs, err := s.searchGatePairs(ctx, args)
	if err != nil {
		return nil, err
	}
	logScopes, logGates := []string{}, []*string{}
	prefixIn, prefixes := []string{}, []string{}
	seen := map[string]bool{}
	for _, pr := range pairs {
		if !rc.visible(pr.scope) {
			continue
		}
		if !seen[pr.scope] {
			seen[pr.scope] = true
			for _, pre := range rc.vis.HiddenPrefixes(pr.scope) {
				prefixIn, prefixes = append(prefixIn, pr.scope), append(prefixes, pre)
			}
		}
		if pr.gate != nil {
			if rc.logShown == nil {
				rc.logShown = s.logGate(ctx, rc)
			}
			if !rc.logShown(pr.gate) {
				continue
			}
		}
		logScopes, logGates = append(logScopes, pr.scope), append(logGates, pr.gate)
	}
	return append(args, hiddenIn, hiddenKeys, hiddenScopes, logScopes, logGates, prefixIn, prefixes), nil
}

// searchHidden names what the reader's snapshot holds of the mutable
// scopes the search statement reaches that its context does not show:
// whole scopes, and (scope, key) pairs as hiddenIn[i], hiddenKeys[i].
func (s *Service) searchHidden(ctx context.Context, rc *roomCtx, scope string, restricted bool, mine []string) (hiddenScopes, hiddenIn, hiddenKeys []string) {
	hiddenScopes, hiddenKeys, hiddenIn = []string{}, []string{}, []string{}
	for sc, rows := range rc.snap.scopes {
		if notIndexed[sc] || (scope != "" && sc != scope) || (restricted && !strings.HasPrefix(sc, "_") && !slices.Contains(mine, sc)) {
			continue // the statement's filters leave it out already
		}
		if !rc.visible(sc) {
			hiddenScopes = append(hiddenScopes, sc)
			continue
		}
		if isHidden(sc) {
			for k, r := range rows {
				if h := (SearchHit{Kind: "entry", Scope: sc, Key: k}); !s.searchSees(ctx, rc, &h, r.enabled) {
					hiddenIn, hiddenKeys = append(hiddenIn, sc), append(hiddenKeys, k)
				}
			}
			continue
		}
		// What the reader's context shows of the scope is drawn from the
		// snapshot's rows: when it shows as many, it shows them all (the
		// common case, decided without a look at each key).
		shown, _ := rc.shownEntries(sc)
		if len(shown) == len(rows) {
			continue
		}
		for k := range rows {
			if _, ok := shown[k]; !ok {
				hiddenIn, hiddenKeys = append(hiddenIn, sc), append(hiddenKeys, k)
			}
		}
	}
	return hiddenScopes, hiddenIn, hiddenKeys
}

// searchGatePair is a log scope and one gate of its entries a search
// matches.
type searchGatePair struct {
	scope string
	gate  *string
}

// searchGatePairs are the (log scope, gate) pairs the query matches, at
// most searchMaxGates.
func (s *Service) searchGatePairs(ctx context.Context, args []any) ([]searchGatePair, error) {
	var pairs []searchGatePair
	err := s.searchQuery(ctx, sqlSearchGates, args, func(rows pgx.Rows) error {
		var pr searchGatePair
		if err := rows.Scan(&pr.scope, &pr.gate); err != nil {
			return err
		}
		pairs = append(pairs, pr)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return pairs[:min(len(pairs), searchMaxGates)], nil
}

// Search finds what p may read of the room that matches req.
func (s *Service) Search(ctx context.Context, p *Principal, roomID string, req SearchRequest) (*SearchResult, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	if err := req.check(p, roomID); err != nil {
		return nil, err
	}
	release, err := s.searchSlot(p, roomID, req.Caller)
	if err != nil {
		return nil, err
	}
	defer release()
	// Admitted for the whole search: the gates of the hits are evaluated
	// after the read, and its statements' time is charged as they end.
	ctx, done, err := s.work(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	defer done()
	// The reader's context: what it may see, decided once, as a read.
	rc, err := s.readCtx(ctx, p, roomID, false)
	if err != nil {
		return nil, err
	}
	scope, err := authority.ResolveScope(p, req.Scope)
	if err != nil {
		return nil, err.(*errs.Error).With("field", "scope")
	}
	res := &SearchResult{Room: roomID, Query: req.Query, Hits: []SearchHit{}, Seq: rc.snap.seq}
	if scope != "" && scope != "views" && !rc.visible(scope) {
		return nil, rc.vis.Refuse(scope, "")
	}
	var hits []searchCand
	if scope != "views" {
		if hits, err = s.searchHits(ctx, rc, p, roomID, scope, req); err != nil {
			return nil, err
		}
	}
	// more is set only when a hit the reader sees lies past the page: a
	// "more" over candidates it cannot see would tell it they exist.
	more := false
	if len(hits) > req.Limit {
		hits, more = hits[:req.Limit], true
	}
	shown, full := res.page(req, hits, s.bestViews(rc, scope, req))
	if (more || full) && shown > 0 {
		next := req.Offset + shown
		res.Next = &next
		args := req.args()
		args["offset"] = next
		res.More = p.Say(errs.Step{Op: errs.OpSearch, Room: roomID, Args: args})
	}
	return res, nil
}

// bestViews are the views the reader's context evaluated that match, on
// a first page the request does not narrow to entries or messages: there
// are few, they are matched in their shown JSON, and the best five are
// kept, with room in the budget made for them first.
func (s *Service) bestViews(rc *roomCtx, scope string, req SearchRequest) []SearchHit {
	if req.Offset != 0 || (scope != "" && scope != "views") || req.From != "" || req.Kind != "" || req.Thread != 0 || req.After != nil || req.Before != nil {
		return nil
	}
	views := s.searchViews(rc, req.Query)
	sort.SliceStable(views, func(i, j int) bool { return views[i].Rank > views[j].Rank })
	return views[:min(len(views), 5)]
}

// searchCand is a hit the statement found, with the gate of its entry.
type searchCand struct {
	hit     SearchHit
	enabled *string
}

// searchHits runs the search statement under the reader's rule: at most
// req.Limit+1 hits past req.Offset, each one the reader sees.
func (s *Service) searchHits(ctx context.Context, rc *roomCtx, p *Principal, roomID, scope string, req SearchRequest) ([]searchCand, error) {
	args, err := s.searchRule(ctx, rc, p, roomID, scope, req)
	if err != nil {
		return nil, err
	}
	if s.searchJudged != nil {
		s.searchJudged(roomID)
	}
	// One statement finds, ranks, pages and cuts the snippets: the
	// text shown is the row version the rule admitted (revision at
	// most the snapshot's), never one written since.
	var hits []searchCand
	err = s.searchQuery(ctx, sqlSearch, append(args, req.Limit+1, req.Offset), func(rows pgx.Rows) error {
		c, err := scanSearchHit(rows)
		if err == nil {
			hits = append(hits, c)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	// The statement applied the rule; each hit is asked again, as a
	// guard (a feature's rule may decide log keys beyond the prefixes
	// it declares). Nothing is expected to be left out here.
	return slices.DeleteFunc(hits, func(c searchCand) bool { return !s.searchSees(ctx, rc, &c.hit, c.enabled) }), nil
}

// scanSearchHit reads one row of sqlSearch.
func scanSearchHit(rows pgx.Rows) (searchCand, error) {
	var c searchCand
	var kind, thread *string
	var sortKey *int64
	if err := rows.Scan(&c.hit.Scope, &c.hit.Key, &sortKey, &c.hit.Version, &c.hit.From, &c.hit.At, &c.enabled,
		&c.hit.Rank, &kind, &thread, &c.hit.Snippet); err != nil {
		return c, err
	}
	c.hit.Snippet = clipSnippet(c.hit.Snippet)
	c.hit.Kind = "entry"
	if sortKey != nil {
		c.hit.Kind, c.hit.Seq = "log", *sortKey
		if c.hit.Scope == ScopeMessages {
			c.hit.Kind, c.hit.Key, c.hit.Version = "message", "", 0
			if kind != nil {
				c.hit.MsgKind = *kind
			}
			if thread != nil {
				c.hit.Thread, _ = strconv.ParseInt(*thread, 10, 64)
			}
		}
	}
	return c, nil
}

// page fills res with the views and as many hits as the request's bytes
// hold (the first always), ranked together; shown is the number of hits
// kept, full whether the bytes left some out (they start the next page).
func (res *SearchResult) page(req SearchRequest, hits []searchCand, views []SearchHit) (shown int, full bool) {
	budget := req.MaxBytes
	if budget == 0 {
		budget = searchDefaultBytes
	}
	size := 300 + 2*len(req.Query)
	for _, v := range views {
		raw, _ := json.Marshal(v)
		size += len(raw) + 1
	}
	for i, c := range hits {
		raw, _ := json.Marshal(c.hit)
		if size+len(raw)+1 > budget && i > 0 {
			full = true
			break
		}
		size += len(raw) + 1
		res.Hits = append(res.Hits, c.hit)
		shown++
	}
	if len(views) > 0 {
		res.Hits = append(res.Hits, views...)
		sort.SliceStable(res.Hits, func(i, j int) bool { return res.Hits[i].Rank > res.Hits[j].Rank })
	}
	return shown, full
}

// searchSees reports whether the reader reads the candidate, as a read
// would show it.
func (s *Service) searchSees(ctx context.Context, rc *roomCtx, h *SearchHit, enabled *string) bool {
	if !rc.visible(h.Scope) {
		return false
	}
	if h.Kind != "entry" {
		key := h.Key
		if h.Kind == "message" {
			key = strconv.FormatInt(h.Seq, 10)
		}
		if !rc.vis.Entry(h.Scope, key) {
			return false
		}
		if rc.logShown == nil {
			rc.logShown = s.logGate(ctx, rc)
		}
		return rc.logShown(enabled)
	}
	if isHidden(h.Scope) {
		// A feature's scope kept apart from state (the loom's): its rule
		// decides each key; an entry with a gate or a timer is not
		// searched (features write neither).
		r, ok := rc.snap.scopes[h.Scope][h.Key]
		return ok && apartScope(h.Scope) && rc.vis.Entry(h.Scope, h.Key) && r.enabled == nil && r.timer == nil
	}
	m, ok := rc.shownEntries(h.Scope)
	if !ok {
		return false
	}
	_, ok = m[h.Key]
	return ok
}

// shownEntries are the entries of scope the reader's context shows (ok
// false: none, the scope is not shown).
func (rc *roomCtx) shownEntries(scope string) (map[string]any, bool) {
	if rc.shown == nil {
		rc.shown = rc.readableState()
	}
	m, ok := rc.shown[scope].(map[string]any)
	if !ok && scope == rc.self {
		m, ok = rc.shown[ScopeSelf].(map[string]any)
	}
	return m, ok
}

// searchViews matches the views the reader's context evaluated: every
// word of the query (lower-cased, operators dropped) in the view's id or
// its JSON.
func (s *Service) searchViews(rc *roomCtx, query string) []SearchHit {
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

	ids := make([]string, 0, len(rc.views))
	for id := range rc.views {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []SearchHit
	for _, id := range ids {
		raw, err := json.Marshal(rc.views[id])
		if err != nil {
			continue
		}
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
		out = append(out, SearchHit{Kind: "view", Key: id, Snippet: clipSnippet(orig[start:]), Rank: 0.1 * float64(min(n, 10))})
	}
	return out
}

// clipSnippet bounds a snippet to searchSnippetRunes.
func clipSnippet(s string) string {
	// Counted up to the cut, not over the whole text: a view's JSON may
	// be long, and a snippet costs what it shows.
	n := 0
	for i := range s {
		if n == searchSnippetRunes {
			return s[:i] + "…"
		}
		n++
	}
	return s
}

// check validates a request and fills its defaults.
func (req *SearchRequest) check(p *Principal, roomID string) error {
	if err := req.checkQuery(p, roomID); err != nil {
		return err
	}
	switch {
	case req.Limit < 0 || req.Limit > searchMaxLimit:
		return errs.New(errs.InvalidField, "limit %d is not between 1 and %d", req.Limit, searchMaxLimit).With("field", "limit").WithHint("use 1–%d (default %d)", searchMaxLimit, searchDefaultLimit)
	case req.Offset < 0 || req.Offset > searchMaxOffset:
		return errs.New(errs.InvalidField, "offset %d is not between 0 and %d", req.Offset, searchMaxOffset).With("field", "offset").WithHint("pass the next offset a search returned; narrow the query (scope, from, a time range) to reach further")
	case req.Thread < 0:
		return errs.New(errs.InvalidField, "thread %d is not a message seq", req.Thread).With("field", "thread").WithHint("pass the seq of the thread's first message")
	case req.MaxBytes != 0 && (req.MaxBytes < 1024 || req.MaxBytes > searchMaxBytes):
		return errs.New(errs.InvalidField, "max_bytes %d is not between 1024 and %d", req.MaxBytes, searchMaxBytes).With("field", "max_bytes").WithHint("leave it out for the default (16 KiB)")
	case req.After != nil && req.Before != nil && !req.After.Before(*req.Before):
		return errs.New(errs.InvalidField, "after is not before before").With("field", "after").WithHint("give a time range that is not empty")
	}
	if req.Limit == 0 {
		req.Limit = searchDefaultLimit
	}
	if req.Scope != "" && req.Scope != ScopeSelf && req.Scope != "views" {
		if err := authority.ValidName("scope", req.Scope, 128, true); err != nil {
			return err.(*errs.Error).With("field", "scope")
		}
	}
	return nil
}

// checkQuery trims the request's query and validates it.
func (req *SearchRequest) checkQuery(p *Principal, roomID string) error {
	req.Query = strings.TrimSpace(req.Query)
	example := p.Say(errs.Step{Op: errs.OpSearch, Room: roomID, Args: map[string]any{"q": "deadline"}})
	switch {
	case req.Query == "":
		return errs.New(errs.InvalidField, "search needs a query").With("field", "q").WithHint("search for words, e.g. %s", example)
	case len(req.Query) > searchMaxQuery:
		return errs.New(errs.InvalidField, "the query is %d bytes, over the limit of %d", len(req.Query), searchMaxQuery).With("field", "q").WithHint("search for fewer words")
	case searchTerms(req.Query) > searchMaxTerms:
		return errs.New(errs.InvalidField, "the query has %d words, over the limit of %d", searchTerms(req.Query), searchMaxTerms).With("field", "q").With("limit", searchMaxTerms).
			WithHint("search for at most %d words: the rarest ones find the most", searchMaxTerms)
	case !utf8.ValidString(req.Query) || strings.ContainsRune(req.Query, 0):
		return errs.New(errs.InvalidField, "the query is not valid text").With("field", "q").WithHint("send UTF-8 text without NUL characters")
	}
	return nil
}

// args are the request as a step's arguments (for the next page).
func (req SearchRequest) args() map[string]any {
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
	if req.Limit != searchDefaultLimit {
		a["limit"] = req.Limit
	}
	return a
}

// ParseSearchRequest reads a search from a query string (REST, pages).
func ParseSearchRequest(get func(string) string) (SearchRequest, error) {
	req := SearchRequest{Query: get("q"), Scope: get("scope"), From: get("from"), Kind: get("kind")}
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
			t, err := ParseSearchTime(v)
			if err != nil {
				return req, errs.New(errs.InvalidField, "%s %q is not a time", f.name, v).With("field", f.name).
					WithHint("use RFC 3339 (2026-11-26T09:00:00Z) or a date (2026-11-26)")
			}
			*f.into = &t
		}
	}
	return req, nil
}

// ParseSearchTime reads a search's time bound: RFC 3339 or a date (UTC).
func ParseSearchTime(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	return time.Parse("2006-01-02", v)
}
