//! Runs: the record a job (or an SDK script) produces. Reading one needs a
//! viewer of its project; writing to one needs an editor, and a job's own
//! sdk token reaches only its job's run.

pub mod alerts;
pub mod charts;
pub mod checkpoints;
pub mod details;
pub mod lifecycle;
pub mod primary;
pub mod shares;

use crate::identity::access::Caller;
use crate::identity::access::{self, Principal, Visible};
use crate::metrics;
use crate::store::Error;
use crate::store::ids::new_id;
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use crate::store::{Db, Dialect, Tx};
use gpuplane_api::Page;
use gpuplane_api::event::EventKind;
use gpuplane_api::experiment::{RunChanges, RunColumn, RunSort};
use gpuplane_api::metric::{Checkpoint, NewRun, Run};
use gpuplane_api::project::Role;

#[derive(sqlx::FromRow)]
struct RunRow {
    seq: i64,
    id: String,
    job_id: Option<String>,
    project: String,
    name: String,
    created_at: i64,
    status: String,
    duration_ms: Option<i64>,
    tags: String,
    notes: String,
    archived_at: Option<i64>,
    #[sqlx(flatten)]
    primary: primary::Columns,
}

/// Now, in epoch milliseconds, inside SQL.
fn sql_now_ms(dialect: Dialect) -> &'static str {
    dialect.pick(
        "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
        "CAST(extract(epoch FROM now()) * 1000 AS BIGINT)",
    )
}

/// A run's place in creation order, over runs `r`: SQLite's rowid, a column on PostgreSQL.
fn run_seq(dialect: Dialect) -> &'static str {
    dialect.pick("r.rowid", "r.seq")
}

/// A run's status over runs `r` and jobs `j`: its job's, else `RUNNING`
/// until an SDK run finishes, then `FINISHED`.
const STATUS: &str = "coalesce(j.status, CASE WHEN r.finished_at IS NULL THEN 'RUNNING' ELSE 'FINISHED' END)";

/// Milliseconds from a run's first start (its job's first attempt, an SDK
/// run's creation) to its end, or to now while it goes; NULL before it starts.
fn duration_ms(dialect: Dialect) -> String {
    let now = sql_now_ms(dialect);
    format!(
        "CASE WHEN r.job_id IS NULL THEN coalesce(r.finished_at, {now}) - r.created_at
              ELSE (SELECT max(coalesce(a.ended_at, {now})) - min(a.started_at) FROM attempts a
                    WHERE a.job_id = r.job_id AND a.started_at IS NOT NULL) END"
    )
}

/// The columns of [`RunRow`], from runs `r`, jobs `j` and [`primary::JOIN`].
fn select_runs(dialect: Dialect) -> String {
    format!(
        "SELECT {} AS seq, r.id, r.job_id, r.project, r.name, r.created_at, {STATUS} AS status,
                {} AS duration_ms, r.tags, r.notes, r.archived_at, {}
         FROM runs r LEFT JOIN jobs j ON j.id = r.job_id {}",
        run_seq(dialect),
        duration_ms(dialect),
        primary::COLUMNS,
        primary::JOIN
    )
}

/// A run the caller may use with at least `needed`, else "not found".
pub async fn check(db: &Db, caller: &Caller, run_id: &str, needed: Role) -> Result<String, Error> {
    let not_found = || Error::NotFound(format!("no run {run_id}"));
    if caller.run_id.as_deref().is_some_and(|only| only != run_id) {
        return Err(not_found());
    }
    let project: Option<String> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT project FROM runs WHERE id = $1")
            .bind(run_id)
            .fetch_optional(pool)
            .await
    })?;
    let project = project.ok_or_else(not_found)?;
    access::require(db, &caller.principal(), &project, needed, not_found).await?;
    Ok(project)
}

/// The run with its latest value per metric, its primary metric and best checkpoint.
/// A run's name for legends: `project/name`.
pub async fn label(db: &Db, run_id: &str) -> Result<String, Error> {
    let (project, name): (String, String) = sql!(db, |pool| {
        sqlx::query_as("SELECT project, name FROM runs WHERE id = $1")
            .bind(run_id)
            .fetch_optional(pool)
            .await
    })?
    .ok_or_else(|| Error::NotFound(format!("no run {run_id}")))?;
    Ok(format!("{project}/{name}"))
}

