-- The jobs a job waits for (its spec's `after`, a JSON array of `job_…` or
-- `job_…:finished`); NULL when none, so the scheduler reads it cheaply.
ALTER TABLE jobs ADD COLUMN after_jobs TEXT;
