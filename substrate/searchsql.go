// The search statements and what they cost: the SQL that finds, ranks
// and pages the hits the rule in search.go admitted, the text search
// configuration it runs on, and the bounds on a statement (its time, its
// charge to the room's budget, the searches one credential runs at once).

package substrate

import (
	"context"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
)

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
// agent: the lobby's principals carry no token, so the caller it names
// (SearchRequest.Caller) tells its people apart.
func (s *Service) searchSlot(p *Principal, roomID, caller string) (release func(), _ error) {
	key := roomID + "\x00system\x00" + caller
	if p != nil {
		key = roomID + "\x00" + string(p.Kind) + "\x00" + p.AgentID + "\x00" + p.ReadsAs() + "\x00" + string(p.TokenHash()) + "\x00" + caller
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
