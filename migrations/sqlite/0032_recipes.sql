-- Recipes (`gpuctl recipe publish`): versioned job templates with a config
-- schema. A published version never changes; deprecating one hides it
-- from new experiments, and old locks keep working. `project` NULL: a
-- server-wide recipe; otherwise its project's admins publish it. A name
-- belongs to one project (or none) across its versions.
CREATE TABLE recipes (
    name         TEXT NOT NULL,
    version      INTEGER NOT NULL,
    project      TEXT,
    contract     TEXT NOT NULL,
    source       TEXT NOT NULL,
    description  TEXT NOT NULL,
    runtime_id   TEXT NOT NULL,
    deprecated   INTEGER NOT NULL DEFAULT 0,
    published_at INTEGER NOT NULL,
    published_by TEXT,
    PRIMARY KEY (name, version)
);
