-- The attempt folders agents must remove: a deleted run's job left them on
-- these nodes. A row goes once the node's agent says it removed them.
CREATE TABLE attempt_cleanups (
    node_id      TEXT NOT NULL,
    job_id       TEXT NOT NULL,
    requested_at BIGINT NOT NULL,
    PRIMARY KEY (node_id, job_id)
);
