-- Threads (issue 31): a thread's messages are its first message and those
-- whose value names it in "thread"; reading one thread whole reads this
-- index, not the room's log.
CREATE INDEX state_thread ON state (room_id, (value->>'thread'), sort_key) WHERE scope = '_messages';
