-- MCP sessions: one row per OAuth grant (its id survives token refresh),
-- holding what a stateless tool call needs: the focused room, the embodied
-- agent and the effective scope (which widens and narrows in the session).
CREATE TABLE smcp_user_sessions (
    grant_id   text        PRIMARY KEY,
    user_id    text        NOT NULL REFERENCES smcp_users (id) ON DELETE CASCADE,
    client_id  text        NOT NULL,
    room_id    text        REFERENCES rooms (id) ON DELETE SET NULL,
    agent_id   text,
    scope      text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX smcp_user_sessions_user ON smcp_user_sessions (user_id);

-- The user an agent embodies on behalf of (set only by the lobby).
ALTER TABLE agents ADD COLUMN user_id text REFERENCES smcp_users (id) ON DELETE SET NULL;
