-- As SQLite's 0025_mcp_sessions.sql: MCP sessions any replica can go on with.
CREATE TABLE mcp_sessions (
    id_hash    TEXT PRIMARY KEY,
    state      TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
