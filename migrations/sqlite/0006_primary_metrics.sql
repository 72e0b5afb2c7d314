-- Primary metrics: a run's own (key, goal), else its project's default.
ALTER TABLE runs ADD COLUMN primary_key TEXT;
ALTER TABLE runs ADD COLUMN primary_goal TEXT;                 -- 'max' | 'min'
ALTER TABLE projects ADD COLUMN primary_key TEXT;
ALTER TABLE projects ADD COLUMN primary_goal TEXT;

-- The best finite values of each series and the first step that reached
-- them, kept at ingest, so that runs and jobs sort by their primary metric
-- without reading points.
ALTER TABLE metric_series ADD COLUMN min_value REAL;
ALTER TABLE metric_series ADD COLUMN min_step INTEGER;
ALTER TABLE metric_series ADD COLUMN max_value REAL;
ALTER TABLE metric_series ADD COLUMN max_step INTEGER;
