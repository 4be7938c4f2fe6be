-- Seed 001 §State schema: `enabled` is universal, agents included. An
-- agent's enabled expression gates its presence: while it is false for a
-- reader, that reader's context, CEL `agents` and GET /agents do not show
-- the agent. NULL: always shown.
ALTER TABLE agents ADD COLUMN enabled_expr text;
