-- The commit an attempt's working directory was checked out at (read by the agent).
ALTER TABLE attempts ADD COLUMN git_commit TEXT;
