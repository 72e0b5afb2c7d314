-- MCP sessions (server/src/mcp/sessions.rs): the client's `initialize`
-- parameters, so that any replica, or the server after a restart, can go on
-- with a session another one began. Only a hash of the session id is kept.
CREATE TABLE mcp_sessions (
    id_hash    TEXT PRIMARY KEY,   -- hex SHA-256 of the Mcp-Session-Id
    state      TEXT NOT NULL,      -- JSON: rmcp's SessionState
    created_at INTEGER NOT NULL    -- ms; kept a week
);
