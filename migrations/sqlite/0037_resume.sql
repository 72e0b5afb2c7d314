-- Resume (#46). When a job goes back to the queue (preempted, or retried
-- after a transient failure) it records where its next attempt picks up:
-- the run's latest checkpoint, copied onto that attempt when it is placed
-- (GPUCTL_RESUME_FROM / GPUCTL_RESUME_STEP), preferably on the host that
-- recorded it. The points and texts earlier
-- attempts logged past that step are moved aside, not deleted, so the run
-- continues as one curve without duplicate steps and nothing acknowledged
-- is lost.
ALTER TABLE jobs ADD COLUMN resume_path TEXT;
ALTER TABLE jobs ADD COLUMN resume_step INTEGER;
ALTER TABLE jobs ADD COLUMN resume_node TEXT;                 -- the host that recorded it: preferred
ALTER TABLE attempts ADD COLUMN resume_path TEXT;      -- NULL on a first attempt; '' when no checkpoint
ALTER TABLE attempts ADD COLUMN resume_step INTEGER;

-- A run's points past a resumed step, as chunk blobs (server/src/metrics/chunk.rs).
CREATE TABLE metric_points_rewound (
    id       INTEGER PRIMARY KEY,
    run_id   TEXT NOT NULL,
    key      TEXT NOT NULL,
    attempt  INTEGER NOT NULL,                           -- the attempt whose end set them aside
    step_min INTEGER NOT NULL,
    step_max INTEGER NOT NULL,
    count    INTEGER NOT NULL,
    points   BLOB NOT NULL
) STRICT;
CREATE INDEX metric_points_rewound_by_run ON metric_points_rewound (run_id, key);

CREATE TABLE run_texts_rewound (
    id        INTEGER PRIMARY KEY,
    run_id    TEXT NOT NULL REFERENCES runs (id),
    attempt   INTEGER NOT NULL,
    key       TEXT NOT NULL,
    step      INTEGER NOT NULL,
    wall_time REAL NOT NULL,
    text      TEXT NOT NULL
) STRICT;
CREATE INDEX run_texts_rewound_by_run ON run_texts_rewound (run_id);
