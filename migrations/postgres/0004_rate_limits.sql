-- As SQLite's 0024_rate_limits.sql: failures per key for the sign-in and
-- device-login limits, shared by every replica.
CREATE TABLE rate_limits (
    limiter           TEXT NOT NULL,
    key               TEXT NOT NULL,
    failures          BIGINT NOT NULL,
    window_started_at BIGINT NOT NULL,
    PRIMARY KEY (limiter, key)
);
