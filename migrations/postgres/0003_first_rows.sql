-- What a new install starts with, as on SQLite (0002_jobs.sql, 0020_alerts.sql):
-- the `default` project everyone may work in, and the alert cursor at the
-- start of the event log. `admin migrate-to-postgres` replaces both with
-- the copied install's rows.
INSERT INTO projects (name, created_at) VALUES ('default', 0);
INSERT INTO alert_cursor (id, seq) VALUES (1, 0);
