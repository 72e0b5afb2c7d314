-- Who may subscribe to a channel: server admins (the default), the admins
-- of the channel's project (then only to that project's events), or anyone
-- (their own jobs' events). Existing channels become admins-only; their
-- existing subscriptions stay.
ALTER TABLE alert_channels ADD COLUMN project TEXT REFERENCES projects (name);
ALTER TABLE alert_channels ADD COLUMN subscribers TEXT NOT NULL DEFAULT 'admins'
    CHECK (subscribers IN ('admins', 'project', 'anyone'));
