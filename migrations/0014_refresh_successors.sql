-- Refresh-token rotation without disconnecting people: a rotated refresh
-- token keeps working until one of its successors has been used (clients
-- replay the previous token when a response was lost); only then is its
-- reuse a theft signal that revokes the grant. parent is the hashed
-- signature of the refresh token a token was issued for.
ALTER TABLE smcp_oauth_tokens ADD COLUMN parent text;
ALTER TABLE smcp_oauth_tokens ADD COLUMN successor_used boolean NOT NULL DEFAULT false;

-- Why a grant ended, shown on the account page: a connection that stops
-- working should say whether the person, the application or the server
-- (refresh token reuse) ended it.
CREATE TABLE smcp_oauth_grant_ends (
    request_id  text        PRIMARY KEY,
    subject     text,
    client_name text        NOT NULL,
    reason      text        NOT NULL,
    ended_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX smcp_oauth_grant_ends_subject ON smcp_oauth_grant_ends (subject, ended_at DESC);
