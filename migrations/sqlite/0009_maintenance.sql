-- Maintenance mode: while this one row exists, nothing new is dispatched
-- (running jobs continue) and every queued job says why it waits.
CREATE TABLE maintenance (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    message TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    started_by TEXT
) STRICT;
