-- The audit log: every admin action and every change to a job's place in
-- the queue (cancel, retry, priority, hold, release), with who, from where.
CREATE TABLE audit_log (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    time     INTEGER NOT NULL,
    actor    TEXT NOT NULL,      -- the user's name; `token NAME` without one; `server CLI` on the host
    user_id  TEXT,
    token    TEXT,               -- the token's name (`session` for the console)
    address  TEXT,               -- the client's IP address
    action   TEXT NOT NULL,      -- job.cancel, quota.set, … (gpuplane_api::audit::AuditAction)
    target   TEXT NOT NULL,      -- a job id, a node, project or user name, …
    detail   TEXT NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX audit_log_actor ON audit_log (actor, seq);
