-- Users, passkeys, browser sessions, the OAuth authorization server's
-- clients and grants, and users' relation to rooms. Every secret (session
-- ids, invite links, recovery codes, client secrets) is stored as a
-- SHA-256 hash; OAuth codes and tokens are stored by their HMAC signature,
-- which does not reveal the token.

CREATE TABLE smcp_users (
    id              text        PRIMARY KEY,
    username        text        NOT NULL UNIQUE,
    -- The WebAuthn user handle: random, stable, never shown.
    webauthn_handle bytea       NOT NULL UNIQUE,
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE smcp_credentials (
    id           bytea       PRIMARY KEY,
    user_id      text        NOT NULL REFERENCES smcp_users (id) ON DELETE CASCADE,
    name         text        NOT NULL,
    -- go-webauthn's Credential (public key, sign count, flags, …).
    credential   jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz
);
CREATE INDEX smcp_credentials_user ON smcp_credentials (user_id);

-- WebAuthn ceremony state: single use, short-lived.
CREATE TABLE smcp_webauthn_sessions (
    id_hash    bytea       PRIMARY KEY,
    kind       text        NOT NULL,
    user_id    text,
    data       jsonb       NOT NULL,
    expires_at timestamptz NOT NULL
);

-- Browser sessions.
CREATE TABLE smcp_sessions (
    id_hash    bytea       PRIMARY KEY,
    user_id    text        NOT NULL REFERENCES smcp_users (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

-- Enrolment and invite links, and recovery codes: one-time secrets.
CREATE TABLE smcp_invites (
    token_hash bytea       PRIMARY KEY,
    kind       text        NOT NULL CHECK (kind IN ('enrol', 'invite')),
    created_by text        REFERENCES smcp_users (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    used_at    timestamptz,
    used_by    text
);

CREATE TABLE smcp_recovery_codes (
    user_id   text        NOT NULL REFERENCES smcp_users (id) ON DELETE CASCADE,
    code_hash bytea       NOT NULL,
    used_at   timestamptz,
    PRIMARY KEY (user_id, code_hash)
);

CREATE TABLE smcp_oauth_clients (
    id           text        PRIMARY KEY,
    secret_hash  bytea,
    name         text        NOT NULL,
    redirect_uris text[]     NOT NULL,
    auth_method  text        NOT NULL,
    metadata     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz
);

-- Authorization codes, access and refresh tokens and PKCE sessions, as
-- fosite requesters. request_id is the grant: it stays the same across
-- refreshes.
CREATE TABLE smcp_oauth_tokens (
    signature  text        NOT NULL,
    kind       text        NOT NULL CHECK (kind IN ('code', 'access', 'refresh', 'pkce')),
    request_id text        NOT NULL,
    client_id  text        NOT NULL,
    subject    text,
    active     boolean     NOT NULL DEFAULT true,
    request    jsonb       NOT NULL,
    expires_at timestamptz,
    rotated_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, signature)
);
CREATE INDEX smcp_oauth_tokens_request ON smcp_oauth_tokens (request_id);
CREATE INDEX smcp_oauth_tokens_subject ON smcp_oauth_tokens (subject) WHERE subject IS NOT NULL;

-- What a user last granted a client (keyed by client name and redirect
-- host, since dynamically registered clients get a new id per connection).
CREATE TABLE smcp_consents (
    user_id    text        NOT NULL REFERENCES smcp_users (id) ON DELETE CASCADE,
    client_key text        NOT NULL,
    scope      text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, client_key)
);

CREATE TABLE smcp_user_rooms (
    user_id    text        NOT NULL REFERENCES smcp_users (id) ON DELETE CASCADE,
    room_id    text        NOT NULL REFERENCES rooms (id) ON DELETE CASCADE,
    access     text        NOT NULL CHECK (access IN ('owner', 'collaborator', 'participant', 'observer')),
    label      text,
    invited_by text,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, room_id)
);
CREATE INDEX smcp_user_rooms_room ON smcp_user_rooms (room_id);

-- Server keys (the OAuth HMAC secret), made on first start and shared by
-- every process on this database.
CREATE TABLE smcp_server_keys (
    name       text        PRIMARY KEY,
    value      bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
