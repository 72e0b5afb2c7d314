//! Runs: the record a job (or an SDK script) produces. Reading one needs a
//! viewer of its project; writing to one needs an editor, and a job's own
//! sdk token reaches only its job's run.

pub mod checkpoints;
pub mod details;
pub mod evaluations;
pub mod primary;

use crate::identity::access::Caller;
use crate::identity::access::{self, Principal, Visible};
use crate::metrics;
use crate::paging::Sort;
use crate::store::Error;
use crate::store::ids::new_id;
use crate::store::time::{now_ms, rfc3339};
use gpuplane_api::Page;
use gpuplane_api::experiment::RunChanges;
use gpuplane_api::metric::{Checkpoint, NewRun, Run};
use gpuplane_api::project::Role;
use sqlx::SqlitePool;

#[derive(sqlx::FromRow)]
struct RunRow {
    seq: i64,
    id: String,
    job_id: Option<String>,
    project: String,
    name: String,
    created_at: i64,
    finished_at: Option<i64>,
    job_status: Option<String>,
    tags: String,
    notes: String,
    #[sqlx(flatten)]
    primary: primary::Columns,
}

/// The columns of [`RunRow`], from runs `r`, jobs `j` and [`primary::JOIN`].
fn select_runs() -> String {
    format!(
        "SELECT r.rowid AS seq, r.id, r.job_id, r.project, r.name, r.created_at, r.finished_at, j.status AS job_status,
                r.tags, r.notes, {}
         FROM runs r LEFT JOIN jobs j ON j.id = r.job_id {}",
        primary::COLUMNS,
        primary::JOIN
    )
}

/// A run the caller may use with at least `needed`, else "not found".
pub async fn check(db: &SqlitePool, caller: &Caller, run_id: &str, needed: Role) -> Result<String, Error> {
    let not_found = || Error::NotFound(format!("no run {run_id}"));
    if caller.run_id.as_deref().is_some_and(|only| only != run_id) {
        return Err(not_found());
    }
    let project: Option<String> = sqlx::query_scalar("SELECT project FROM runs WHERE id = ?")
        .bind(run_id)
        .fetch_optional(db)
        .await?;
    let project = project.ok_or_else(not_found)?;
    access::require(db, &caller.principal(), &project, needed, not_found).await?;
    Ok(project)
}

/// The run with its latest value per metric, its primary metric and best checkpoint.
/// A run's name for legends: `project/name`.
pub async fn label(db: &SqlitePool, run_id: &str) -> Result<String, Error> {
    let (project, name): (String, String) = sqlx::query_as("SELECT project, name FROM runs WHERE id = ?")
        .bind(run_id)
        .fetch_optional(db)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no run {run_id}")))?;
    Ok(format!("{project}/{name}"))
}

/// Changes whenever the run gets points or checkpoints, or its job changes
/// state: what live pages watch.
pub async fn version(db: &SqlitePool, run_id: &str) -> Result<String, Error> {
    let (points, checkpoints, job, finished): (i64, i64, Option<String>, Option<i64>) = sqlx::query_as(
        "SELECT (SELECT COALESCE(SUM(points), 0) FROM metric_series WHERE run_id = ?1),
                (SELECT COUNT(*) FROM checkpoints WHERE run_id = ?1),
                (SELECT j.status || ' ' || j.updated_at FROM runs r JOIN jobs j ON j.id = r.job_id WHERE r.id = ?1),
                (SELECT finished_at FROM runs WHERE id = ?1)",
    )
    .bind(run_id)
    .fetch_one(db)
    .await?;
    Ok(format!(
        "{points} {checkpoints} {} {}",
        job.unwrap_or_default(),
        finished.unwrap_or_default()
    ))
}

pub async fn get(db: &SqlitePool, run_id: &str) -> Result<Run, Error> {
    let mut run = run_from_row(db, row(db, run_id).await?).await?;
    if let Some(primary) = &mut run.primary_metric {
        let mut listed = checkpoints::of_run(db, run_id).await?;
        primary::mark_checkpoints(db, run_id, primary, &mut listed).await?;
        primary.best_checkpoint = listed.into_iter().find(|c| c.best).map(|c| c.path);
    }
    Ok(run)
}

async fn row(db: &SqlitePool, run_id: &str) -> Result<RunRow, Error> {
    let row: Option<RunRow> = sqlx::query_as(&format!("{} WHERE r.id = ?", select_runs()))
        .bind(run_id)
        .fetch_optional(db)
        .await?;
    row.ok_or_else(|| Error::NotFound(format!("no run {run_id}")))
}

