-- Jobs, their attempts and runs, kept output lines, and events.

CREATE TABLE projects (
    name       TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL
) STRICT;

INSERT INTO projects (name, created_at) VALUES ('default', 0);

CREATE TABLE jobs (
    seq               INTEGER PRIMARY KEY,           -- list cursor (`before`), creation order
    id                TEXT NOT NULL UNIQUE,          -- job_<ulid>
    project           TEXT NOT NULL REFERENCES projects (name),
    name              TEXT NOT NULL,
    kind              TEXT NOT NULL CHECK (kind IN ('TRAIN', 'EVALUATE')),
    spec              TEXT NOT NULL,                 -- JSON JobSpec as submitted (validated)
    gpus              INTEGER NOT NULL CHECK (gpus >= 0),
    node_selector     TEXT NOT NULL,                 -- JSON object, for the scheduler
    priority          INTEGER NOT NULL,
    max_attempts      INTEGER NOT NULL CHECK (max_attempts >= 1),
    status            TEXT NOT NULL CHECK (status IN
                        ('QUEUED', 'DISPATCHING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'LOST')),
    failure_reason    TEXT,
    failure_detail    TEXT,
    queued_reason     TEXT,
    queued_at         INTEGER NOT NULL,              -- FIFO order within a priority
    not_before        INTEGER,                       -- automatic retry cooldown
    attempt_count     INTEGER NOT NULL DEFAULT 0,
    cancel_requested_at INTEGER,
    run_id            TEXT NOT NULL,
    submitted_by      TEXT REFERENCES users (id),
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
) STRICT;

CREATE INDEX jobs_queued ON jobs (priority DESC, queued_at, seq) WHERE status = 'QUEUED';
CREATE INDEX jobs_by_status ON jobs (status, seq);

CREATE TABLE attempts (
    job_id          TEXT NOT NULL REFERENCES jobs (id),
    n               INTEGER NOT NULL,
    node_id         TEXT NOT NULL REFERENCES nodes (id),
    gpus            TEXT NOT NULL,                   -- JSON array of GPU indices
    status          TEXT NOT NULL CHECK (status IN
                        ('DISPATCHING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'LOST')),
    dispatched_at   INTEGER NOT NULL,
    started_at      INTEGER,
    ended_at        INTEGER,
    exit_code       INTEGER,
    signal          INTEGER,
    failure_reason  TEXT,
    failure_detail  TEXT,
    pid             INTEGER,
    disk_low_reported INTEGER NOT NULL DEFAULT 0,
    sdk_token_id    TEXT,                            -- revoked when the attempt ends
    PRIMARY KEY (job_id, n)
) STRICT;

-- Attempts holding GPUs: what the scheduler subtracts from each node.
CREATE INDEX attempts_active ON attempts (node_id) WHERE status IN ('DISPATCHING', 'RUNNING');

CREATE TABLE runs (
    id         TEXT PRIMARY KEY,                     -- run_<ulid>
    job_id     TEXT UNIQUE REFERENCES jobs (id),     -- NULL for runs made by the SDK outside jobs
    project    TEXT NOT NULL REFERENCES projects (name),
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

-- The newest lines of each stream of each attempt (the agent has the full files).
CREATE TABLE log_lines (
    id      INTEGER PRIMARY KEY,                     -- arrival order: SSE event ids
    job_id  TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    stream  TEXT NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    n       INTEGER NOT NULL,                        -- line number within the stream, from 1
    time    INTEGER NOT NULL,
    text    TEXT NOT NULL,
    UNIQUE (job_id, attempt, stream, n)
) STRICT;

CREATE INDEX log_lines_by_job ON log_lines (job_id, id);

CREATE TABLE events (
    seq      INTEGER PRIMARY KEY,                    -- list cursor and SSE event id
    id       TEXT NOT NULL UNIQUE,                   -- evt_<ulid>
    time     INTEGER NOT NULL,
    severity TEXT NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
    kind     TEXT NOT NULL,
    job_id   TEXT,
    run_id   TEXT,
    node_id  TEXT,
    message  TEXT NOT NULL
) STRICT;

CREATE INDEX events_by_run ON events (run_id, seq);
CREATE INDEX events_by_job ON events (job_id, seq);

-- Per-job sdk tokens are limited to the job's run.
ALTER TABLE api_tokens ADD COLUMN run_id TEXT;
