-- A live sandbox's description (JSON, the answer of GET /v1/sandboxes/{id},
-- metadata included), published by the node that holds it so that every node
-- lists every node's sandboxes; '' for a session that is not a live sandbox.
ALTER TABLE sessions ADD COLUMN info TEXT NOT NULL DEFAULT '';
