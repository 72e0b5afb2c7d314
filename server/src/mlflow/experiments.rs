//! MLflow experiments: each project's own (id: the project's name), and
//! those the mlflow client creates by name inside a project (id
//! `PROJECT:N`, table `mlflow_experiments`). A project's own experiment
//! is the project: it cannot be renamed or deleted through MLflow. A named
//! one can, by the project's editors; deleting it archives its runs and
//! restoring it brings them back, as MLflow's server does.

use crate::identity::access::{self, Caller};
use crate::runs;
use crate::store::sql;
use crate::store::time::now_ms;
use crate::store::{Db, Error};
use gpuplane_api::mlflow::{ExperimentId, MAX_EXPERIMENT_NAME_LEN, PROJECT_TAG};
use gpuplane_api::project::Role;
use std::collections::{BTreeMap, HashMap};

/// The name of MLflow's default experiment (our `default` project's).
pub const DEFAULT_NAME: &str = "Default";

/// An experiment as the MLflow API shows it.
#[derive(Debug, Clone)]
pub struct Experiment {
    pub id: ExperimentId,
    pub name: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub deleted: bool,
    pub tags: BTreeMap<String, String>,
}

impl Experiment {
    pub fn lifecycle_stage(&self) -> &'static str {
        if self.deleted { "deleted" } else { "active" }
    }
}

/// The projects the caller sees (a job's token: its run's only).
async fn visible_projects(db: &Db, caller: &Caller) -> Result<Vec<String>, Error> {
    let names: Vec<String> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT name FROM projects ORDER BY name")
            .fetch_all(pool)
            .await
    })?;
    let visible = access::visible_projects(db, &caller.principal()).await?;
    let job = match &caller.run_id {
        Some(run_id) => Some(runs::check(db, caller, run_id, Role::Viewer).await?),
        None => None,
    };
    Ok(names
        .into_iter()
        .filter(|name| visible.contains(name) && job.as_ref().is_none_or(|only| only == name))
        .collect())
}

/// Every experiment of these projects: each project's own first, then its
/// named ones, with their tags.
async fn of_projects(db: &Db, projects: &[String]) -> Result<Vec<Experiment>, Error> {
    #[derive(sqlx::FromRow)]
    struct Row {
        project: String,
        id: Option<i64>,
        name: String,
        created_at: i64,
        updated_at: i64,
        deleted_at: Option<i64>,
    }
    let listed = serde_json::to_string(projects).map_err(anyhow::Error::from)?;
    let values = db.dialect().json_values("$1");
    let rows: Vec<Row> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT name AS project, NULL AS id, name, created_at, created_at AS updated_at, NULL AS deleted_at
               FROM projects WHERE name IN (SELECT value FROM {values})
             UNION ALL
             SELECT project, id, name, created_at, updated_at, deleted_at
               FROM mlflow_experiments WHERE project IN (SELECT value FROM {values})"
        ))
        .bind(&listed)
        .fetch_all(pool)
        .await
    })?;
    let tags: Vec<(String, i64, String, String)> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "SELECT project, experiment, key, value FROM mlflow_experiment_tags
             WHERE project IN (SELECT value FROM {values})"
        ))
        .bind(&listed)
        .fetch_all(pool)
        .await
    })?;
    let mut tags_of: HashMap<(String, i64), BTreeMap<String, String>> = HashMap::new();
    for (project, experiment, key, value) in tags {
        tags_of
            .entry((project, experiment))
            .or_default()
            .insert(key, value);
    }
    let mut found: Vec<Experiment> = rows
        .into_iter()
        .map(|row| Experiment {
            tags: tags_of
                .remove(&(row.project.clone(), row.id.unwrap_or(0)))
                .unwrap_or_default(),
            id: ExperimentId::of_run(&row.project, row.id),
            // MLflow calls its default experiment `Default`.
            name: if row.id.is_none() && row.name == "default" {
                DEFAULT_NAME.to_string()
            } else {
                row.name
            },
            created_at: row.created_at,
            updated_at: row.updated_at,
            deleted: row.deleted_at.is_some(),
        })
        .collect();
    found.sort_by(|a, b| {
        (a.id.project(), a.id.number().unwrap_or(0)).cmp(&(b.id.project(), b.id.number().unwrap_or(0)))
    });
    Ok(found)
}

/// Every experiment the caller sees.
pub async fn visible(db: &Db, caller: &Caller) -> Result<Vec<Experiment>, Error> {
    let projects = visible_projects(db, caller).await?;
    of_projects(db, &projects).await
}

fn not_found(id: &ExperimentId) -> Error {
    Error::NotFound(format!("No Experiment with id={id} exists that you can see"))
}

