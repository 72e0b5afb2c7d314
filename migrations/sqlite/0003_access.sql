-- Projects with members and roles; token restrictions; device authorization (RFC 8628).

CREATE TABLE project_members (
    project  TEXT NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    user_id  TEXT NOT NULL REFERENCES users (id),
    role     TEXT NOT NULL CHECK (role IN ('viewer', 'editor', 'admin')),
    added_at INTEGER NOT NULL,
    PRIMARY KEY (project, user_id)
) STRICT;

CREATE INDEX project_members_by_user ON project_members (user_id);

-- Everyone who exists already may work in `default`.
INSERT INTO project_members (project, user_id, role, added_at)
    SELECT 'default', id, 'editor', created_at FROM users;

-- A token may be limited to one project.
ALTER TABLE api_tokens ADD COLUMN project TEXT REFERENCES projects (name);

-- Events about a job carry its project, for filtering by membership.
ALTER TABLE events ADD COLUMN project TEXT;
UPDATE events SET project = (SELECT project FROM jobs WHERE jobs.id = events.job_id) WHERE job_id IS NOT NULL;

-- Users signed in through SSO.
ALTER TABLE users ADD COLUMN email TEXT;
ALTER TABLE users ADD COLUMN oidc_subject TEXT;
CREATE UNIQUE INDEX users_by_oidc_subject ON users (oidc_subject) WHERE oidc_subject IS NOT NULL;

CREATE TABLE device_authorizations (
    id               TEXT PRIMARY KEY,               -- dev_<ulid>
    device_code_hash TEXT NOT NULL UNIQUE,           -- hex SHA-256; the code itself is never stored
    user_code_hash   TEXT NOT NULL UNIQUE,           -- hex SHA-256 of the normalised user code
    client_id        TEXT NOT NULL,
    client_name      TEXT NOT NULL,
    client_host      TEXT NOT NULL,
    client_ip        TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'consumed')),
    user_id          TEXT REFERENCES users (id),
    interval_s       INTEGER NOT NULL,
    last_poll_at     INTEGER,
    created_at       INTEGER NOT NULL,
    expires_at       INTEGER NOT NULL,
    decided_at       INTEGER
) STRICT;

-- Console sessions (tower-sessions' SQLite store layout; ids are stored hashed).
CREATE TABLE tower_sessions (
    id          TEXT PRIMARY KEY NOT NULL,
    data        BLOB NOT NULL,
    expiry_date INTEGER NOT NULL
);
