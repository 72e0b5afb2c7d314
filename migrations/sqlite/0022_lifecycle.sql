-- Archived runs (and their jobs) leave the default lists; archived runs can
-- be deleted after archived_run_retention_days.
ALTER TABLE runs ADD COLUMN archived_at INTEGER;
ALTER TABLE runs ADD COLUMN archived_by TEXT;
ALTER TABLE jobs ADD COLUMN archived_at INTEGER;

CREATE INDEX runs_archived ON runs (archived_at) WHERE archived_at IS NOT NULL;
