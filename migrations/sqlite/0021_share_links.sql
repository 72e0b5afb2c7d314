-- Share links: a read-only view of one run for people without an account.
-- Only the SHA-256 of a link's secret is kept; every request through one is
-- recorded.

CREATE TABLE share_links (
    id          TEXT PRIMARY KEY,                        -- shr_<ulid> (not the secret)
    secret_hash TEXT NOT NULL UNIQUE,                    -- hex SHA-256 of the secret in the URL
    run_id      TEXT NOT NULL REFERENCES runs (id),
    created_by  TEXT,                                    -- user name
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    revoked_at  INTEGER
) STRICT;

CREATE INDEX share_links_by_run ON share_links (run_id);

CREATE TABLE share_views (
    id         INTEGER PRIMARY KEY,
    share_id   TEXT NOT NULL REFERENCES share_links (id),
    time       INTEGER NOT NULL,
    what       TEXT NOT NULL,                            -- page, chart.svg, chart.png, logs
    address    TEXT,
    user_agent TEXT
) STRICT;

CREATE INDEX share_views_by_link ON share_views (share_id, id);

-- Project admins may forbid share links of their project's runs.
ALTER TABLE projects ADD COLUMN share_links INTEGER NOT NULL DEFAULT 1;
