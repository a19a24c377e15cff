-- The first schema: executions with the columns the query API filters and
-- sorts on, and the deliveries the notifier claims. Portable SQL: it runs
-- unchanged on SQLite and PostgreSQL. Times are BIGINT unix microseconds
-- (UTC); JSON is TEXT.

CREATE TABLE executions (
    tenant       TEXT    NOT NULL,
    id           TEXT    NOT NULL,
    request_hash TEXT    NOT NULL,
    request      TEXT    NOT NULL,
    record       TEXT    NOT NULL,
    node         TEXT    NOT NULL,
    -- Derived from record, for Query.
    session_id   TEXT    NOT NULL,
    language     TEXT    NOT NULL,
    status       TEXT    NOT NULL,
    error_type   TEXT    NOT NULL,
    exit_code    INTEGER,
    duration_ms  BIGINT  NOT NULL,
    created_at   BIGINT  NOT NULL,
    finished_at  BIGINT  NOT NULL,
    PRIMARY KEY (tenant, id)
);

-- Keyset paging orders by (sort key, id), so id ends the paging indexes.
CREATE INDEX executions_tenant_created ON executions (tenant, created_at, id);
CREATE INDEX executions_tenant_session ON executions (tenant, session_id, created_at, id);
CREATE INDEX executions_tenant_status ON executions (tenant, status);
CREATE INDEX executions_tenant_error ON executions (tenant, error_type);
CREATE INDEX executions_tenant_language ON executions (tenant, language);
CREATE INDEX executions_tenant_duration ON executions (tenant, duration_ms, id);
-- Recovery: queued work of every tenant, oldest first.
CREATE INDEX executions_status_created ON executions (status, created_at);

CREATE TABLE deliveries (
    id           TEXT    NOT NULL PRIMARY KEY,
    tenant       TEXT    NOT NULL,
    execution_id TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    url          TEXT    NOT NULL,
    body         TEXT    NOT NULL,
    state        TEXT    NOT NULL,
    attempts     INTEGER NOT NULL,
    next_attempt BIGINT  NOT NULL,
    lease_until  BIGINT  NOT NULL,
    last_status  INTEGER NOT NULL,
    last_error   TEXT    NOT NULL,
    created_at   BIGINT  NOT NULL,
    updated_at   BIGINT  NOT NULL
);

CREATE INDEX deliveries_due ON deliveries (state, next_attempt);
CREATE INDEX deliveries_execution ON deliveries (tenant, execution_id, created_at);
