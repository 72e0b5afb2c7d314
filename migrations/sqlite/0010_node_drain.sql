-- A drained node takes no new jobs; its running jobs finish (DRAINING, then DRAINED).
ALTER TABLE nodes ADD COLUMN drained_at INTEGER;
ALTER TABLE nodes ADD COLUMN drained_by TEXT;
