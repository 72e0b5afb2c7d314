-- Evaluations: an EVALUATE job on a checkpoint of another run. Its result
-- becomes eval/ metrics of that run at `step`.
CREATE TABLE evaluations (
    job_id     TEXT PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    checkpoint TEXT NOT NULL,
    step       INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    metrics    TEXT                                  -- JSON {name: value} once recorded
) STRICT;

CREATE INDEX evaluations_by_run ON evaluations (run_id);
