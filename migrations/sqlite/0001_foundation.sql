-- Users, API tokens and nodes: what the foundation needs.
-- Times are integer milliseconds since the Unix epoch (UTC).

CREATE TABLE users (
    id            TEXT PRIMARY KEY,            -- usr_<ulid>
    name          TEXT NOT NULL UNIQUE,
    password_hash TEXT,                        -- argon2 PHC string; NULL for SSO-only users
    is_admin      INTEGER NOT NULL DEFAULT 0 CHECK (is_admin IN (0, 1)),
    disabled_at   INTEGER,
    created_at    INTEGER NOT NULL
) STRICT;

-- Only the SHA-256 of a token is stored: the token itself is shown once.
CREATE TABLE api_tokens (
    id           TEXT PRIMARY KEY,             -- tok_<ulid>
    user_id      TEXT REFERENCES users (id),   -- NULL for agent tokens
    name         TEXT NOT NULL,
    scope        TEXT NOT NULL CHECK (scope IN ('read', 'write', 'sdk', 'agent')),
    token_hash   TEXT NOT NULL UNIQUE,         -- hex SHA-256
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER,
    revoked_at   INTEGER,
    last_used_at INTEGER,
    CHECK ((scope = 'agent') = (user_id IS NULL))
) STRICT;

CREATE INDEX api_tokens_by_user ON api_tokens (user_id);

CREATE TABLE nodes (
    id            TEXT PRIMARY KEY,            -- node_<ulid>
    name          TEXT NOT NULL UNIQUE,
    hostname      TEXT NOT NULL,
    labels        TEXT NOT NULL,               -- JSON object of strings
    agent_version TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('ONLINE', 'OFFLINE')),
    registered_at INTEGER NOT NULL,
    last_seen_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE gpus (
    node_id             TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    idx                 INTEGER NOT NULL,
    uuid                TEXT NOT NULL,
    model               TEXT NOT NULL,
    source              TEXT NOT NULL CHECK (source IN ('nvml', 'simulated')),
    memory_total_mib    INTEGER,
    memory_used_mib     INTEGER,
    utilization_percent INTEGER,
    temperature_c       INTEGER,
    PRIMARY KEY (node_id, idx)
) STRICT;
