//! MLflow's tracking model over ours, for the MLflow REST API
//! (`api/mlflow/`): an MLflow experiment is a project (its id is the
//! project's name; MLflow's default experiment `0` is `default`), an MLflow
//! run is a run, its params are the run's config (strings, as MLflow keeps
//! them, and never changed once set), its metric points are ours. Its tags
//! (key → value, `mlflow.runName` and the client's `mlflow.*` included)
//! and the status the client reports are kept beside the run
//! (`mlflow_run_tags`, `mlflow_runs`); the user's own tags are also the
//! run's tags, as `KEY:VALUE`.

pub mod artifacts;
pub mod experiments;
pub mod search;

use crate::identity::access::{self, Caller, Visible};
use crate::runs;
use crate::store::sql;
use crate::store::time::now_ms;
use crate::store::{Db, Error, Tx};
use gpuplane_api::experiment::RunChanges;
use gpuplane_api::metric::{NewRun, Run};
pub use gpuplane_api::mlflow::{DEFAULT_EXPERIMENT, ExperimentId, experiment_id};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

/// MLflow's tag for a run's name.
pub const RUN_NAME_TAG: &str = "mlflow.runName";

/// MLflow's limits on one `log-batch` (over one, nothing is written).
pub const MAX_BATCH_METRICS: usize = 1000;
pub const MAX_BATCH_PARAMS: usize = 100;
pub const MAX_BATCH_TAGS: usize = 100;
/// MLflow's longest param value and tag value.
pub const MAX_PARAM_VALUE: usize = 6000;
pub const MAX_TAG_VALUE: usize = 8000;
/// MLflow's longest param, metric and tag key.
pub const MAX_KEY: usize = 250;

/// What MLflow keeps of a run beside ours.
#[derive(Debug, Clone)]
pub struct MlflowRun {
    pub run: Run,
    /// Its named experiment, else its project's own.
    pub experiment: ExperimentId,
    /// `RUNNING`, `FINISHED`, `FAILED`, `KILLED` (or `SCHEDULED`).
    pub status: String,
    pub start_time: i64,
    pub end_time: Option<i64>,
    pub user: Option<String>,
    pub tags: BTreeMap<String, String>,
}

impl MlflowRun {
    /// MLflow's `lifecycle_stage`: a deleted MLflow run is an archived run.
    pub fn lifecycle_stage(&self) -> &'static str {
        if self.run.archived_at.is_some() {
            "deleted"
        } else {
            "active"
        }
    }

    /// Where MLflow keeps the run's artifacts: under its experiment's.
    pub fn artifact_uri(&self) -> String {
        format!("mlflow-artifacts:/{}/{}/artifacts", self.experiment, self.run.id)
    }
}

/// The experiment a run is in (none such: "not found").
pub async fn experiment_of(db: &Db, run_id: &str) -> Result<ExperimentId, Error> {
    let found: Option<(String, Option<i64>)> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT r.project, m.experiment FROM runs r LEFT JOIN mlflow_runs m ON m.run_id = r.id WHERE r.id = $1",
        )
        .bind(run_id)
        .fetch_optional(pool)
        .await
    })?;
    let (project, named) = found.ok_or_else(|| Error::NotFound(format!("Run with id={run_id} not found")))?;
    Ok(ExperimentId::of_run(&project, named))
}

/// MLflow's status of one of our runs: what the client reported, else
/// the job's (a queued job's run is `SCHEDULED`) or the SDK run's.
fn status_of(run: &Run, reported: Option<String>) -> String {
    if let Some(status) = reported {
        return status;
    }
    match run.status.as_str() {
        "QUEUED" | "DISPATCHING" => "SCHEDULED",
        "RUNNING" => "RUNNING",
        "SUCCEEDED" | "FINISHED" => "FINISHED",
        "CANCELLED" => "KILLED",
        _ => "FAILED",
    }
    .to_string()
}

pub async fn get(db: &Db, run_id: &str) -> Result<MlflowRun, Error> {
    let run = runs::get(db, run_id).await?;
    let mut found = with_details(db, vec![run]).await?;
    Ok(found.remove(0))
}

