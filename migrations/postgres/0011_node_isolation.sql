-- Whether a node's jobs can reach GPUs they were not given, as its agent
-- says (`cgroup: …` or `advisory: WHY`); NULL: its agent does not say.
ALTER TABLE nodes ADD COLUMN isolation TEXT;
