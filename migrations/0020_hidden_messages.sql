-- Hidden messages (a message with an enabled expression or a timer) are
-- read at each context read (substrate's sqlHiddenMessages). Through
-- state_scope_sort that read walked the room's whole message history,
-- and on Citus, where a busy room is a large part of its shard, the
-- planner took a scan of the shard instead (issue 46). Hidden messages
-- are few: this index holds only them.
CREATE INDEX state_hidden ON state (room_id, sort_key)
    WHERE scope = '_messages' AND sort_key IS NOT NULL AND (enabled_expr IS NOT NULL OR timer_effect IS NOT NULL);
