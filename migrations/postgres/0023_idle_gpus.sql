-- Idle GPUs (#48): what a project does with jobs whose GPUs sit idle, and
-- when an attempt was reported idle (GPU_IDLE is raised once per attempt).
ALTER TABLE projects ADD COLUMN idle_action TEXT NOT NULL DEFAULT 'warn' CHECK (idle_action IN ('warn', 'stop'));
ALTER TABLE attempts ADD COLUMN idle_at BIGINT;
