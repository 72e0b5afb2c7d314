-- Failures counted per key (an account, a client address) for the sign-in
-- and device-login limits (server/src/identity/ratelimit.rs), in the
-- database so that every replica on one PostgreSQL counts the same ones.
CREATE TABLE rate_limits (
    limiter           TEXT NOT NULL,     -- which limit: sign_in, sign_in_ip, user_code, device_authorize
    key               TEXT NOT NULL,     -- `user:NAME`, `ip:ADDRESS`, `ADDRESS/USER_ID`, ADDRESS
    failures          INTEGER NOT NULL,
    window_started_at INTEGER NOT NULL,  -- ms; the count starts again one window later
    PRIMARY KEY (limiter, key)
);
