-- Egress audit: every connection a sandbox asked its proxy for, allowed or
-- refused, with the bytes each way.

CREATE TABLE egress (
    tenant       TEXT    NOT NULL,
    execution_id TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    at           BIGINT  NOT NULL,
    method       TEXT    NOT NULL,
    host         TEXT    NOT NULL,
    port         INTEGER NOT NULL,
    allowed      INTEGER NOT NULL,
    reason       TEXT    NOT NULL,
    address      TEXT    NOT NULL,
    status       INTEGER NOT NULL,
    bytes_up     BIGINT  NOT NULL,
    bytes_down   BIGINT  NOT NULL,
    PRIMARY KEY (tenant, execution_id, seq)
);
