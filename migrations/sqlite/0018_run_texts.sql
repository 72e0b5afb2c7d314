-- Texts a run logs at a step (generated samples, prompts), sent in metric
-- batches beside the points and idempotent with them by batch id.
CREATE TABLE run_texts (
    id        INTEGER PRIMARY KEY,   -- arrival order; the list's cursor
    run_id    TEXT NOT NULL REFERENCES runs (id),
    key       TEXT NOT NULL,
    step      INTEGER NOT NULL,
    wall_time REAL NOT NULL,
    text      TEXT NOT NULL
) STRICT;

-- The page's order: highest step first, the latest logged first (rowid).
CREATE INDEX run_texts_by_step ON run_texts (run_id, step);
