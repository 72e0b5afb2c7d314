-- Node policies (server admins set them): which nodes a project's jobs may
-- run on (labels) and through which runners. NULL: nodes no policy
-- reserves, the process runner.
ALTER TABLE projects ADD COLUMN node_policy TEXT;
ALTER TABLE projects ADD COLUMN node_policy_set_at BIGINT;
ALTER TABLE projects ADD COLUMN node_policy_set_by TEXT;
-- The runners a node's agent offers (JSON array); NULL: its agent does not
-- say, and the node gets no jobs.
ALTER TABLE nodes ADD COLUMN runners TEXT;
-- A job's runner, read by every scheduling pass (its spec has it too).
ALTER TABLE jobs ADD COLUMN runner TEXT NOT NULL DEFAULT 'process';
UPDATE jobs SET runner = CAST(spec AS JSONB) ->> 'runner'
 WHERE CAST(spec AS JSONB) ->> 'runner' IN ('docker', 'slurm');
