package substrate

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// Search (issue 31 item 1): full-text search over what a reader may read
// of a room: messages, mutable entries (keys and values) and views.
//
// PostgreSQL finds and ranks the candidates (state.search_tsv, a
// generated tsvector with a GIN index: migration 0015); the one read rule
// then decides each candidate exactly as a context read would show it:
// a mutable entry matches only when the reader's context holds it (scope
// rule, features' read rules, entry gates, timers), a message only when
// the reader's log pages would show it (its gate evaluated as the
// reader), a view only when the reader's context evaluates it. So a
// search can never tell a reader that a private entry exists, let alone
// what it says.

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

// sqlSearch finds a room's candidates for a query (index state_search),
// best first, $12 of them after the first $13. $4..$9 are the filters,
// $10 the reader's private scopes ($11: whether the scope rule narrows to
// them; communal scopes always pass, and the audit log is not indexed).
const sqlSearch = `SELECT scope, key, sort_key, version, writer, updated_at, enabled_expr,
			ts_rank_cd(search_tsv, q) AS rank, value->>'kind' AS kind,
			CASE WHEN scope = '_messages' THEN coalesce(value->>'thread', CASE WHEN value ? 'subject' THEN sort_key::text END) END AS thread
		FROM state, websearch_to_tsquery('sync_search', $2) q
		WHERE room_id = $1 AND search_tsv @@ q AND revision <= $3 AND scope <> '_threads'` + liveSQL + `
			AND ($4 = '' OR scope = $4)
			AND ($5 = '' OR writer = $5)
			AND ($6 = '' OR (scope = '_messages' AND value->>'kind' = $6))
			AND ($7 = 0 OR (scope = '_messages' AND (sort_key = $7 OR value->>'thread' = $7::text)))
			AND ($8::timestamptz IS NULL OR updated_at >= $8) AND ($9::timestamptz IS NULL OR updated_at < $9)
			AND (NOT $11 OR scope ^@ '_' OR scope = ANY($10::text[]))
		ORDER BY rank DESC, sort_key DESC NULLS LAST, scope, key
		LIMIT $12 OFFSET $13`

// sqlSearchSnippets makes the snippets of the hits a page shows (primary
// key), and only of those: the reader's rule has kept them.
const sqlSearchSnippets = `SELECT s.scope, s.key, ts_headline('sync_search',
			CASE WHEN s.scope = '_messages' AND jsonb_typeof(s.value->'body') = 'string' THEN coalesce(s.value->>'subject' || ': ', '') || (s.value->>'body')
				WHEN jsonb_typeof(s.value) = 'string' THEN s.key || ': ' || (s.value #>> '{}')
				ELSE s.key || ': ' || left(s.value::text, 20000) END,
			websearch_to_tsquery('sync_search', $2), 'MaxWords=30, MinWords=12, ShortWord=2, MaxFragments=2, FragmentDelimiter=" … ", StartSel=«, StopSel=»')
		FROM state s JOIN unnest($3::text[], $4::text[]) AS t(sc, k) ON s.scope = t.sc AND s.key = t.k
		WHERE s.room_id = $1`

// Search finds what p may read of the room that matches req.
func (s *Service) Search(ctx context.Context, p *Principal, roomID string, req SearchRequest) (*SearchResult, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	if err := req.check(p, roomID); err != nil {
		return nil, err
	}
	// Admitted for the whole search: the gates of the hits are evaluated
	// after the read.
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
		restricted := p != nil && !(p.Kind == KindRoom || p.Kind == KindView || p.ReadsAll || p.Admin())
		mine := []string{}
		if restricted {
			if p.AgentID != "" {
				mine = append(mine, p.AgentID)
			}
			mine = append(mine, p.Grants...)
		}
		// The offset counts hits the reader sees, never candidates: an
		// offset over candidates would tell how many it cannot see. So
		// candidates are read from the best, in rounds (the reader's rule
		// thins them), until the page and one more are found; never
		// unbounded.
		want := req.Offset + req.Limit + 1
		offset, seen := 0, 0
		for round := 0; seen < want; round++ {
			if round == 4 {
				break // hidden matches past these stay unsaid
			}
			batch := min(max(want*2, 50), 2500)
			rows, err := s.db.Query(ctx, sqlSearch, roomID, req.Query, rc.snap.seq, scope, req.From, req.Kind, req.Thread,
				req.After, req.Before, mine, restricted, batch, offset)
			if err != nil {
				return nil, err
			}
			var page []cand
			for rows.Next() {
				var c cand
				var kind, thread *string
				var sortKey *int64
				if err := rows.Scan(&c.hit.Scope, &c.hit.Key, &sortKey, &c.hit.Version, &c.hit.From, &c.hit.At, &c.enabled,
					&c.hit.Rank, &kind, &thread); err != nil {
					rows.Close()
					return nil, err
				}
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
				page = append(page, c)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return nil, err
			}
			// The rule runs once the connection is released (gates are
			// expressions).
			for _, c := range page {
				if seen < want && s.searchSees(ctx, rc, &c.hit, c.enabled) {
					if seen >= req.Offset {
						hits = append(hits, c)
					}
					seen++
				}
			}
			offset += len(page)
			if len(page) < batch {
				break
			}
		}
	}
	if len(hits) > req.Limit {
		hits, more = hits[:req.Limit], true
	}
	page := make([]*SearchHit, len(hits))
	for i := range hits {
		page[i] = &hits[i].hit
	}
	if err := s.searchSnippets(ctx, roomID, req.Query, page); err != nil {
		return nil, err
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

// searchSnippets fills the snippets of a page's hits in one statement.
func (s *Service) searchSnippets(ctx context.Context, roomID, query string, hits []*SearchHit) error {
	if len(hits) == 0 {
		return nil
	}
	type ref struct{ scope, key string }
	at := make(map[ref]*SearchHit, len(hits))
	scopes, keys := make([]string, len(hits)), make([]string, len(hits))
	for i, h := range hits {
		key := h.Key
		if h.Kind == "message" {
			key = strconv.FormatInt(h.Seq, 10)
		}
		scopes[i], keys[i] = h.Scope, key
		at[ref{h.Scope, key}] = h
	}
	rows, err := s.db.Query(ctx, sqlSearchSnippets, roomID, query, scopes, keys)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var r ref
		var snippet string
		if err := rows.Scan(&r.scope, &r.key, &snippet); err != nil {
			return err
		}
		if h := at[r]; h != nil {
			h.Snippet = clipSnippet(snippet)
		}
	}
	return rows.Err()
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
	if rc.shown == nil {
		rc.shown = rc.readableState()
	}
	m, ok := rc.shown[h.Scope].(map[string]any)
	if !ok && h.Scope == rc.self {
		m, ok = rc.shown[ScopeSelf].(map[string]any)
	}
	if !ok {
		return false
	}
	_, ok = m[h.Key]
	return ok
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