/// Runs with what MLflow keeps beside them, read for all of them at once.
async fn with_details(db: &Db, runs: Vec<Run>) -> Result<Vec<MlflowRun>, Error> {
    #[derive(sqlx::FromRow)]
    struct Row {
        id: String,
        started_at: i64,
        finished_at: Option<i64>,
        user: Option<String>,
        status: Option<String>,
        ended_at: Option<i64>,
        experiment: Option<i64>,
    }
    let ids = serde_json::to_string(&runs.iter().map(|run| run.id.as_str()).collect::<Vec<_>>())
        .map_err(anyhow::Error::from)?;
    let listed = db.dialect().json_values("$1");
    let rows: Vec<Row> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT r.id, coalesce(m.started_at, r.created_at) AS started_at, r.finished_at, coalesce(m.user_id, u.name) AS user,
                    m.status, m.ended_at, m.experiment
             FROM runs r LEFT JOIN users u ON u.id = r.created_by LEFT JOIN mlflow_runs m ON m.run_id = r.id
             WHERE r.id IN (SELECT value FROM {listed})"
        ))
        .bind(&ids)
        .fetch_all(pool)
        .await
    })?;
    let tags: Vec<(String, String, String)> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT run_id, key, value FROM mlflow_run_tags WHERE run_id IN (SELECT value FROM {listed})"
        ))
        .bind(&ids)
        .fetch_all(pool)
        .await
    })?;
    let mut rows: HashMap<String, Row> = rows.into_iter().map(|row| (row.id.clone(), row)).collect();
    let mut tags_of: HashMap<String, BTreeMap<String, String>> = HashMap::new();
    for (run_id, key, value) in tags {
        tags_of.entry(run_id).or_default().insert(key, value);
    }
    let mut found = Vec::with_capacity(runs.len());
    for run in runs {
        let Some(row) = rows.remove(&run.id) else {
            continue; // Deleted since the list was read.
        };
        let mut tags = tags_of.remove(&run.id).unwrap_or_default();
        tags.entry(RUN_NAME_TAG.to_string())
            .or_insert_with(|| run.name.clone());
        found.push(MlflowRun {
            experiment: ExperimentId::of_run(&run.project, row.experiment),
            status: status_of(&run, row.status),
            start_time: row.started_at,
            end_time: row.ended_at.or(row.finished_at),
            user: row.user,
            tags,
            run,
        });
    }
    Ok(found)
}

/// Which runs or experiments a search looks at (MLflow's `view_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Active,
    Deleted,
    All,
}

impl View {
    /// MLflow's names: `ACTIVE_ONLY` (the default), `DELETED_ONLY`, `ALL`.
    pub fn parse(name: Option<&str>) -> Result<View, Error> {
        match name {
            None | Some("ACTIVE_ONLY") | Some("") => Ok(View::Active),
            Some("DELETED_ONLY") => Ok(View::Deleted),
            Some("ALL") => Ok(View::All),
            Some(other) => Err(Error::field(
                "view_type",
                format!("`{other}` is not a view type: ACTIVE_ONLY, DELETED_ONLY or ALL"),
            )),
        }
    }

    pub fn shows(self, deleted: bool) -> bool {
        match self {
            View::Active => !deleted,
            View::Deleted => deleted,
            View::All => true,
        }
    }
}

/// `runs/search`: the runs of these experiments the caller may see that
/// pass the filter, in the order asked, then newest first (a job's token
/// sees its own run only).
pub async fn search(
    db: &Db,
    caller: &Caller,
    experiments: &[ExperimentId],
    view: View,
    filter: &[search::Clause],
    orders: &[search::Order],
) -> Result<Vec<MlflowRun>, Error> {
    let visible = access::visible_projects(db, &caller.principal()).await?;
    let mut projects: Vec<String> = experiments
        .iter()
        .map(|id| id.project().to_string())
        .filter(|project| visible.contains(project))
        .collect();
    projects.sort();
    projects.dedup();
    let scope = Visible::Only(projects);
    let mut found = Vec::new();
    for archived in [false, true] {
        if !view.shows(archived) {
            continue;
        }
        let filters = runs::details::Filters {
            tag: None,
            text: None,
            config: Vec::new(),
            archived,
        };
        let mut before = None;
        loop {
            let page = runs::list(
                db,
                &scope,
                None,
                &filters,
                &gpuplane_api::experiment::RunSort::newest(),
                1000,
                before,
            )
            .await?;
            let mut items = page.items;
            if let Some(only) = &caller.run_id {
                items.retain(|run| run.id == *only);
            }
            let runs = with_details(db, items).await?;
            found.extend(
                runs.into_iter()
                    .filter(|run| experiments.contains(&run.experiment) && search::matches(run, filter)),
            );
            match page.next_before {
                Some(next) => before = Some(next),
                None => break,
            }
        }
    }
    search::sort(&mut found, orders);
    Ok(found)
}

