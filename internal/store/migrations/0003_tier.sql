-- The tier that ran an execution, derived from the record like the other
-- query columns, so that the overview (GET /v1/stats) counts tiers without
-- decoding records. Rows stored before this migration hold '' until they
-- are next updated.

ALTER TABLE executions ADD COLUMN tier TEXT NOT NULL DEFAULT '';
