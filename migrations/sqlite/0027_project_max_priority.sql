-- A project's priority ceiling (server admins set it): its members' jobs
-- may not be given a higher priority. NULL: no ceiling.
ALTER TABLE projects ADD COLUMN max_priority INTEGER;
