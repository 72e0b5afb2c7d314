-- A held job stays QUEUED but is not scheduled until it is released.
ALTER TABLE jobs ADD COLUMN held_by TEXT;
ALTER TABLE jobs ADD COLUMN held_at INTEGER;
