-- Security: agent tokens bound to one node, events of SDK runs in their project.

-- An agent token speaks only for this node (by name): set when the token is
-- made with --node, else by its first hello.
ALTER TABLE api_tokens ADD COLUMN node_name TEXT;

CREATE INDEX api_tokens_by_node ON api_tokens (node_name) WHERE node_name IS NOT NULL;

-- Events about runs made through the SDK (no job) take the run's project, so
-- they are visible only to that project's members.
UPDATE events SET project = (SELECT project FROM runs WHERE runs.id = events.run_id)
WHERE project IS NULL AND run_id IS NOT NULL;
