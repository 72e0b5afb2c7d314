-- Sweeps (#47): a search whose trials are ordinary jobs. `spec` is the file
-- as submitted; each trial keeps its parameters and the values it recorded
-- at each rung (`rungs`, a JSON array) up to the step last judged, so a
-- server that restarts judges and proposes as the first would have.
CREATE TABLE sweeps (
    seq           INTEGER PRIMARY KEY,               -- list cursor, creation order
    id            TEXT NOT NULL UNIQUE,
    project       TEXT NOT NULL,
    name          TEXT NOT NULL,
    spec          TEXT NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('RUNNING', 'PAUSED', 'FINISHED', 'STOPPED', 'FAILED')),
    reason        TEXT,
    seed          INTEGER NOT NULL,
    auto_min_step INTEGER,
    created_by    TEXT,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    ended_at      INTEGER
) STRICT;
CREATE INDEX sweeps_by_project ON sweeps (project, seq);
CREATE INDEX sweeps_open ON sweeps (state) WHERE state IN ('RUNNING', 'PAUSED');
CREATE TABLE sweep_trials (
    sweep_id  TEXT NOT NULL REFERENCES sweeps (id),
    number    INTEGER NOT NULL,
    job_id    TEXT NOT NULL UNIQUE REFERENCES jobs (id),
    params    TEXT NOT NULL,
    rungs     TEXT NOT NULL DEFAULT '[]',
    last_step INTEGER,
    value     REAL,
    -- The step its early stop was decided at: its job is cancelled (again,
    -- after a restart) until it has ended.
    pruned_step INTEGER,
    PRIMARY KEY (sweep_id, number)
) STRICT;
-- Why a requested cancellation ends the job, when not a user's cancel
-- (SWEEP_PRUNED): its failure reason and detail once it has stopped.
ALTER TABLE jobs ADD COLUMN cancel_reason TEXT;
ALTER TABLE jobs ADD COLUMN cancel_detail TEXT;
