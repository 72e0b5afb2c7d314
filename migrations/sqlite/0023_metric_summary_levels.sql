-- Metric chunks get two coarser summary levels, so that a downsampled query
-- reads a few summaries per bucket however long the series is: `summary`
-- holds sub-buckets of 128 points (64 in chunks written before this),
-- `summary_mid` of 1,024 and `summary_coarse` of 8,192 (see
-- server/src/metrics/chunk.rs). Compaction merges full chunks into chunks of
-- up to 131,072 points, so a long series has few rows.
--
-- The table is rebuilt because SQLite reads a row's columns in order: the
-- coarse summaries must come before the finer ones and the points, or reading
-- them would walk the points' overflow pages. Chunks from before keep empty
-- coarse levels; readers fall back to the finer ones.

CREATE TABLE metric_chunks_new (
    id             INTEGER PRIMARY KEY,
    run_id         TEXT NOT NULL,
    key            TEXT NOT NULL,
    step_min       INTEGER NOT NULL,
    step_max       INTEGER NOT NULL,
    time_min       REAL NOT NULL,
    time_max       REAL NOT NULL,
    count          INTEGER NOT NULL,
    summary_coarse BLOB NOT NULL DEFAULT x'',
    summary_mid    BLOB NOT NULL DEFAULT x'',
    summary        BLOB NOT NULL,
    points         BLOB NOT NULL                     -- compressed, or raw: see server/src/metrics/chunk.rs
) STRICT;

INSERT INTO metric_chunks_new (id, run_id, key, step_min, step_max, time_min, time_max, count, summary, points)
SELECT id, run_id, key, step_min, step_max, time_min, time_max, count, summary, points FROM metric_chunks;

DROP TABLE metric_chunks;
ALTER TABLE metric_chunks_new RENAME TO metric_chunks;
-- The index holds what a query needs to plan (ranges and counts), so that
-- planning reads no rows.
CREATE INDEX metric_chunks_by_series ON metric_chunks (run_id, key, step_min, step_max, time_min, time_max, count);