/// Whether a run is deleted (archived): MLflow logs into none such.
pub async fn is_deleted(db: &Db, run_id: &str) -> Result<bool, Error> {
    let archived: Option<Option<i64>> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT archived_at FROM runs WHERE id = $1")
            .bind(run_id)
            .fetch_optional(pool)
            .await
    })?;
    Ok(archived.flatten().is_some())
}

/// `runs/delete` and `runs/restore`: MLflow's deleted runs are archived ones.
pub async fn set_deleted(db: &Db, caller: &Caller, run_id: &str, deleted: bool) -> Result<(), Error> {
    runs::lifecycle::set_archived(db, run_id, deleted, caller.user_id.as_deref()).await
}

/// `runs/create`: a run in the experiment (its project's editors; not in
/// a deleted one), named `name` (else `mlflow.runName`, else after its
/// time), with its tags.
pub async fn create_run(
    db: &Db,
    caller: &Caller,
    experiment: &ExperimentId,
    name: Option<&str>,
    start_time: Option<i64>,
    user_id: Option<&str>,
    tags: &[(String, String)],
) -> Result<String, Error> {
    if caller.run_id.is_some() {
        return Err(Error::Forbidden(
            "a job's token writes only to its job's run (MLFLOW_RUN_ID)".into(),
        ));
    }
    check_tags(tags)?;
    // An experiment the caller cannot see is MLflow's "does not exist".
    experiments::require_active(&experiments::get(db, caller, experiment).await?)?;
    let project = experiment.project();
    let tagged = tags
        .iter()
        .find(|(key, _)| key == RUN_NAME_TAG)
        .map(|(_, v)| v.as_str());
    let name = name
        .filter(|n| !n.trim().is_empty())
        .or(tagged)
        .map(str::to_string);
    let name = name.unwrap_or_else(|| format!("run-{}", now_ms()));
    let new = NewRun {
        project: project.to_string(),
        name,
        config: BTreeMap::new(),
        tags: Vec::new(),
        notes: String::new(),
    };
    let run_id = runs::create(db, &caller.principal(), &new).await?;
    let mut tx = crate::store::write(db).await?;
    sql!(tx, |conn| {
        sqlx::query(
            "INSERT INTO mlflow_runs (run_id, status, started_at, experiment, user_id) VALUES ($1, 'RUNNING', $2, $3, $4)",
        )
        .bind(&run_id)
        .bind(start_time.unwrap_or_else(now_ms))
        .bind(experiment.number())
        .bind(user_id.filter(|user| !user.is_empty()))
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    put_tags(&mut tx, &run_id, tags).await?;
    tx.commit().await?;
    Ok(run_id)
}

fn check_key(field: &str, key: &str) -> Result<(), Error> {
    if key.is_empty() || key.len() > MAX_KEY || key.chars().any(char::is_control) {
        return Err(Error::field(
            field,
            format!(
                "`{}` is not a key: 1 to {MAX_KEY} characters, none a control character",
                key.escape_debug()
            ),
        ));
    }
    Ok(())
}

fn check_tags(tags: &[(String, String)]) -> Result<(), Error> {
    for (key, value) in tags {
        check_key("tags.key", key)?;
        if value.len() > MAX_TAG_VALUE {
            return Err(Error::field(
                "tags.value",
                format!(
                    "the value of tag {key} has {} characters; at most {MAX_TAG_VALUE}",
                    value.len()
                ),
            ));
        }
    }
    Ok(())
}

/// Sets tags (a later value replaces an earlier); `mlflow.runName` renames
/// the run; the user's own tags (not `mlflow.*`) become run tags `KEY:VALUE` (those our tags can hold).
async fn put_tags(tx: &mut Tx, run_id: &str, tags: &[(String, String)]) -> Result<(), Error> {
    let mut shown = Vec::new();
    for (key, value) in tags {
        sql!(tx, |conn| {
            sqlx::query(
                "INSERT INTO mlflow_run_tags (run_id, key, value) VALUES ($1, $2, $3)
                 ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value",
            )
            .bind(run_id)
            .bind(key)
            .bind(value)
            .execute(conn)
            .await
            .map(|_| ())
        })?;
        if key == RUN_NAME_TAG && !value.trim().is_empty() {
            let rename = RunChanges {
                name: Some(value.clone()),
                ..RunChanges::default()
            };
            runs::details::change(tx, run_id, &rename).await?;
        } else if !key.starts_with("mlflow.") {
            let tag = if value.is_empty() {
                key.clone()
            } else {
                format!("{key}:{value}")
            };
            if gpuplane_api::experiment::check_tags("tags", std::slice::from_ref(&tag)).is_empty() {
                shown.push(tag);
            }
        }
    }
    runs::details::add_tags_that_fit(tx, run_id, shown).await
}

/// `runs/set-tag`, and the tags of `runs/log-batch`.
pub async fn set_tags(db: &Db, run_id: &str, tags: &[(String, String)]) -> Result<(), Error> {
    check_tags(tags)?;
    let mut tx = crate::store::write(db).await?;
    put_tags(&mut tx, run_id, tags).await?;
    tx.commit().await?;
    Ok(())
}

/// `runs/delete-tag`.
pub async fn delete_tag(db: &Db, run_id: &str, key: &str) -> Result<(), Error> {
    let removed = sql!(db, |pool| {
        sqlx::query("DELETE FROM mlflow_run_tags WHERE run_id = $1 AND key = $2")
            .bind(run_id)
            .bind(key)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
    })?;
    if removed == 0 {
        return Err(Error::NotFound(format!(
            "No tag with name: {key} in run with id {run_id}"
        )));
    }
    Ok(())
}

/// Params become the run's config. MLflow never changes a param: the same
/// value again is accepted, another one refused (nothing of the batch is
/// written).
pub async fn log_params(db: &Db, run_id: &str, params: &[(String, String)]) -> Result<(), Error> {
    let mut config = BTreeMap::new();
    for (key, value) in params {
        check_key("params.key", key)?;
        if value.len() > MAX_PARAM_VALUE {
            return Err(Error::field(
                "params.value",
                format!(
                    "the value of param {key} has {} characters; at most {MAX_PARAM_VALUE}",
                    value.len()
                ),
            ));
        }
        if let Some(Value::String(earlier)) = config.get(key)
            && earlier != value
        {
            return Err(changed_param(run_id, key, earlier, value));
        }
        config.insert(key.clone(), Value::String(value.clone()));
    }
    let existing = runs::details::configs(db, &[run_id])
        .await?
        .remove(run_id)
        .unwrap_or_default();
    for (key, value) in &config {
        if let Some(earlier) = existing.get(key)
            && earlier != value
        {
            let shown = earlier
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| earlier.to_string());
            return Err(changed_param(
                run_id,
                key,
                &shown,
                value.as_str().unwrap_or_default(),
            ));
        }
    }
    let mut tx = crate::store::write(db).await?;
    runs::details::update_config(&mut tx, run_id, &config).await?;
    tx.commit().await?;
    Ok(())
}

fn changed_param(run_id: &str, key: &str, earlier: &str, value: &str) -> Error {
    Error::field(
        "params",
        format!(
            "Changing param values is not allowed. Param with key='{key}' was already logged with \
             value='{earlier}' for run ID='{run_id}'. Attempted logging new value '{value}'."
        ),
    )
}

/// `runs/update`: the status and end time the client reports, and a new name.
pub async fn update_run(
    db: &Db,
    run_id: &str,
    status: Option<&str>,
    end_time: Option<i64>,
    name: Option<&str>,
) -> Result<(), Error> {
    if let Some(status) = status
        && !["RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED"].contains(&status)
    {
        return Err(Error::field(
            "status",
            format!("`{status}` is not a run status: RUNNING, SCHEDULED, FINISHED, FAILED or KILLED"),
        ));
    }
    let job: Option<Option<String>> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT job_id FROM runs WHERE id = $1")
            .bind(run_id)
            .fetch_optional(pool)
            .await
    })?;
    let of_job = job.flatten().is_some();
    let mut tx = crate::store::write(db).await?;
    // A job's run follows its job: the script's own end is not the job's.
    if let Some(status) = status
        && !of_job
    {
        let ended = (status != "RUNNING" && status != "SCHEDULED").then(|| end_time.unwrap_or_else(now_ms));
        sql!(tx, |conn| {
            sqlx::query(
                "INSERT INTO mlflow_runs (run_id, status, started_at, ended_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (run_id) DO UPDATE SET status = excluded.status, ended_at = excluded.ended_at",
            )
            .bind(run_id)
            .bind(status)
            .bind(now_ms())
            .bind(ended)
            .execute(conn)
            .await
            .map(|_| ())
        })?;
        runs::set_finished(&mut tx, run_id, ended.is_some()).await?;
    }
    if let Some(name) = name.filter(|name| !name.trim().is_empty()) {
        put_tags(&mut tx, run_id, &[(RUN_NAME_TAG.to_string(), name.to_string())]).await?;
    }
    tx.commit().await?;
    Ok(())
}
