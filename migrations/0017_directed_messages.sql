-- Directed messages (issue 43): a reader's directed_unread and the
-- messages addressed to it, first in a wake-up, are read through this
-- index, whatever the backlog of other unread messages: counting them
-- among the oldest thousand unread missed one addressed to a reader with
-- a thousand or more.
CREATE INDEX state_directed ON state (room_id, sort_key) WHERE scope = '_messages' AND value ? 'to';
