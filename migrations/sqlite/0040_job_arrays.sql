-- Job arrays (#47): one submission makes a task per index, each an
-- ordinary job carrying the array's id and its index. `max_running` is
-- the `%` limit the scheduler keeps to; `indices` the field as submitted.
CREATE TABLE job_arrays (
    id           TEXT PRIMARY KEY,
    project      TEXT NOT NULL,
    name         TEXT NOT NULL,
    indices      TEXT NOT NULL,
    tasks        INTEGER NOT NULL,
    max_running  INTEGER,
    submitted_by TEXT,
    created_at   INTEGER NOT NULL
) STRICT;
ALTER TABLE jobs ADD COLUMN array_id TEXT REFERENCES job_arrays (id);
ALTER TABLE jobs ADD COLUMN array_index INTEGER;
CREATE INDEX jobs_by_array ON jobs (array_id, array_index) WHERE array_id IS NOT NULL;
