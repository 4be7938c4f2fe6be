-- Threads (issue 31): a thread's messages are its first message and those
-- whose value names it in "thread"; reading one thread whole reads this
-- index, not the room's log.
CREATE INDEX state_thread ON state (room_id, (value->>'thread'), sort_key) WHERE scope = '_messages';

-- The search index is written in place by each write (no pending list):
-- with the pending list, the write that overflows it merges the whole
-- list into the index while it holds its room's lock, a tail of tens of
-- milliseconds (BenchmarkSearchWriteCost's p99).
ALTER INDEX state_search SET (fastupdate = off);
