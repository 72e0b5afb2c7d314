//! Primary metrics: the metric that ranks a run, set on the run or as its
//! project's default, with a goal (`max` or `min`). The best value comes
//! from the extremes `metric_series` keeps at ingest, so lists sort by it
//! without reading points; the best checkpoint is the one whose step has the
//! best value.

use crate::metrics;
use crate::store::Db;
use crate::store::Error;
use crate::store::sql;
use gpuplane_api::metric::{BestValue, Checkpoint, Goal, PrimaryMetric, SetPrimaryMetric, Value};

/// Joins runs `r` to their project `pp` and their primary metric's series `ps`.
pub const JOIN: &str = "LEFT JOIN projects pp ON pp.name = r.project
    LEFT JOIN metric_series ps ON ps.run_id = r.id AND ps.key = coalesce(r.primary_key, pp.primary_key)";

/// The columns [`Columns`] reads, with [`JOIN`].
pub const COLUMNS: &str = "coalesce(r.primary_key, pp.primary_key) AS pm_key,
    CASE WHEN r.primary_key IS NOT NULL THEN r.primary_goal ELSE pp.primary_goal END AS pm_goal,
    r.primary_key IS NOT NULL AS pm_on_run,
    ps.min_value AS pm_min, ps.min_step AS pm_min_step, ps.max_value AS pm_max, ps.max_step AS pm_max_step";

/// Larger is better whatever the goal; NULL without a value. Lists order by it.
pub const SCORE: &str =
    "(CASE (CASE WHEN r.primary_key IS NOT NULL THEN r.primary_goal ELSE pp.primary_goal END)
    WHEN 'max' THEN ps.max_value WHEN 'min' THEN -ps.min_value END)";

/// `ORDER BY` for best first, runs without a value last, then `then` descending.
pub fn best_first(then: &str) -> String {
    format!("{SCORE} IS NULL, {SCORE} DESC, {then} DESC")
}

/// A run's primary metric as [`COLUMNS`] gives it.
#[derive(Debug, sqlx::FromRow)]
pub struct Columns {
    pm_key: Option<String>,
    pm_goal: Option<String>,
    pm_on_run: bool,
    pm_min: Option<f64>,
    pm_min_step: Option<i64>,
    pm_max: Option<f64>,
    pm_max_step: Option<i64>,
}

impl Columns {
    pub fn metric(&self) -> Option<PrimaryMetric> {
        let key = self.pm_key.clone()?;
        let goal = Goal::parse(self.pm_goal.as_deref()?)?;
        let (value, step) = match goal {
            Goal::Max => (self.pm_max, self.pm_max_step),
            Goal::Min => (self.pm_min, self.pm_min_step),
        };
        let best = match (value, step) {
            (Some(value), Some(step)) => Some(BestValue {
                step,
                value: Value(value),
            }),
            _ => None,
        };
        Some(PrimaryMetric {
            key,
            goal,
            set_on: if self.pm_on_run { "run" } else { "project" }.to_string(),
            best,
            best_checkpoint: None,
        })
    }
}

/// Refuses keys the metric store would refuse.
fn check(request: &SetPrimaryMetric) -> Result<(), Error> {
    let key = &request.key;
    if !gpuplane_api::metric::key_is_valid(key) {
        return Err(Error::field(
            "key",
            format!(
                "must be 1-{} characters without control characters",
                metrics::MAX_KEY_LEN
            ),
        ));
    }
    Ok(())
}

/// Sets a run's own primary metric.
pub async fn set_for_run(db: &Db, run_id: &str, request: &SetPrimaryMetric) -> Result<(), Error> {
    check(request)?;
    sql!(db, |pool| {
        sqlx::query("UPDATE runs SET primary_key = $1, primary_goal = $2 WHERE id = $3")
            .bind(&request.key)
            .bind(request.goal.as_str())
            .bind(run_id)
            .execute(pool)
            .await
            .map(|_| ())
    })?;
    Ok(())
}

/// Sets the primary metric of a project's runs that set none.
pub async fn set_for_project(db: &Db, project: &str, request: &SetPrimaryMetric) -> Result<(), Error> {
    check(request)?;
    sql!(db, |pool| {
        sqlx::query("UPDATE projects SET primary_key = $1, primary_goal = $2 WHERE name = $3")
            .bind(&request.key)
            .bind(request.goal.as_str())
            .bind(project)
            .execute(pool)
            .await
            .map(|_| ())
    })?;
    Ok(())
}

/// A project's default, if it has one.
pub async fn of_project(db: &Db, project: &str) -> Result<Option<SetPrimaryMetric>, Error> {
    let row: Option<(Option<String>, Option<String>)> = sql!(db, |pool| {
        sqlx::query_as("SELECT primary_key, primary_goal FROM projects WHERE name = $1")
            .bind(project)
            .fetch_optional(pool)
            .await
    })?;
    Ok(match row {
        Some((Some(key), Some(goal))) => Goal::parse(&goal).map(|goal| SetPrimaryMetric { key, goal }),
        _ => None,
    })
}

/// Fills each checkpoint's `primary_value` (the metric at its step) and marks
/// the best one: the best finite value, the earliest step on a tie.
pub async fn mark_checkpoints(
    db: &Db,
    run_id: &str,
    primary: &PrimaryMetric,
    checkpoints: &mut [Checkpoint],
) -> Result<(), Error> {
    let steps: Vec<i64> = checkpoints.iter().filter_map(|c| c.step).collect();
    if steps.is_empty() {
        return Ok(());
    }
    let values = metrics::values_at(db, run_id, &primary.key, &steps).await?;
    let mut values = values.into_iter();
    let mut best: Option<(usize, f64, i64)> = None;
    for (at, checkpoint) in checkpoints.iter_mut().enumerate() {
        let Some(step) = checkpoint.step else { continue };
        let Some(value) = values.next().flatten() else {
            continue;
        };
        checkpoint.primary_value = Some(Value(value));
        if !value.is_finite() {
            continue;
        }
        let better = match best {
            None => true,
            Some((_, best_value, best_step)) => {
                let score = |v: f64| if primary.goal == Goal::Max { v } else { -v };
                score(value) > score(best_value) || (value == best_value && step < best_step)
            }
        };
        if better {
            best = Some((at, value, step));
        }
    }
    if let Some((at, _, _)) = best {
        checkpoints[at].best = true;
    }
    Ok(())
}
