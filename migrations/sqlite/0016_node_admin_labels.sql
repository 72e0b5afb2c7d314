-- Node labels admins set without restarting the agent. `labels` stays what
-- everything reads (the agent's labels with the admins' on top); the agent's
-- own are kept apart so a hello never undoes an admin's change. In
-- `admin_labels` a null value hides the agent's label of that name.
ALTER TABLE nodes ADD COLUMN agent_labels TEXT NOT NULL DEFAULT '{}';
ALTER TABLE nodes ADD COLUMN admin_labels TEXT NOT NULL DEFAULT '{}';
UPDATE nodes SET agent_labels = labels;
