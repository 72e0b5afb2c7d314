-- What the MLflow tracking API (/api/2.0/mlflow/) keeps of a run beside
-- ours: the status and times the mlflow client reports (FAILED and KILLED
-- runs are finished runs to us), and its tags, key → value, the client's
-- own `mlflow.*` tags included (the user's tags are also the run's tags).
CREATE TABLE mlflow_runs (
    run_id     TEXT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    status     TEXT NOT NULL CHECK (status IN ('RUNNING', 'SCHEDULED', 'FINISHED', 'FAILED', 'KILLED')),
    started_at BIGINT NOT NULL,
    ended_at   BIGINT
);

CREATE TABLE mlflow_run_tags (
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
);
