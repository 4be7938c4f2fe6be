-- Adaptive salience (seed 000): what each agent last read, and how the
-- room's vocabulary is used.

-- The room seq of an agent's last context read (since_your_last_read) and
-- how many context reads it made (first-read enrichment; the clock of
-- salience decay is the room's total).
ALTER TABLE agents ADD COLUMN last_context_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN context_reads bigint NOT NULL DEFAULT 0;

-- Use of each action and view: invocations (an action's, or of actions
-- whose expressions read the view) and a reinforcement score that decays
-- with the room's context reads. The score is stored as it was at the
-- last use (score, reads_at_use) and decayed when read, so reads write
-- nothing here.
CREATE TABLE vocabulary_usage (
    room_id       text NOT NULL REFERENCES rooms (id) ON DELETE CASCADE,
    kind          text NOT NULL CHECK (kind IN ('action', 'view')),
    id            text NOT NULL,
    uses          bigint NOT NULL DEFAULT 0,
    last_used_seq bigint,
    last_used_at  timestamptz,
    score         double precision NOT NULL DEFAULT 1,
    reads_at_use  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (room_id, kind, id)
);