/// Changes whenever the run gets points or checkpoints, or its job changes
/// state: what live pages watch.
pub async fn version(db: &Db, run_id: &str) -> Result<String, Error> {
    let (points, checkpoints, job, finished): (i64, i64, Option<String>, Option<i64>) = sql!(db, |pool| {
        sqlx::query_as(
        "SELECT (SELECT CAST(COALESCE(SUM(points), 0) AS BIGINT) FROM metric_series WHERE run_id = $1),
                (SELECT COUNT(*) FROM checkpoints WHERE run_id = $1),
                (SELECT j.status || ' ' || j.updated_at FROM runs r JOIN jobs j ON j.id = r.job_id WHERE r.id = $1),
                (SELECT finished_at FROM runs WHERE id = $1)",
    )
    .bind(run_id)
    .fetch_one(pool)
    .await
    })?;
    Ok(format!(
        "{points} {checkpoints} {} {}",
        job.unwrap_or_default(),
        finished.unwrap_or_default()
    ))
}

/// The events that say where a job's metrics went instead of its run.
pub const METRICS_ELSEWHERE: [EventKind; 2] = [EventKind::MetricsSpooled, EventKind::MetricsRefused];

pub async fn get(db: &Db, run_id: &str) -> Result<Run, Error> {
    let mut runs = runs_from_rows(db, vec![row(db, run_id).await?]).await?;
    let mut run = runs.remove(0);
    if let Some(primary) = &mut run.primary_metric {
        let mut listed = checkpoints::of_run(db, run_id).await?;
        primary::mark_checkpoints(db, run_id, primary, &mut listed).await?;
        primary.best_checkpoint = listed.into_iter().find(|c| c.best).map(|c| c.path);
    }
    if run.job_id.is_some() {
        run.metrics_events = crate::events::of_run(db, run_id, &METRICS_ELSEWHERE, 10).await?;
    }
    Ok(run)
}

async fn row(db: &Db, run_id: &str) -> Result<RunRow, Error> {
    let row: Option<RunRow> = sql!(db, |pool| {
        sqlx::query_as(&format!("{} WHERE r.id = $1", select_runs(db.dialect())))
            .bind(run_id)
            .fetch_optional(pool)
            .await
    })?;
    row.ok_or_else(|| Error::NotFound(format!("no run {run_id}")))
}

/// A run's checkpoints, newest step first, the best by its primary metric marked.
pub async fn checkpoints(db: &Db, run_id: &str) -> Result<Vec<Checkpoint>, Error> {
    let mut listed = checkpoints::of_run(db, run_id).await?;
    if let Some(primary) = row(db, run_id).await?.primary.metric() {
        primary::mark_checkpoints(db, run_id, &primary, &mut listed).await?;
    }
    Ok(listed)
}

/// Runs of the visible projects that pass the filters, in `sort` order.
/// Newest first pages by rowid (`before` is the last rowid seen); any other
/// order sorts every matching run by its column, runs without a value last
/// and newest first among equals, and `before` is where the next page starts.
pub async fn list(
    db: &Db,
    visible: &Visible,
    project: Option<&str>,
    filters: &details::Filters,
    sort: &RunSort,
    limit: i64,
    before: Option<i64>,
) -> Result<Page<Run>, Error> {
    let dialect = db.dialect();
    let seq = run_seq(dialect);
    if *sort == RunSort::newest() {
        let sql = format!(
            "{} WHERE ($1 IS NULL OR r.project = $1) AND ($2 IS NULL OR {seq} < $2)
               AND ($4 IS NULL OR r.project IN (SELECT value FROM {})) {}
             ORDER BY {seq} DESC LIMIT $3",
            select_runs(dialect),
            dialect.json_values("$4"),
            filters.sql(dialect, 5),
        );
        let rows: Vec<RunRow> = sql!(db, |pool| {
            let query = sqlx::query_as(&sql)
                .bind(project)
                .bind(before)
                .bind(limit + 1)
                .bind(visible.as_json());
            filters.bind(query).fetch_all(pool).await
        })?;
        let (rows, next_before) = crate::paging::split(rows, limit, |row| row.seq);
        let items = runs_from_rows(db, rows).await?;
        return Ok(Page { items, next_before });
    }
    // The page's rowids in order (one more: is there a next page?), then their rows.
    let order_by = sort_key(dialect, &sort.column);
    let join = join_for(&sort.column, 5);
    let key = column_key(&sort.column);
    let direction = if sort.descending { "DESC" } else { "ASC" };
    let sql = format!(
        "SELECT {seq} FROM runs r LEFT JOIN jobs j ON j.id = r.job_id {join}
         WHERE ($1 IS NULL OR r.project = $1) AND ($2 IS NULL OR r.project IN (SELECT value FROM {})) {}
         ORDER BY {order_by} {direction} NULLS LAST, {seq} DESC LIMIT $3 OFFSET $4",
        dialect.json_values("$2"),
        filters.sql(dialect, if key.is_some() { 6 } else { 5 }),
    );
    let offset = before.unwrap_or(0).max(0);
    let found: Vec<(i64,)> = sql!(db, |pool| {
        let mut query = sqlx::query_as(&sql)
            .bind(project)
            .bind(visible.as_json())
            .bind(limit + 1)
            .bind(offset);
        if let Some(key) = key {
            query = query.bind(key);
        }
        filters.bind(query).fetch_all(pool).await
    })?;
    let mut page: Vec<i64> = found.into_iter().map(|(seq,)| seq).collect();
    let more = page.len() as i64 > limit;
    page.truncate(limit as usize);
    let sql = format!(
        "{} WHERE {seq} IN (SELECT CAST(value AS BIGINT) FROM {})",
        select_runs(dialect),
        dialect.json_values("$1")
    );
    let mut rows: Vec<RunRow> = sql!(db, |pool| {
        sqlx::query_as(&sql)
            .bind(serde_json::to_string(&page).unwrap_or_else(|_| "[]".into()))
            .fetch_all(pool)
            .await
    })?;
    rows.sort_by_key(|row| page.iter().position(|seq| *seq == row.seq));
    Ok(Page {
        items: runs_from_rows(db, rows).await?,
        next_before: more.then_some(offset + limit),
    })
}

