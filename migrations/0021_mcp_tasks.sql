-- MCP tasks (issue 48): a sync_wait a client that declares the tasks
-- extension asked for runs beside the model, and the client polls for its
-- end. Tasks live here, not in a process, so that any syncd process
-- answers a poll and a task outlives the process that ran it: a process
-- holds a lease while its wait runs, and a poll that finds the lease run
-- out starts the wait again. A task belongs to the room it waits in
-- (distributed with it on Citus) and to the grant that made it; only a
-- hash of its id is kept, so that the table does not hold what a poll
-- presents as proof. No foreign key to rooms: on a Citus cluster already
-- distributed, a new table may not refer to one (rooms); a task of a room
-- deleted is purged with the others when it expires, within the hour.
CREATE TABLE mcp_tasks (
    room_id     text        NOT NULL,
    task_key    text        NOT NULL, -- hex SHA-256 of the task id
    grant_id    text        NOT NULL,
    tool        text        NOT NULL,
    arguments   jsonb       NOT NULL,
    status      text        NOT NULL DEFAULT 'working'
                CHECK (status IN ('working', 'completed', 'failed', 'cancelled')),
    result      jsonb,
    lease_until timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (room_id, task_key)
);
CREATE INDEX mcp_tasks_key ON mcp_tasks (task_key);
CREATE INDEX mcp_tasks_open ON mcp_tasks (grant_id) WHERE status = 'working';
CREATE INDEX mcp_tasks_expiry ON mcp_tasks (expires_at);
