-- Full-log fetches relayed between replicas (server/src/nodes/log_relay.rs):
-- the replica a user asked writes the agent's command here, the replica the
-- agent polls hands it over, and the one the agent uploads to writes the
-- file here in parts for the asking one to stream. Rows live seconds; a
-- single server (and SQLite) relays in memory and leaves these empty.
CREATE TABLE log_fetches (
    request_id TEXT PRIMARY KEY,                    -- fetch_<ulid>
    node_id    TEXT NOT NULL REFERENCES nodes (id),
    node_name  TEXT NOT NULL,
    command    TEXT NOT NULL,                       -- JSON: the agent's fetch_log command
    claimed_at INTEGER,                             -- ms: handed to the agent
    created_at INTEGER NOT NULL
);

CREATE TABLE log_fetch_parts (
    request_id TEXT NOT NULL REFERENCES log_fetches (request_id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    data       BLOB NOT NULL,                       -- empty: the end of the file
    PRIMARY KEY (request_id, seq)
);
