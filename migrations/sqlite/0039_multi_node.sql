-- Multi-node jobs (#46). A job with resources.nodes > 1 runs as one
-- attempt with a member on each of its nodes: attempt_members holds every
-- rank (0 included) with the node, GPUs and state of its part; the
-- attempts row keeps rank 0's node and GPUs and the attempt's outcome, and
-- its `nodes` says the members, not the row, hold the GPUs. Rank 0's agent
-- chooses the rendezvous port (master_port) before the others start.
ALTER TABLE jobs ADD COLUMN nodes INTEGER NOT NULL DEFAULT 1;
ALTER TABLE jobs ADD COLUMN colocate TEXT;
ALTER TABLE attempts ADD COLUMN nodes INTEGER NOT NULL DEFAULT 1;
ALTER TABLE attempts ADD COLUMN master_port INTEGER;
-- Where other members reach a node's jobs: the agent's --advertise-addr,
-- else the address its hello came from.
ALTER TABLE nodes ADD COLUMN address TEXT;

CREATE TABLE attempt_members (
    job_id     TEXT NOT NULL REFERENCES jobs (id),
    attempt    INTEGER NOT NULL,
    node_rank  INTEGER NOT NULL,
    node_id    TEXT NOT NULL REFERENCES nodes (id),
    gpus       TEXT NOT NULL,                        -- JSON array of GPU indices
    status     TEXT NOT NULL CHECK (status IN
                   ('DISPATCHING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'LOST')),
    started_at INTEGER,
    ended_at   INTEGER,
    exit_code  INTEGER,
    signal     INTEGER,
    PRIMARY KEY (job_id, attempt, node_rank),
    UNIQUE (job_id, attempt, node_id)
) STRICT;
-- Members holding GPUs: what the scheduler subtracts from each node.
CREATE INDEX attempt_members_active ON attempt_members (node_id) WHERE status IN ('DISPATCHING', 'RUNNING');

-- Each member numbers its output from 1: lines are kept per rank.
CREATE TABLE log_lines_by_rank (
    id        INTEGER PRIMARY KEY,                   -- arrival order: SSE event ids
    job_id    TEXT NOT NULL,
    attempt   INTEGER NOT NULL,
    node_rank INTEGER NOT NULL DEFAULT 0,
    stream    TEXT NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    n         INTEGER NOT NULL,                      -- line number within the stream, from 1
    time      INTEGER NOT NULL,
    text      TEXT NOT NULL,
    UNIQUE (job_id, attempt, node_rank, stream, n)
) STRICT;
INSERT INTO log_lines_by_rank (id, job_id, attempt, stream, n, time, text)
    SELECT id, job_id, attempt, stream, n, time, text FROM log_lines;
DROP TABLE log_lines;
ALTER TABLE log_lines_by_rank RENAME TO log_lines;
CREATE INDEX log_lines_by_job ON log_lines (job_id, id);
