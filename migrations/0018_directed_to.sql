-- Directed messages by recipient (issue 43): state_directed reads every
-- directed message after a reader's last read to find those to it, so a
-- flood of messages to one agent made every other agent's read scan the
-- flood (50,000 to one agent: another's context read 16 ms → 243 ms).
-- This index finds a reader's own ((value->'to') ? agent) whatever the
-- others'.
CREATE INDEX state_directed_to ON state USING gin ((value->'to')) WHERE scope = '_messages' AND value ? 'to';