/// One experiment the caller sees, else "not found" (for one that does
/// not exist and one the caller may not see alike).
pub async fn get(db: &Db, caller: &Caller, id: &ExperimentId) -> Result<Experiment, Error> {
    let projects = visible_projects(db, caller).await?;
    if !projects.iter().any(|project| project == id.project()) {
        return Err(not_found(id));
    }
    of_projects(db, &[id.project().to_string()])
        .await?
        .into_iter()
        .find(|experiment| experiment.id == *id)
        .ok_or_else(|| not_found(id))
}

/// The experiment of this name the caller sees: a project of that name,
/// else a named experiment, in the caller's home project first (see
/// [`home_project`]), then by project name.
pub async fn by_name(db: &Db, caller: &Caller, name: &str) -> Result<Experiment, Error> {
    let home = home_project(caller, &BTreeMap::new());
    let mut found: Vec<Experiment> = visible(db, caller)
        .await?
        .into_iter()
        .filter(|experiment| {
            experiment.name == name
                || matches!(&experiment.id, ExperimentId::Project(project) if project == name)
        })
        .collect();
    found.sort_by_key(|experiment| (experiment.id.number().is_some(), experiment.id.project() != home));
    found
        .into_iter()
        .next()
        .ok_or_else(|| Error::NotFound(format!("Could not find experiment with name '{name}'")))
}

/// The project a new experiment goes into: the one its `gpuplane.project`
/// tag names, else the one the caller's token is limited to, else `default`.
pub fn home_project(caller: &Caller, tags: &BTreeMap<String, String>) -> String {
    tags.get(PROJECT_TAG)
        .cloned()
        .or_else(|| caller.project.clone())
        .unwrap_or_else(|| "default".to_string())
}

fn check_name(name: &str) -> Result<(), Error> {
    if name.trim().is_empty()
        || name.chars().count() > MAX_EXPERIMENT_NAME_LEN
        || name.chars().any(char::is_control)
    {
        return Err(Error::field(
            "name",
            format!(
                "`{}` is not an experiment name: 1 to {MAX_EXPERIMENT_NAME_LEN} characters, not all spaces, none a control character",
                name.escape_debug()
            ),
        ));
    }
    Ok(())
}

/// The caller may change experiments of `project`: an editor there, and
/// not a job's token (which writes to its own run only).
async fn require_editor(
    db: &Db,
    caller: &Caller,
    project: &str,
    not_found: impl FnOnce() -> Error,
) -> Result<(), Error> {
    if caller.run_id.is_some() {
        return Err(Error::Forbidden(
            "a job's token writes only to its job's run (MLFLOW_RUN_ID), not to experiments".into(),
        ));
    }
    access::require(db, &caller.principal(), project, Role::Editor, not_found).await
}

/// `experiments/create`: a named experiment in the caller's home project
/// (editors there); a name taken in that project, or a project's own
/// name, is MLflow's `RESOURCE_ALREADY_EXISTS` ([`Error::Conflict`]).
pub async fn create(
    db: &Db,
    caller: &Caller,
    name: &str,
    tags: &BTreeMap<String, String>,
) -> Result<ExperimentId, Error> {
    check_name(name)?;
    super::check_tags(
        &tags
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>(),
    )?;
    let project = home_project(caller, tags);
    require_editor(db, caller, &project, || {
        Error::NotFound(format!(
            "no project {project} that you can see, for experiment '{name}': name one with the tag \
             {PROJECT_TAG}, or log with a token limited to it (`gpuctl token create --project P`)"
        ))
    })
    .await?;
    if crate::projects::exists(db, name).await?
        && visible_projects(db, caller).await?.iter().any(|p| p == name)
    {
        return Err(already_exists(name));
    }
    let now = now_ms();
    let mut tx = crate::store::write(db).await?;
    let taken: Option<i64> = sql!(tx, |conn| {
        sqlx::query_scalar("SELECT id FROM mlflow_experiments WHERE project = $1 AND name = $2")
            .bind(&project)
            .bind(name)
            .fetch_optional(conn)
            .await
    })?;
    if taken.is_some() {
        return Err(already_exists(name));
    }
    let number: i64 = sql!(tx, |conn| {
        sqlx::query_scalar(
            "INSERT INTO mlflow_experiments (project, name, created_at, updated_at) VALUES ($1, $2, $3, $3)
             RETURNING id",
        )
        .bind(&project)
        .bind(name)
        .bind(now)
        .fetch_one(conn)
        .await
    })?;
    for (key, value) in tags.iter().filter(|(key, _)| *key != PROJECT_TAG) {
        put_tag(&mut tx, &project, number, key, value).await?;
    }
    tx.commit().await?;
    Ok(ExperimentId::Named { project, number })
}

fn already_exists(name: &str) -> Error {
    Error::Conflict(format!("Experiment(name={name}) already exists."))
}

/// A named experiment the caller may change, else why not (a project's
/// own experiment is the project: changed with gpuctl, not MLflow).
async fn changeable(db: &Db, caller: &Caller, id: &ExperimentId) -> Result<Experiment, Error> {
    let experiment = get(db, caller, id).await?;
    require_editor(db, caller, id.project(), || not_found(id)).await?;
    Ok(experiment)
}