/// The key a config or metric column names.
fn column_key(column: &RunColumn) -> Option<&str> {
    match column {
        RunColumn::Config(key) | RunColumn::Metric(key) => Some(key),
        _ => None,
    }
}

/// The join a column reads through, the key bound as `?{key}`: a config
/// value `c`, a metric's series `m`, or the primary metric's [`primary::JOIN`].
fn join_for(column: &RunColumn, key: usize) -> String {
    match column {
        RunColumn::Config(_) => format!("LEFT JOIN run_config c ON c.run_id = r.id AND c.key = ${key}"),
        RunColumn::Metric(_) => format!("LEFT JOIN metric_series m ON m.run_id = r.id AND m.key = ${key}"),
        RunColumn::Primary => primary::JOIN.to_string(),
        _ => String::new(),
    }
}

/// What runs sort by in a column (over runs `r`, jobs `j` and
/// [`join_for`]): SQLite orders numbers before texts, and NULL (no value,
/// or a NaN) goes last.
fn sort_key(dialect: Dialect, column: &RunColumn) -> String {
    match column {
        RunColumn::Name => "lower(r.name)".into(),
        RunColumn::Status => STATUS.into(),
        RunColumn::Created => "r.created_at".into(),
        RunColumn::Duration => duration_ms(dialect),
        RunColumn::Tags => "nullif(r.tags, '[]')".into(),
        RunColumn::Primary => primary::SCORE.into(),
        RunColumn::Config(_) => details::config_sort_key(dialect, "c.value"),
        RunColumn::Metric(_) => ordered_bits("m.latest_bits"),
    }
}

/// An f64's bits (as SQLite's signed integer) as an integer that sorts
/// like the number: negative numbers have every bit but the sign flipped
/// (x XOR MAX, written with `|`, `&` and `~`). NaN gives NULL.
fn ordered_bits(bits: &str) -> String {
    const EXPONENT: i64 = 0x7FF0_0000_0000_0000;
    const FRACTION: i64 = 0x000F_FFFF_FFFF_FFFF;
    let max = i64::MAX;
    format!(
        "CASE WHEN ({bits} & {EXPONENT}) = {EXPONENT} AND ({bits} & {FRACTION}) != 0 THEN NULL
              WHEN {bits} >= 0 THEN {bits}
              ELSE ({bits} | {max}) & ~({bits} & {max}) END"
    )
}

/// What [`column_numbers`] reads of a run.
#[derive(sqlx::FromRow)]
struct PlotRow {
    seq: i64,
    number: Option<f64>,
    /// A metric's latest value, as its bits.
    bits: Option<i64>,
}

