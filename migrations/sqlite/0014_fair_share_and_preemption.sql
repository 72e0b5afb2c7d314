-- Preemption: the scheduler marks a running attempt to stop for a
-- higher-priority job; its agent gets a cancel with the preemption grace,
-- and when it ends the job is queued again without spending an attempt.
ALTER TABLE attempts ADD COLUMN preempted_at INTEGER;
ALTER TABLE attempts ADD COLUMN preempted_by TEXT;

-- Fair share reads the GPU time of attempts that ended inside its window.
CREATE INDEX attempts_ended ON attempts (ended_at) WHERE ended_at IS NOT NULL;
