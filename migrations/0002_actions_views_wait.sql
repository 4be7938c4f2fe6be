-- Actions, views and cooldowns live in the state table under the reserved
-- scopes _actions, _views and _cooldowns, so they share its single write
-- path, versions, timers and audit.

-- Live count of the _messages log, kept by every mutation, so a context
-- read does not count the whole log.
ALTER TABLE rooms ADD COLUMN message_count bigint NOT NULL DEFAULT 0;

-- Logical timers: a write to <scope>.<key> ticks every entry whose
-- timer_tick_on names it.
CREATE INDEX state_tick_on ON state (room_id, timer_tick_on) WHERE timer_tick_on IS NOT NULL;