/// The number each matching run has in `column` (`None`: no finite number),
/// for plots: a numeric config value, a metric's latest value, the primary
/// metric's best value, the duration in seconds.
pub async fn column_numbers(
    db: &Db,
    visible: &Visible,
    project: Option<&str>,
    filters: &details::Filters,
    column: &RunColumn,
) -> Result<Vec<(i64, Option<f64>)>, Error> {
    let dialect = db.dialect();
    let (number, bits) = match column {
        RunColumn::Duration => (format!("({}) / 1000.0", duration_ms(dialect)), "NULL"),
        RunColumn::Primary => (
            "CASE (CASE WHEN r.primary_key IS NOT NULL THEN r.primary_goal ELSE pp.primary_goal END)
             WHEN 'max' THEN ps.max_value WHEN 'min' THEN ps.min_value END"
                .to_string(),
            "NULL",
        ),
        RunColumn::Config(_) => (details::config_number(dialect, "c.value"), "NULL"),
        RunColumn::Metric(_) => ("NULL".to_string(), "m.latest_bits"),
        _ => ("NULL".to_string(), "NULL"),
    };
    let key = column_key(column);
    let sql = format!(
        "SELECT {seq} AS seq, CAST({number} AS DOUBLE PRECISION) AS number, {bits} AS bits
         FROM runs r LEFT JOIN jobs j ON j.id = r.job_id {}
         WHERE ($1 IS NULL OR r.project = $1) AND ($2 IS NULL OR r.project IN (SELECT value FROM {})) {}",
        join_for(column, 3),
        dialect.json_values("$2"),
        filters.sql(dialect, if key.is_some() { 4 } else { 3 }),
        seq = run_seq(dialect),
    );
    let rows: Vec<PlotRow> = sql!(db, |pool| {
        let mut query = sqlx::query_as(&sql).bind(project).bind(visible.as_json());
        if let Some(key) = key {
            query = query.bind(key);
        }
        filters.bind(query).fetch_all(pool).await
    })?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let number = row
                .number
                .or_else(|| row.bits.map(|bits| f64::from_bits(bits as u64)));
            (row.seq, number.filter(|n| n.is_finite()))
        })
        .collect())
}

/// Runs from their rows, with their config and latest metrics read for all at once.
async fn runs_from_rows(db: &Db, rows: Vec<RunRow>) -> Result<Vec<Run>, Error> {
    let ids: Vec<&str> = rows.iter().map(|row| row.id.as_str()).collect();
    let mut latest = metrics::latest_of_runs(db, &ids).await?;
    let mut config = details::configs(db, &ids).await?;
    Ok(rows
        .into_iter()
        .map(|row| Run {
            latest: latest.remove(&row.id).unwrap_or_default(),
            config: config.remove(&row.id).unwrap_or_default(),
            tags: serde_json::from_str(&row.tags).unwrap_or_default(),
            notes: row.notes,
            primary_metric: row.primary.metric(),
            duration_s: row.duration_ms.map(|ms| ms.max(0) / 1000),
            id: row.id,
            job_id: row.job_id,
            project: row.project,
            name: row.name,
            status: row.status,
            created_at: rfc3339(row.created_at),
            archived_at: row.archived_at.map(rfc3339),
            metrics_events: Vec::new(),
        })
        .collect())
}

/// A run made by the SDK outside jobs, in a project where the caller is an editor.
pub async fn create(db: &Db, principal: &Principal, new: &NewRun) -> Result<String, Error> {
    let errors = gpuplane_api::experiment::check_run_name(&new.name);
    if !errors.is_empty() {
        return Err(Error::Invalid(errors));
    }
    let project = new.project.clone();
    let not_found = || {
        Error::field(
            "project",
            format!("no project named `{project}` that you can write to"),
        )
    };
    let exists: Option<String> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT name FROM projects WHERE name = $1")
            .bind(&new.project)
            .fetch_optional(pool)
            .await
    })?;
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
    let mut tx = crate::store::write(db).await?;
    sql!(tx, |conn| {
        sqlx::query(
        "INSERT INTO runs (id, job_id, project, name, created_at, created_by) VALUES ($1, NULL, $2, $3, $4, $5)",
    )
    .bind(&id)
    .bind(&new.project)
    .bind(new.name.trim())
    .bind(now_ms())
    .bind(&principal.user_id)
    .execute(conn)
    .await.map(|_| ())
    })?;
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
pub async fn finish(db: &Db, run_id: &str) -> Result<(), Error> {
    sql!(db, |pool| {
        sqlx::query(
            "UPDATE runs SET finished_at = coalesce(finished_at, $1) WHERE id = $2 AND job_id IS NULL",
        )
        .bind(now_ms())
        .bind(run_id)
        .execute(pool)
        .await
        .map(|_| ())
    })?;
    Ok(())
}

/// Finishes an SDK run, or reopens it (`finished: false`, when a script
/// resumes it). A job's run follows its job: 422 on `finished`.
pub async fn set_finished(conn: &mut Tx, run_id: &str, finished: bool) -> Result<(), Error> {
    let job: Option<Option<String>> = sql!(conn, |conn| {
        sqlx::query_scalar("SELECT job_id FROM runs WHERE id = $1")
            .bind(run_id)
            .fetch_optional(conn)
            .await
    })?;
    if job.flatten().is_some() {
        return Err(Error::field(
            "finished",
            "a job's run follows its job: cancel or retry the job instead",
        ));
    }
    sql!(conn, |conn| {
        sqlx::query(
            "UPDATE runs SET finished_at = CASE WHEN $1 THEN coalesce(finished_at, $2) END WHERE id = $3",
        )
        .bind(finished)
        .bind(now_ms())
        .bind(run_id)
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    Ok(())
}
