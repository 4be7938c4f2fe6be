package substrate

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
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

// searchFilters are the conditions every search statement shares: the
// room's indexed rows matching the query q ($2), at the reader's snapshot
// ($3), through the request's filters ($4..$9), the scope rule ($10 the
// reader's private scopes; $11 whether it narrows to them: communal
// scopes always pass, and the audit log is not indexed).
const searchFilters = `room_id = $1 AND search_tsv @@ q AND revision <= $3 AND scope <> '_threads'` + liveSQL + `
			AND ($4 = '' OR scope = $4)
			AND ($5 = '' OR writer = $5)
			AND ($6 = '' OR (scope = '_messages' AND value->>'kind' = $6))
			AND ($7 = 0 OR (scope = '_messages' AND (sort_key = $7 OR value->>'thread' = $7::text)))
			AND ($8::timestamptz IS NULL OR updated_at >= $8) AND ($9::timestamptz IS NULL OR updated_at < $9)
			AND (NOT $11 OR scope ^@ '_' OR scope = ANY($10::text[]))`

// sqlSearchGates lists the log scopes and the gates of the log entries a
// search matches (at most searchMaxGates pairs): the reader's rule
// decides each pair once, in Go, before the search statement. A log
// entry's gate reads the room, never the entry, so its answer is the
// same for every entry it gates.
const sqlSearchGates = `SELECT DISTINCT scope, enabled_expr FROM state, websearch_to_tsquery('sync_search', $2) q
		WHERE ` + searchFilters + ` AND sort_key IS NOT NULL
		LIMIT 1025`

// sqlSearch finds, ranks and pages a room's hits for a query (index
// state_search) among the rows the reader may see, and cuts their
// snippets, in one statement: the text a hit shows is the row version the
// rule admitted. Past the filters, the rule: mutable entries not in the
// snapshot's hidden entries ($12, $13) nor hidden scopes ($14); log
// entries of an admitted (scope, gate) pair ($15, $16) and outside their
// scope's hidden key prefixes ($17, $18). Then $19 hits after the first
// $20 the reader sees.
const sqlSearch = `WITH hits AS (
		SELECT scope, key, sort_key, version, writer, updated_at, enabled_expr, value, q,
			ts_rank_cd(search_tsv, q) AS rank, value->>'kind' AS kind,
			CASE WHEN scope = '_messages' THEN coalesce(value->>'thread', CASE WHEN value ? 'subject' THEN sort_key::text END) END AS thread
		FROM state, websearch_to_tsquery('sync_search', $2) q
		WHERE ` + searchFilters + `
			AND CASE WHEN sort_key IS NULL THEN
				scope <> ALL($14::text[])
				AND NOT EXISTS (SELECT 1 FROM unnest($12::text[], $13::text[]) h(sc, k) WHERE h.sc = state.scope AND h.k = state.key)
			ELSE
				EXISTS (SELECT 1 FROM unnest($15::text[], $16::text[]) g(sc, gate) WHERE g.sc = state.scope AND g.gate IS NOT DISTINCT FROM state.enabled_expr)
				AND NOT EXISTS (SELECT 1 FROM unnest($17::text[], $18::text[]) hp(sc, pre) WHERE hp.sc = state.scope AND state.key ^@ hp.pre)
			END
		ORDER BY rank DESC, sort_key DESC NULLS LAST, scope, key
		LIMIT $19 OFFSET $20)
	SELECT scope, key, sort_key, version, writer, updated_at, enabled_expr, rank, kind, thread,
		ts_headline('sync_search',
			CASE WHEN scope = '_messages' AND jsonb_typeof(value->'body') = 'string' THEN coalesce(value->>'subject' || ': ', '') || (value->>'body')
				WHEN jsonb_typeof(value) = 'string' THEN key || ': ' || (value #>> '{}')
				ELSE key || ': ' || left(value::text, 20000) END,
			q, 'MaxWords=30, MinWords=12, ShortWord=2, MaxFragments=2, FragmentDelimiter=" … ", StartSel=«, StopSel=»')
	FROM hits
	ORDER BY rank DESC, sort_key DESC NULLS LAST, scope, key`

