-- What people record about a run besides metrics: config, tags, notes.

ALTER TABLE runs ADD COLUMN tags TEXT NOT NULL DEFAULT '[]';   -- JSON array of strings, sorted
ALTER TABLE runs ADD COLUMN notes TEXT NOT NULL DEFAULT '';

-- One row per config key: filters like `config.lr > 0.001` compare `value`
-- in SQL (numbers as numbers); `json` keeps the value's JSON form.
CREATE TABLE run_config (
    run_id TEXT NOT NULL REFERENCES runs (id),
    key    TEXT NOT NULL,
    value  ANY,                  -- number, text, 0/1 for booleans, NULL
    json   TEXT NOT NULL,        -- the value as JSON: 0.001, "adam", true, null
    PRIMARY KEY (run_id, key)
) STRICT, WITHOUT ROWID;

CREATE INDEX run_config_by_key ON run_config (key, value);
