-- Alerts: channels (server admins), subscriptions, and one delivery per
-- event and channel with how sending it went.

CREATE TABLE alert_channels (
    name          TEXT PRIMARY KEY,
    kind          TEXT NOT NULL CHECK (kind IN ('webhook', 'slack', 'email')),
    url           TEXT,                                  -- webhook, slack
    recipients    TEXT NOT NULL DEFAULT '[]',            -- email: JSON array of addresses
    sealed_secret TEXT,                                  -- webhook: HMAC key sealed with secret.key
    created_at    INTEGER NOT NULL,
    created_by    TEXT
) STRICT;

CREATE TABLE alert_subscriptions (
    id           TEXT PRIMARY KEY,                       -- sub_<ulid>
    channel      TEXT NOT NULL REFERENCES alert_channels (name),
    project      TEXT REFERENCES projects (name),        -- a project's events
    user_id      TEXT REFERENCES users (id),             -- one user's own jobs and runs
    kinds        TEXT NOT NULL DEFAULT '[]',             -- JSON array of event kinds; empty: all
    min_severity TEXT NOT NULL CHECK (min_severity IN ('info', 'warning', 'critical')),
    created_at   INTEGER NOT NULL,
    created_by   TEXT,
    CHECK (project IS NULL OR user_id IS NULL)           -- both NULL: every event (server admins)
) STRICT;

CREATE TABLE alert_deliveries (
    seq             INTEGER PRIMARY KEY,                 -- list cursor
    id              TEXT NOT NULL UNIQUE,                -- dlv_<ulid>, sent with every try
    subscription_id TEXT NOT NULL,                       -- kept after the subscription goes
    channel         TEXT NOT NULL,
    project         TEXT,                                -- the subscription's scope, for who may list it
    user_id         TEXT,
    event_seq       INTEGER NOT NULL REFERENCES events (seq),
    status          TEXT NOT NULL CHECK (status IN ('pending', 'sent', 'failed')),
    attempts        INTEGER NOT NULL,
    next_attempt_at INTEGER,                             -- while pending
    last_error      TEXT,
    sent_at         INTEGER,
    created_at      INTEGER NOT NULL,
    UNIQUE (channel, event_seq)
) STRICT;

CREATE INDEX alert_deliveries_due ON alert_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX alert_deliveries_by_event ON alert_deliveries (event_seq);

-- The last event fan-out has read; events recorded before alerts existed are not sent.
CREATE TABLE alert_cursor (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL
) STRICT;

INSERT INTO alert_cursor (id, seq) SELECT 1, coalesce(max(seq), 0) FROM events;
