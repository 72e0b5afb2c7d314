-- Operations (#48): tokens of scope `metrics` may only scrape `GET /metrics`.
-- SQLite cannot change a CHECK in place: the table is rebuilt, row for row.
CREATE TABLE api_tokens_with_metrics (
    id           TEXT PRIMARY KEY,             -- tok_<ulid>
    user_id      TEXT REFERENCES users (id),   -- NULL for agent tokens
    name         TEXT NOT NULL,
    scope        TEXT NOT NULL CHECK (scope IN ('read', 'write', 'sdk', 'agent', 'metrics')),
    token_hash   TEXT NOT NULL UNIQUE,         -- hex SHA-256
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER,
    revoked_at   INTEGER,
    last_used_at INTEGER,
    run_id       TEXT,
    project      TEXT REFERENCES projects (name),
    node_name    TEXT,
    CHECK ((scope = 'agent') = (user_id IS NULL))
) STRICT;
INSERT INTO api_tokens_with_metrics
    (id, user_id, name, scope, token_hash, created_at, expires_at, revoked_at, last_used_at, run_id, project, node_name)
    SELECT id, user_id, name, scope, token_hash, created_at, expires_at, revoked_at, last_used_at, run_id, project, node_name
    FROM api_tokens;
DROP TABLE api_tokens;
ALTER TABLE api_tokens_with_metrics RENAME TO api_tokens;
CREATE INDEX api_tokens_by_user ON api_tokens (user_id);
CREATE INDEX api_tokens_by_node ON api_tokens (node_name) WHERE node_name IS NOT NULL;
