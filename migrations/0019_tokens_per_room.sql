-- Ready for Citus (issue 46): a distributed table's unique keys must
-- include its distribution column, the room, and rooms' and agents' token
-- hashes were unique across all rooms. A token is looked up with its room
-- where the request names one (one shard), without it only on the
-- failure path and for requests that name no room (every shard, through
-- these indexes). Tokens are 256 random bits, so a hash shared by two
-- rooms is not a case to guard against; within a room an agent's token
-- hash stays unique, which lookups by room and token rely on.
ALTER TABLE rooms DROP CONSTRAINT rooms_token_hash_key;
ALTER TABLE rooms DROP CONSTRAINT rooms_view_token_hash_key;
CREATE INDEX rooms_token_hash ON rooms (token_hash);
CREATE INDEX rooms_view_token_hash ON rooms (view_token_hash);

ALTER TABLE agents DROP CONSTRAINT agents_token_hash_key;
-- The token leads: it serves the lookup without a room as well.
ALTER TABLE agents ADD CONSTRAINT agents_token_hash_room_key UNIQUE (token_hash, room_id);
