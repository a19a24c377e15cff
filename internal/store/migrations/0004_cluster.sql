-- Work shared by a cluster of nodes, kept where nothing in flight can be
-- lost: the executions table is the queue (a queued row is claimed by one
-- node in the transaction that makes it running), nodes announce
-- themselves with a heartbeat and an address, and every session has one
-- owner node, the one holding its workspace.

-- target: the node that must run a queued execution ('' any): a session's
-- executions go to the node that holds the session.
ALTER TABLE executions ADD COLUMN target TEXT NOT NULL DEFAULT '';
-- cancel: a client asked to cancel it; the running node also learns it
-- from here when the cancel signal was missed.
ALTER TABLE executions ADD COLUMN cancel INTEGER NOT NULL DEFAULT 0;
-- What a node runs, and what waits for it.
CREATE INDEX executions_node ON executions (node, status);
CREATE INDEX executions_target ON executions (target, status);

CREATE TABLE nodes (
    id         TEXT   NOT NULL PRIMARY KEY,
    address    TEXT   NOT NULL,
    started_at BIGINT NOT NULL,
    seen_at    BIGINT NOT NULL
);

CREATE TABLE sessions (
    tenant     TEXT   NOT NULL,
    id         TEXT   NOT NULL,
    node       TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX sessions_node ON sessions (node);
