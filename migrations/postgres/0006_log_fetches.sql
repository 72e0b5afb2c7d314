-- As SQLite's 0026_log_fetches.sql: full-log fetches relayed between replicas.
CREATE TABLE log_fetches (
    request_id TEXT PRIMARY KEY,
    node_id    TEXT NOT NULL REFERENCES nodes (id),
    node_name  TEXT NOT NULL,
    command    TEXT NOT NULL,
    claimed_at BIGINT,
    created_at BIGINT NOT NULL
);

CREATE TABLE log_fetch_parts (
    request_id TEXT NOT NULL REFERENCES log_fetches (request_id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL,
    data       BYTEA NOT NULL,
    PRIMARY KEY (request_id, seq)
);
