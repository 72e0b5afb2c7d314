-- Multi-node jobs (#46). A job with resources.nodes > 1 runs as one
-- attempt with a member on each of its nodes: attempt_members holds every
-- rank (0 included) with the node, GPUs and state of its part; the
-- attempts row keeps rank 0's node and GPUs and the attempt's outcome, and
-- its `nodes` says the members, not the row, hold the GPUs. Rank 0's agent
-- chooses the rendezvous port (master_port) before the others start.
ALTER TABLE jobs ADD COLUMN nodes BIGINT NOT NULL DEFAULT 1;
ALTER TABLE jobs ADD COLUMN colocate TEXT;
ALTER TABLE attempts ADD COLUMN nodes BIGINT NOT NULL DEFAULT 1;
ALTER TABLE attempts ADD COLUMN master_port BIGINT;
-- Where other members reach a node's jobs: the agent's --advertise-addr,
-- else the address its hello came from.
ALTER TABLE nodes ADD COLUMN address TEXT;

CREATE TABLE attempt_members (
    job_id     TEXT NOT NULL REFERENCES jobs (id),
    attempt    BIGINT NOT NULL,
    node_rank  BIGINT NOT NULL,
    node_id    TEXT NOT NULL REFERENCES nodes (id),
    gpus       TEXT NOT NULL,                        -- JSON array of GPU indices
    status     TEXT NOT NULL CHECK (status IN
                   ('DISPATCHING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'LOST')),
    started_at BIGINT,
    ended_at   BIGINT,
    exit_code  BIGINT,
    signal     BIGINT,
    PRIMARY KEY (job_id, attempt, node_rank),
    UNIQUE (job_id, attempt, node_id)
);
-- Members holding GPUs: what the scheduler subtracts from each node.
CREATE INDEX attempt_members_active ON attempt_members (node_id) WHERE status IN ('DISPATCHING', 'RUNNING');

-- Each member numbers its output from 1: lines are kept per rank.
ALTER TABLE log_lines ADD COLUMN node_rank BIGINT NOT NULL DEFAULT 0;
ALTER TABLE log_lines DROP CONSTRAINT log_lines_job_id_attempt_stream_n_key;
ALTER TABLE log_lines ADD CONSTRAINT log_lines_by_rank_key UNIQUE (job_id, attempt, node_rank, stream, n);
