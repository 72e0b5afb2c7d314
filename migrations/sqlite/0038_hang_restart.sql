-- JOB_HUNG with `on_hang = "restart"` (#46): when the hang monitor stopped
-- the attempt; its end is then a HUNG failure, retried from the last checkpoint.
ALTER TABLE attempts ADD COLUMN hung_at INTEGER;
