-- The substrate: rooms, agents and the single state table (seed 001 §State).
-- Every room-owned table leads its primary key with room_id, and no
-- transaction spans two rooms.

CREATE TABLE rooms (
    id              text        PRIMARY KEY,
    created_at      timestamptz NOT NULL DEFAULT now(),
    meta            jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- Open join lets anyone join with a new agent id; off unless the
    -- creator asks for it.
    open_join       boolean     NOT NULL DEFAULT false,
    -- SHA-256 of the room_ and view_ tokens; the tokens themselves are
    -- shown once at creation and never stored.
    token_hash      bytea       NOT NULL UNIQUE,
    view_token_hash bytea       NOT NULL UNIQUE,
    -- The room's write sequence. Every mutation bumps it under the row
    -- lock; append entries take their sort_key from it.
    seq             bigint      NOT NULL DEFAULT 0
);

CREATE TABLE agents (
    room_id        text        NOT NULL REFERENCES rooms (id) ON DELETE CASCADE,
    id             text        NOT NULL,
    name           text        NOT NULL,
    role           text        NOT NULL DEFAULT 'agent',
    meta           jsonb       NOT NULL DEFAULT '{}'::jsonb,
    grants         text[]      NOT NULL DEFAULT '{}',
    status         text        NOT NULL DEFAULT 'active',
    waiting_on     text,
    joined_at      timestamptz NOT NULL DEFAULT now(),
    last_heartbeat timestamptz NOT NULL DEFAULT now(),
    last_seen_seq  bigint      NOT NULL DEFAULT 0,
    token_hash     bytea       NOT NULL UNIQUE,
    PRIMARY KEY (room_id, id)
);

CREATE TABLE state (
    room_id          text        NOT NULL REFERENCES rooms (id) ON DELETE CASCADE,
    scope            text        NOT NULL,
    key              text        NOT NULL,
    -- Set for append entries (from rooms.seq), NULL for mutable ones.
    sort_key         bigint,
    value            jsonb       NOT NULL,
    -- Per-entry write counter: 1 on insert, +1 per write (CAS target).
    version          bigint      NOT NULL DEFAULT 1,
    -- The room seq of the mutation that last wrote this entry.
    revision         bigint      NOT NULL,
    -- Who wrote it ("room", "view" never, or the agent id) and how
    -- ("direct", or "action:<id>" later).
    writer           text        NOT NULL,
    via              text        NOT NULL DEFAULT 'direct',
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    -- Timers and enabled expressions (seed 001 §State); used by the
    -- actions/views issue, present now so the table stays one table.
    timer_json       jsonb,
    timer_expires_at timestamptz,
    timer_ticks_left integer,
    timer_tick_on    text,
    timer_effect     text,
    timer_started_at timestamptz,
    enabled_expr     text,
    PRIMARY KEY (room_id, scope, key)
);

CREATE INDEX state_scope_sort ON state (room_id, scope, sort_key) WHERE sort_key IS NOT NULL;
