-- Audit trail (internal/audit): each tenant's events, numbered from 1 and
-- chained by hash, and each tenant's head (its last number and hash, and
-- the last number retention deleted), locked by the transaction that
-- appends so that nodes writing for one tenant take turns.

CREATE TABLE audit_events (
    tenant       TEXT   NOT NULL,
    seq          BIGINT NOT NULL,
    at           BIGINT NOT NULL,
    key_id       TEXT   NOT NULL,
    node         TEXT   NOT NULL,
    sandbox_id   TEXT   NOT NULL,
    execution_id TEXT   NOT NULL,
    action       TEXT   NOT NULL,
    outcome      TEXT   NOT NULL,
    error        TEXT   NOT NULL,
    fields       TEXT   NOT NULL,
    prev_hash    TEXT   NOT NULL,
    hash         TEXT   NOT NULL,
    PRIMARY KEY (tenant, seq)
);
CREATE INDEX audit_events_sandbox ON audit_events (tenant, sandbox_id, seq);
CREATE INDEX audit_events_at ON audit_events (tenant, at);

CREATE TABLE audit_heads (
    tenant TEXT   NOT NULL PRIMARY KEY,
    seq    BIGINT NOT NULL,
    hash   TEXT   NOT NULL,
    pruned BIGINT NOT NULL
);
