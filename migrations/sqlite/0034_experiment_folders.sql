-- The experiment folder shipped with a job (`gpuctl job submit --exp DIR`):
-- its files as JSON (`[{path, executable, content}]`, content in base64,
-- 4 MiB at most), sent to the agent with each dispatch of the job, which
-- writes them into the job's folder (GPUCTL_EXP_DIR). Gone with the job.
CREATE TABLE experiment_folders (
    job_id TEXT PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    files  TEXT NOT NULL
);