// searchMaxGates bounds the (log scope, gate) pairs one search decides
// (sqlSearchGates' limit less one): the entries of pairs past it are left
// out (fail closed), as a read leaves out the gates its budget could not
// afford.
const searchMaxGates = 1024

// notIndexed are the scopes migration 0015 does not index: the rule need
// not say anything of them.
var notIndexed = map[string]bool{"_audit": true, scopeActions: true, scopeViews: true, "_agents": true, scopeCooldowns: true, "_acks": true, "_threads": true}

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
	hiddenScopes, hiddenKeys, hiddenIn := []string{}, []string{}, []string{}
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
	type pair struct {
		scope string
		gate  *string
	}
	var pairs []pair
	err := s.searchQuery(ctx, sqlSearchGates, args, func(rows pgx.Rows) error {
		var pr pair
		if err := rows.Scan(&pr.scope, &pr.gate); err != nil {
			return err
		}
		pairs = append(pairs, pr)
		return nil
	})
	if err != nil {
		return nil, err
	}
	pairs = pairs[:min(len(pairs), searchMaxGates)]
	logScopes, logGates := []string{}, []*string{}
	prefixIn, prefixes := []string{}, []string{}
	seen := map[string]bool{}
	for _, pr := range pairs {
		if !rc.visible(pr.scope) {
			continue
		}
		if !seen[pr.scope] {
			seen[pr.scope] = true
			for _, pre := range rc.vis.hiddenPrefixes(pr.scope) {
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

// Search finds what p may read of the room that matches req.
func (s *Service) Search(ctx context.Context, p *Principal, roomID string, req SearchRequest) (*SearchResult, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	if err := req.check(p, roomID); err != nil {
		return nil, err
	}
	release, err := s.searchSlot(p, roomID)
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
	scope, err := resolveScope(p, req.Scope)
	if err != nil {
		return nil, err.(*errs.Error).With("field", "scope")
	}
	res := &SearchResult{Room: roomID, Query: req.Query, Hits: []SearchHit{}, Seq: rc.snap.seq}
	if scope != "" && scope != "views" && !rc.visible(scope) {
		return nil, rc.vis.refuse(scope, "")
	}
	type cand struct {
		hit     SearchHit
		enabled *string
	}
	var hits []cand
	// more is set only when a hit the reader sees lies past the page: a
	// "more" over candidates it cannot see would tell it they exist.
	more := false
	if scope != "views" {
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
		err = s.searchQuery(ctx, sqlSearch, append(args, req.Limit+1, req.Offset), func(rows pgx.Rows) error {
			var c cand
			var kind, thread *string
			var sortKey *int64
			if err := rows.Scan(&c.hit.Scope, &c.hit.Key, &sortKey, &c.hit.Version, &c.hit.From, &c.hit.At, &c.enabled,
				&c.hit.Rank, &kind, &thread, &c.hit.Snippet); err != nil {
				return err
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
			hits = append(hits, c)
			return nil
		})
		if err != nil {
			return nil, err
		}
		// The statement applied the rule; each hit is asked again, as a
		// guard (a feature's rule may decide log keys beyond the prefixes
		// it declares). Nothing is expected to be left out here.
		hits = slices.DeleteFunc(hits, func(c cand) bool { return !s.searchSees(ctx, rc, &c.hit, c.enabled) })
	}
	if len(hits) > req.Limit {
		hits, more = hits[:req.Limit], true
	}
	// Views the reader's context evaluated, on the first page: there are
	// few, they are matched in their shown JSON, and the best five are
	// kept, with room in the budget made for them first.
	var views []SearchHit
	if req.Offset == 0 && (scope == "" || scope == "views") && req.From == "" && req.Kind == "" && req.Thread == 0 && req.After == nil && req.Before == nil {
		views = s.searchViews(rc, req.Query)
		sort.SliceStable(views, func(i, j int) bool { return views[i].Rank > views[j].Rank })
		views = views[:min(len(views), 5)]
	}
	budget := req.MaxBytes
	if budget == 0 {
		budget = searchDefaultBytes
	}
	size := 300 + 2*len(req.Query)
	for _, v := range views {
		raw, _ := json.Marshal(v)
		size += len(raw) + 1
	}
	shown := 0
	for i, c := range hits {
		raw, _ := json.Marshal(c.hit)
		if size+len(raw)+1 > budget && i > 0 {
			more = true // the rest start the next page
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
	if more && shown > 0 {
		next := req.Offset + shown
		res.Next = &next
		args := req.args()
		args["offset"] = next
		res.More = p.say(errs.Step{Op: errs.OpSearch, Room: roomID, Args: args})
	}
	return res, nil
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
		if !rc.vis.entry(h.Scope, key) {
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
		return ok && apartScope(h.Scope) && rc.vis.entry(h.Scope, h.Key) && r.enabled == nil && r.timer == nil
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
	req.Query = strings.TrimSpace(req.Query)
	example := p.say(errs.Step{Op: errs.OpSearch, Room: roomID, Args: map[string]any{"q": "deadline"}})
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
		if err := validName("scope", req.Scope, 128, true); err != nil {
			return err.(*errs.Error).With("field", "scope")
		}
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

// searchTokenTypes are the parser's word tokens a language stems (the
// others, numbers, URLs and e-mail addresses, are indexed as they are).
const searchTokenTypes = `asciiword, asciihword, hword_asciipart, word, hword, hword_part`

// ConfigureSearch sets the search language: "simple" (no stemming, no
// stop words) or a language PostgreSQL stems (english, german, french…:
// SELECT dictname FROM pg_ts_dict lists them as <language>_stem). When it
// changes, the text search configuration sync_search is re-mapped and
// every room's entries are indexed again, one room at a time, so a
// search finds words as the new language stems them. Processes sharing a
// database must agree on it (the last to start wins).
func (s *Service) ConfigureSearch(ctx context.Context, language string) (changed bool, err error) {
	language = strings.ToLower(strings.TrimSpace(language))
	if language == "" {
		return false, nil
	}
	dict := language + "_stem"
	if language == "simple" {
		dict = "simple"
	}
	var exists bool
	if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_ts_dict WHERE dictname = $1)`, dict).Scan(&exists); err != nil {
		return false, err
	}
	if !exists {
		return false, errs.New(errs.InvalidField, "search language %q is not one PostgreSQL has", language).
			WithHint("use simple or a language with a stemmer: SELECT dictname FROM pg_ts_dict WHERE dictname LIKE '%%_stem'")
	}
	var current string
	err = s.db.QueryRow(ctx, `SELECT d.dictname FROM pg_ts_config_map m JOIN pg_ts_config c ON c.oid = m.mapcfg
		JOIN pg_ts_dict d ON d.oid = m.mapdict
		WHERE c.cfgname = 'sync_search' AND m.maptokentype = (SELECT tokid FROM ts_token_type('default') WHERE alias = 'asciiword')
		ORDER BY m.mapseqno DESC LIMIT 1`).Scan(&current)
	if err != nil {
		return false, err
	}
	if current == dict {
		return false, nil
	}
	// The dictionary name is one PostgreSQL listed above, so it is safe
	// to write into the statement (DDL takes no parameters).
	if _, err := s.db.Exec(ctx, `ALTER TEXT SEARCH CONFIGURATION sync_search ALTER MAPPING FOR `+searchTokenTypes+` WITH `+pgIdent(dict)); err != nil {
		return false, err
	}
	rows, err := s.db.Query(ctx, `SELECT id FROM rooms WHERE seq > $1`, 0)
	if err != nil {
		return true, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return true, err
	}
	for _, id := range ids {
		// Rewriting a row recomputes its generated column.
		if _, err := s.db.Exec(ctx, `UPDATE state SET value = value WHERE room_id = $1 AND search_tsv IS NOT NULL`, id); err != nil {
			return true, err
		}
	}
	s.log.Info("search language changed; entries indexed again", "language", language, "was", current, "rooms", len(ids))
	return true, nil
}

// pgIdent quotes an identifier.
func pgIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// searchCostPerMS is what a millisecond of a search statement's database
// time costs the room's expression budget (work). A search's work is
// mostly PostgreSQL's (the index, ranking, snippets), which no evaluation
// counts; billed so, a flood of searches spends its room's budget, not
// the whole server's database. A quarter of the budget's CPU scale
// (2,000,000 a second is some 100 ms of CPU): the time is wall time,
// which a loaded machine inflates, and at the full scale one observer's
// few ordinary searches in a second already spent the observers' share;
// at this rate a room affords some 400 ms of search statements a second,
// and the two-at-once cap per credential keeps one flood from taking it.
const searchCostPerMS = 5_000

// searchStatementTime bounds one search statement: past it the search is
// cancelled and the caller told to narrow it. It also bounds the debt one
// search can leave its room's budget (some 30 s of it at the default).
const searchStatementTime = 3 * time.Second

// searchQuery runs one search statement on a connection of its own, hands
// each row to scan and charges the statement's database time (from the
// query's start to its last row, the wait for a connection not counted)
// to the room's budget.
func (s *Service) searchQuery(ctx context.Context, sql string, args []any, scan func(pgx.Rows) error) error {
	return s.db.WithConn(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		limit := searchStatementTime
		if s.searchTimeout > 0 {
			limit = s.searchTimeout
		}
		qctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		t0 := time.Now()
		defer func() {
			expr.Charge(ctx, uint64(time.Since(t0).Microseconds()*searchCostPerMS/1000))
		}()
		rows, err := conn.Query(qctx, sql, args...)
		if err == nil {
			for rows.Next() {
				if err = scan(rows); err != nil {
					break
				}
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil && qctx.Err() != nil && ctx.Err() == nil {
			return errs.New(errs.InvalidField, "the search took longer than %s and was stopped", limit).With("field", "q").
				WithHint("narrow it: rarer words, a scope, from, or a time range (after, before)")
		}
		return err
	})
}

// searchTerms counts a query's words, those of its phrases included, and
// not its operators (or, a lone -).
func searchTerms(q string) int {
	n := 0
	for _, w := range strings.FieldsFunc(q, func(r rune) bool { return unicode.IsSpace(r) || r == '"' }) {
		if w = strings.TrimLeft(w, "-"); w != "" && !strings.EqualFold(w, "or") {
			n++
		}
	}
	return n
}

// searchSlot takes one of the searches p's credential may run at once
// (searchesAtOnce), or refuses it with room_busy; release gives it back.
// A credential is a token (its hash), else the principal's kind and
// agent: the lobby's principals carry no token.
func (s *Service) searchSlot(p *Principal, roomID string) (release func(), _ error) {
	key := roomID + "\x00system"
	if p != nil {
		key = roomID + "\x00" + string(p.Kind) + "\x00" + p.AgentID + "\x00" + p.readsAs + "\x00" + string(p.tokenHash)
	}
	s.searchMu.Lock()
	defer s.searchMu.Unlock()
	if s.searching[key] >= searchesAtOnce {
		s.roomBusy.Add(1)
		return nil, errs.New(errs.RoomBusy, "%d searches of yours are running in room %q, the most one credential runs at once", searchesAtOnce, roomID).
			With("retry_after_ms", int64(1000)).With("limit", searchesAtOnce).
			WithHint("retry after 1 s, once one of them has answered; search one query at a time")
	}
	if s.searching == nil {
		s.searching = map[string]int{}
	}
	s.searching[key]++
	return func() {
		s.searchMu.Lock()
		defer s.searchMu.Unlock()
		if s.searching[key]--; s.searching[key] <= 0 {
			delete(s.searching, key)
		}
	}, nil
}