fn own_experiment(id: &ExperimentId, what: &str) -> Error {
    Error::field(
        "experiment_id",
        format!(
            "experiment {id} is project {}'s own: it cannot be {what} through MLflow (projects are managed with gpuctl)",
            id.project()
        ),
    )
}

/// `experiments/update`: a new name for a named experiment.
pub async fn rename(db: &Db, caller: &Caller, id: &ExperimentId, new_name: &str) -> Result<(), Error> {
    check_name(new_name)?;
    changeable(db, caller, id).await?;
    let Some(number) = id.number() else {
        return Err(own_experiment(id, "renamed"));
    };
    let mut tx = crate::store::write(db).await?;
    let taken: Option<i64> = sql!(tx, |conn| {
        sqlx::query_scalar("SELECT id FROM mlflow_experiments WHERE project = $1 AND name = $2 AND id <> $3")
            .bind(id.project())
            .bind(new_name)
            .bind(number)
            .fetch_optional(conn)
            .await
    })?;
    if taken.is_some() {
        return Err(already_exists(new_name));
    }
    sql!(tx, |conn| {
        sqlx::query("UPDATE mlflow_experiments SET name = $1, updated_at = $2 WHERE id = $3")
            .bind(new_name)
            .bind(now_ms())
            .bind(number)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    tx.commit().await?;
    Ok(())
}

/// `experiments/delete` and `experiments/restore`: a named experiment's
/// lifecycle, its runs archived or restored with it.
pub async fn set_deleted(db: &Db, caller: &Caller, id: &ExperimentId, deleted: bool) -> Result<(), Error> {
    let experiment = changeable(db, caller, id).await?;
    let Some(number) = id.number() else {
        return Err(own_experiment(id, if deleted { "deleted" } else { "restored" }));
    };
    if experiment.deleted == deleted {
        return Ok(());
    }
    let runs: Vec<String> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT run_id FROM mlflow_runs WHERE experiment = $1")
            .bind(number)
            .fetch_all(pool)
            .await
    })?;
    for run_id in runs {
        runs::lifecycle::set_archived(db, &run_id, deleted, caller.user_id.as_deref()).await?;
    }
    let now = now_ms();
    sql!(db, |pool| {
        sqlx::query("UPDATE mlflow_experiments SET deleted_at = $1, updated_at = $2 WHERE id = $3")
            .bind(deleted.then_some(now))
            .bind(now)
            .bind(number)
            .execute(pool)
            .await
            .map(|_| ())
    })?;
    Ok(())
}

/// Refuses a run in a deleted experiment, as MLflow does.
pub fn require_active(experiment: &Experiment) -> Result<(), Error> {
    if experiment.deleted {
        return Err(Error::field(
            "experiment_id",
            format!(
                "The experiment {} must be in the 'active' state. Current state is deleted.",
                experiment.id
            ),
        ));
    }
    Ok(())
}

async fn put_tag(
    tx: &mut crate::store::Tx,
    project: &str,
    number: i64,
    key: &str,
    value: &str,
) -> Result<(), Error> {
    sql!(tx, |conn| {
        sqlx::query(
            "INSERT INTO mlflow_experiment_tags (project, experiment, key, value) VALUES ($1, $2, $3, $4)
             ON CONFLICT (project, experiment, key) DO UPDATE SET value = excluded.value",
        )
        .bind(project)
        .bind(number)
        .bind(key)
        .bind(value)
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    Ok(())
}

/// `experiments/set-experiment-tag` (a project's own experiment takes tags too).
pub async fn set_tag(
    db: &Db,
    caller: &Caller,
    id: &ExperimentId,
    key: &str,
    value: &str,
) -> Result<(), Error> {
    super::check_tags(&[(key.to_string(), value.to_string())])?;
    let experiment = changeable(db, caller, id).await?;
    require_active(&experiment)?;
    let mut tx = crate::store::write(db).await?;
    put_tag(&mut tx, id.project(), id.number().unwrap_or(0), key, value).await?;
    tx.commit().await?;
    Ok(())
}

/// `experiments/delete-experiment-tag`.
pub async fn delete_tag(db: &Db, caller: &Caller, id: &ExperimentId, key: &str) -> Result<(), Error> {
    let experiment = changeable(db, caller, id).await?;
    require_active(&experiment)?;
    let removed = sql!(db, |pool| {
        sqlx::query("DELETE FROM mlflow_experiment_tags WHERE project = $1 AND experiment = $2 AND key = $3")
            .bind(id.project())
            .bind(id.number().unwrap_or(0))
            .bind(key)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
    })?;
    if removed == 0 {
        return Err(Error::NotFound(format!(
            "No tag with name: {key} in experiment {id}"
        )));
    }
    Ok(())
}
