-- Full-text search over a room's messages and state (issue 31): a
-- generated tsvector on each entry a reader may find, and a GIN index
-- over it, so that a search reads the index, never the room's history.
--
-- The language is the text search configuration sync_search (a copy of
-- english here); syncd's -search-language re-maps it at start-up to
-- another of PostgreSQL's (simple, german, french…) and rewrites the
-- stored vectors once (substrate.ConfigureSearch).
CREATE TEXT SEARCH CONFIGURATION sync_search (COPY = pg_catalog.english);

-- Only what a search may return is indexed: messages and mutable entries
-- of _shared, agents' and users' scopes and features' scopes. The audit
-- log (every write's values, room authority's to read), definitions and
-- system bookkeeping are not, so they cost no index writes. A key counts
-- double a value's words (weight A); dots, slashes and underscores in
-- keys split words ("deadline.q3" finds "deadline").
ALTER TABLE state ADD COLUMN search_tsv tsvector GENERATED ALWAYS AS (
    CASE WHEN scope IN ('_audit', '_actions', '_views', '_agents', '_cooldowns', '_acks') THEN NULL
    ELSE setweight(to_tsvector('sync_search'::regconfig,
            CASE WHEN sort_key IS NULL THEN translate(key, '._/:-', '     ') ELSE '' END), 'A')
        || setweight(jsonb_to_tsvector('sync_search'::regconfig, value, '["string", "numeric"]'), 'B')
    END) STORED;

CREATE INDEX state_search ON state USING gin (search_tsv) WHERE search_tsv IS NOT NULL;
