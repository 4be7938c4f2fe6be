package substrate

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/searchrule"
)

// Search's core (issue 31 item 1, issue 45): the statements over room
// rows and the read rule they apply. What a search is (its request and
// its checks, ranking views beside rows, paging by bytes, snippets' cut,
// the result) is the feature substrate/search, built on SearchRows.
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
// What a search asks and returns, what it costs and how many run at once
// are search's own rules, in substrate/searchrule.

// A search's request, its rows and its read (searchrule), under the
// names the feature and the surfaces use.
type (
	SearchQuery = searchrule.Query
	SearchRow   = searchrule.Row
	SearchRead  = searchrule.Read
)

// SearchRows reads what p may see of the room's rows that match q, best
// first: at most q.Limit, after the first q.Offset p sees. No row p's
// context read would not show is ranked, paged, counted or returned.
func (s *Service) SearchRows(ctx context.Context, p *Principal, roomID string, q SearchQuery) (*SearchRead, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	if err := searchrule.ValidScope(q.Scope); err != nil {
		return nil, err
	}
	release, err := s.searchSlot(p, roomID, q.Caller)
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
	scope, err := authority.ResolveScope(p, q.Scope)
	if err != nil {
		return nil, err.(*errs.Error).With("field", "scope")
	}
	if scope != "" && scope != searchrule.Views && !rc.visible(scope) {
		return nil, rc.vis.Refuse(scope, "")
	}
	out := &SearchRead{Seq: rc.snap.seq, Scope: scope}
	if scope != searchrule.Views {
		if out.Rows, err = s.searchHits(ctx, rc, p, roomID, scope, q); err != nil {
			return nil, err
		}
	}
	if q.Views && (scope == "" || scope == searchrule.Views) {
		out.Views = rc.viewsJSON()
	}
	return out, nil
}

// viewsJSON are the views the reader's context evaluated, each as its
// JSON (a view that does not encode is left out).
func (rc *roomCtx) viewsJSON() map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(rc.views))
	for id, v := range rc.views {
		if raw, err := json.Marshal(v); err == nil {
			out[id] = raw
		}
	}
	return out
}

// searchRule decides what the reader may see of the room for a search
// and returns the search statements' arguments ($1..$18) that say it: the
// reader's snapshot decides mutable entries (those it holds that the
// reader's context does not show are named), and the log entries' (scope,
// gate) pairs the query matches are decided one by one, as a log page
// decides them.
func (s *Service) searchRule(ctx context.Context, rc *roomCtx, p *Principal, roomID, scope string, q SearchQuery) ([]any, error) {
	restricted, mine := searchrule.Narrowing(p)
	args := []any{roomID, q.Query, rc.snap.seq, scope, q.From, q.Kind, q.Thread, q.After, q.Before, mine, restricted}
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
		if searchrule.NotIndexed[sc] || (scope != "" && sc != scope) || (restricted && !strings.HasPrefix(sc, "_") && !slices.Contains(mine, sc)) {
			continue // the statement's filters leave it out already
		}
		if !rc.visible(sc) {
			hiddenScopes = append(hiddenScopes, sc)
			continue
		}
		if isHidden(sc) {
			for k, r := range rows {
				if h := (SearchRow{Kind: "entry", Scope: sc, Key: k}); !s.searchSees(ctx, rc, &h, r.enabled) {
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
// most searchrule.MaxGates.
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
	return pairs[:min(len(pairs), searchrule.MaxGates)], nil
}

// searchCand is a row the statement found, with the gate of its entry.
type searchCand struct {
	hit     SearchRow
	enabled *string
}

// searchHits runs the search statement under the reader's rule: at most
// q.Limit rows past q.Offset, each one the reader sees.
func (s *Service) searchHits(ctx context.Context, rc *roomCtx, p *Principal, roomID, scope string, q SearchQuery) ([]SearchRow, error) {
	args, err := s.searchRule(ctx, rc, p, roomID, scope, q)
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
	err = s.searchQuery(ctx, sqlSearch, append(args, q.Limit, q.Offset), func(rows pgx.Rows) error {
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
	rows := make([]SearchRow, 0, len(hits))
	for _, c := range hits {
		if s.searchSees(ctx, rc, &c.hit, c.enabled) {
			rows = append(rows, c.hit)
		}
	}
	return rows, nil
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
	searchrule.Classify(&c.hit, sortKey, kind, thread)
	return c, nil
}

// searchSees reports whether the reader reads the candidate, as a read
// would show it.
func (s *Service) searchSees(ctx context.Context, rc *roomCtx, h *SearchRow, enabled *string) bool {
	if !rc.visible(h.Scope) {
		return false
	}
	if h.Kind != "entry" {
		if !rc.vis.Entry(h.Scope, searchrule.LogKey(h)) {
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
// search matches (at most searchrule.MaxGates pairs): the reader's rule
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

// ConfigureSearch sets the search language: "simple" (no stemming, no
// stop words) or a language PostgreSQL stems (english, german, french…:
// SELECT dictname FROM pg_ts_dict lists them as <language>_stem). When it
// changes, the text search configuration sync_search is re-mapped and
// every room's entries are indexed again, one room at a time, so a
// search finds words as the new language stems them. Processes sharing a
// database must agree on it (the last to start wins).
func (s *Service) ConfigureSearch(ctx context.Context, language string) (changed bool, err error) {
	dict := searchrule.Dictionary(language)
	if dict == "" {
		return false, nil
	}
	language = strings.ToLower(strings.TrimSpace(language))
	var exists bool
	if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_ts_dict WHERE dictname = $1)`, dict).Scan(&exists); err != nil {
		return false, err
	}
	if !exists {
		return false, searchrule.NoLanguage(language)
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
	if _, err := s.db.Exec(ctx, `ALTER TEXT SEARCH CONFIGURATION sync_search ALTER MAPPING FOR `+searchrule.TokenTypes+` WITH `+searchrule.Ident(dict)); err != nil {
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

// searchQuery runs one search statement on a connection of its own, hands
// each row to scan and charges the statement's database time (from the
// query's start to its last row, the wait for a connection not counted)
// to the room's budget.
func (s *Service) searchQuery(ctx context.Context, sql string, args []any, scan func(pgx.Rows) error) error {
	return s.db.WithConn(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		limit := searchrule.StatementTime
		if s.searchTimeout > 0 {
			limit = s.searchTimeout
		}
		qctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		t0 := time.Now()
		defer func() {
			expr.Charge(ctx, searchrule.Cost(time.Since(t0)))
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
			return searchrule.TooLong(limit)
		}
		return err
	})
}

// searchSlot takes one of the searches p's credential may run at once
// (searchrule.AtOnce, counted by searchrule.SlotKey), or refuses it with
// room_busy; release gives it back.
func (s *Service) searchSlot(p *Principal, roomID, caller string) (release func(), _ error) {
	key := searchrule.SlotKey(p, roomID, caller)
	s.searchMu.Lock()
	defer s.searchMu.Unlock()
	if s.searching[key] >= searchrule.AtOnce {
		s.roomBusy.Add(1)
		return nil, searchrule.Busy(roomID)
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
