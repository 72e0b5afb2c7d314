-- MLflow experiments named inside a project (`mlflow.set_experiment("my
-- sweep")`), beside each project's own experiment (whose id is the
-- project's name). Their MLflow id is `PROJECT:ID`. A deleted one is kept,
-- restorable, with its runs archived. Tags of either kind of experiment
-- sit in mlflow_experiment_tags (experiment 0: the project's own).
CREATE TABLE mlflow_experiments (
    id         INTEGER PRIMARY KEY,
    project    TEXT NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    deleted_at INTEGER,
    UNIQUE (project, name)
) STRICT;

CREATE TABLE mlflow_experiment_tags (
    project    TEXT NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    experiment INTEGER NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    PRIMARY KEY (project, experiment, key)
) STRICT;

-- The named experiment a run belongs to (none: its project's own).
ALTER TABLE mlflow_runs ADD COLUMN experiment INTEGER REFERENCES mlflow_experiments (id) ON DELETE SET NULL;
-- Who the client says runs it (MLflow's `user_id`; the run's creator is ours).
ALTER TABLE mlflow_runs ADD COLUMN user_id TEXT;
CREATE INDEX mlflow_runs_by_experiment ON mlflow_runs (experiment) WHERE experiment IS NOT NULL;