/// A run's checkpoints, newest step first, the best by its primary metric marked.
pub async fn checkpoints(db: &SqlitePool, run_id: &str) -> Result<Vec<Checkpoint>, Error> {
    let mut listed = checkpoints::of_run(db, run_id).await?;
    if let Some(primary) = row(db, run_id).await?.primary.metric() {
        primary::mark_checkpoints(db, run_id, &primary, &mut listed).await?;
    }
    Ok(listed)
}

/// Runs of the visible projects, newest first or best primary metric first
/// (then only the top `limit`, without further pages).
pub async fn list(
    db: &SqlitePool,
    visible: &Visible,
    project: Option<&str>,
    filters: &details::Filters,
    sort: Sort,
    limit: i64,
    before: Option<i64>,
) -> Result<Page<Run>, Error> {
    let order = match sort {
        Sort::Newest => "r.rowid DESC".to_string(),
        Sort::PrimaryMetric => primary::best_first("r.rowid"),
    };
    let sql = format!(
        "{} WHERE (?1 IS NULL OR r.project = ?1) AND (?2 IS NULL OR r.rowid < ?2)
           AND (?4 IS NULL OR r.project IN (SELECT value FROM json_each(?4))) {}
         ORDER BY {order} LIMIT ?3",
        select_runs(),
        filters.sql(5),
    );
    let query = sqlx::query_as(&sql)
        .bind(project)
        .bind(before.filter(|_| sort == Sort::Newest))
        .bind(limit + 1)
        .bind(visible.as_json());
    let rows: Vec<RunRow> = filters.bind(query).fetch_all(db).await?;
    let (rows, next_before) = crate::paging::split(rows, limit, |row| row.seq);
    let next_before = next_before.filter(|_| sort == Sort::Newest);
    let mut items = Vec::with_capacity(rows.len());
    for row in rows {
        items.push(run_from_row(db, row).await?);
    }
    Ok(Page { items, next_before })
}

async fn run_from_row(db: &SqlitePool, row: RunRow) -> Result<Run, Error> {
    let status = match (&row.job_status, row.finished_at) {
        (Some(status), _) => status.clone(),
        (None, Some(_)) => "FINISHED".into(),
        (None, None) => "RUNNING".into(),
    };
    Ok(Run {
        latest: metrics::latest(db, &row.id).await?,
        config: details::config(db, &row.id).await?,
        tags: serde_json::from_str(&row.tags).unwrap_or_default(),
        notes: row.notes,
        primary_metric: row.primary.metric(),
        id: row.id,
        job_id: row.job_id,
        project: row.project,
        name: row.name,
        status,
        created_at: rfc3339(row.created_at),
    })
}

/// A run made by the SDK outside jobs, in a project where the caller is an editor.
pub async fn create(db: &SqlitePool, principal: &Principal, new: &NewRun) -> Result<String, Error> {
    if new.name.trim().is_empty() || new.name.chars().count() > 200 {
        return Err(Error::field("name", "must be 1-200 characters"));
    }
    let project = new.project.clone();
    let not_found = || {
        Error::field(
            "project",
            format!("no project named `{project}` that you can write to"),
        )
    };
    let exists: Option<String> = sqlx::query_scalar("SELECT name FROM projects WHERE name = ?")
        .bind(&new.project)
        .fetch_optional(db)
        .await?;
    if exists.is_none() {
        return Err(not_found());
    }
    access::require(db, principal, &new.project, Role::Editor, not_found).await?;
    // Every bad field at once, before anything is written.
    let mut errors = gpuplane_api::experiment::check_config(&new.config);
    errors.extend(gpuplane_api::experiment::check_tags("tags", &new.tags));
    errors.extend(gpuplane_api::experiment::check_notes(&new.notes));
    if !errors.is_empty() {
        return Err(Error::Invalid(errors));
    }
    let id = new_id("run");
    let mut tx = db.begin_with("BEGIN IMMEDIATE").await?;
    sqlx::query(
        "INSERT INTO runs (id, job_id, project, name, created_at, created_by) VALUES (?, NULL, ?, ?, ?, ?)",
    )
    .bind(&id)
    .bind(&new.project)
    .bind(new.name.trim())
    .bind(now_ms())
    .bind(&principal.user_id)
    .execute(&mut *tx)
    .await?;
    details::update_config(&mut tx, &id, &new.config).await?;
    let changes = RunChanges {
        tags: Some(new.tags.clone()),
        notes: Some(new.notes.clone()),
        ..RunChanges::default()
    };
    details::change(&mut tx, &id, &changes).await?;
    tx.commit().await?;
    Ok(id)
}

/// Marks an SDK run finished (a job's run follows its job instead).
pub async fn finish(db: &SqlitePool, run_id: &str) -> Result<(), Error> {
    sqlx::query("UPDATE runs SET finished_at = coalesce(finished_at, ?) WHERE id = ? AND job_id IS NULL")
        .bind(now_ms())
        .bind(run_id)
        .execute(db)
        .await?;
    Ok(())
}
