-- GPU and process telemetry over time. The points live in the metric chunk
-- storage under the node's id (`metric_chunks.run_id` holds a run's or a
-- node's id; they never collide), the sample time in milliseconds as the
-- step, and `metric_batches` dedups the agent's batches the same way. This
-- table lists each node's series and how far each was downsampled to one
-- mean a minute (milliseconds; points before it are minute means).
CREATE TABLE telemetry_series (
    node_id           TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    key               TEXT NOT NULL,             -- gpu0.utilization_percent, job_….1.cpu_percent
    downsampled_until INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (node_id, key)
) STRICT, WITHOUT ROWID;
