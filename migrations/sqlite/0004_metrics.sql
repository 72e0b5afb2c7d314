-- Metrics: points are stored in chunks (up to 4096 points of one key, sorted
-- by step), each with a summary of 64-point sub-buckets, so that ingest does
-- not pay a B-tree insert per point and wide chart queries read summaries.

CREATE TABLE metric_series (
    run_id           TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key              TEXT NOT NULL,
    points           INTEGER NOT NULL,
    non_finite       INTEGER NOT NULL,
    latest_step      INTEGER NOT NULL,
    latest_wall      REAL NOT NULL,
    latest_bits      INTEGER NOT NULL,               -- f64 bits: NaN and ±Inf exactly
    first_non_finite_step INTEGER,
    loss_nan_reported INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, key)
) STRICT, WITHOUT ROWID;

CREATE TABLE metric_chunks (
    id        INTEGER PRIMARY KEY,
    run_id    TEXT NOT NULL,
    key       TEXT NOT NULL,
    step_min  INTEGER NOT NULL,
    step_max  INTEGER NOT NULL,
    time_min  REAL NOT NULL,
    time_max  REAL NOT NULL,
    count     INTEGER NOT NULL,
    -- The small summary comes before the large points: SQLite reads a record's
    -- columns in order, so a summary after the points would cost reading them.
    summary   BLOB NOT NULL,                         -- sub-buckets, see server/src/metrics/chunk.rs
    points    BLOB NOT NULL                          -- count x (i64 step, f64 wall, f64 value), little-endian
) STRICT;

CREATE INDEX metric_chunks_by_series ON metric_chunks (run_id, key, step_min);

-- Acknowledged batches: a batch id seen again for the run adds nothing.
CREATE TABLE metric_batches (
    run_id      TEXT NOT NULL,
    batch_id    TEXT NOT NULL,
    points      INTEGER NOT NULL,
    received_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, batch_id)
) STRICT, WITHOUT ROWID;

-- Runs made by the SDK outside jobs have no job; they finish on their own.
ALTER TABLE runs ADD COLUMN finished_at INTEGER;
ALTER TABLE runs ADD COLUMN created_by TEXT REFERENCES users (id);

-- Checkpoint files found in jobs' watch dirs. A path written by more than
-- one run is "shared" (computed when read): evaluations refuse it.
CREATE TABLE checkpoints (
    id          TEXT PRIMARY KEY,                    -- ckpt_<ulid>
    run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    node_id     TEXT,
    path        TEXT NOT NULL,
    size        INTEGER NOT NULL,
    modified_at INTEGER NOT NULL,
    step        INTEGER,
    recorded_at INTEGER NOT NULL,
    UNIQUE (run_id, path)
) STRICT;

CREATE INDEX checkpoints_by_path ON checkpoints (path);
