-- Quotas: at most this many GPUs / running jobs at once for one project or
-- one user. Over-quota jobs wait in the queue; nothing is refused.
CREATE TABLE quotas (
    kind              TEXT NOT NULL CHECK (kind IN ('project', 'user')),
    subject           TEXT NOT NULL,   -- the project's name, or the user's id
    max_gpus          INTEGER CHECK (max_gpus >= 0),
    max_running_jobs  INTEGER CHECK (max_running_jobs >= 0),
    updated_at        INTEGER NOT NULL,
    updated_by        TEXT,            -- the admin's user name
    PRIMARY KEY (kind, subject)
) STRICT;
