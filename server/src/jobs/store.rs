//! Jobs in SQLite: submit, read, list, cancel, retry. Transitions driven by
//! agents live in `lifecycle`, dispatch decisions in `scheduler`.

use crate::identity::access::{self, Principal, Visible};
use crate::identity::secrets::SecretKey;
use crate::paging::Sort;
use crate::runs::primary;
use crate::store::Error;
use crate::store::ids::new_id;
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use crate::store::{Db, Tx};
use gpuplane_api::Page;
use gpuplane_api::array::ArrayTask;
use gpuplane_api::error::FieldError;
use gpuplane_api::job::{Attempt, FailureReason, Job, JobSpec, JobStatus, RetryRequest, signal_name};
use gpuplane_api::project::Role;
use gpuplane_api::recipe::FolderFile;
use std::collections::HashMap;

/// The reason a job carries until the scheduler has looked at it.
pub const WAITING_FOR_SCHEDULER: &str = "waiting for the scheduler";

/// Stores a validated spec as a QUEUED job with its run; returns the job id.
/// The submitter must be an editor of the job's project.
pub async fn submit(
    db: &Db,
    secret: &SecretKey,
    spec: &JobSpec,
    principal: &Principal,
) -> Result<String, Error> {
    check_references(db, spec, principal).await?;
    let mut tx = crate::store::write(db).await?;
    let job_id = insert(&mut tx, secret, spec, principal.user_id.as_deref()).await?;
    tx.commit().await?;
    Ok(job_id)
}

/// What a well-formed spec names must exist and be the submitter's to use:
/// its project (as an editor) and the jobs it waits for (visible to them).
pub async fn check_references(db: &Db, spec: &JobSpec, principal: &Principal) -> Result<(), Error> {
    let project = spec.project.clone();
    let no_project = || {
        Error::field(
            "project",
            format!("no project named `{project}` that you can submit to"),
        )
    };
    access::require(db, principal, &spec.project, Role::Editor, no_project).await?;
    // Admins pass the role check for any name: the project must also exist.
    let exists: Option<String> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT name FROM projects WHERE name = $1")
            .bind(&spec.project)
            .fetch_optional(pool)
            .await
    })?;
    if exists.is_none() {
        return Err(no_project());
    }
    for (at, text) in spec.after.iter().enumerate() {
        let Ok(dependency) = text.parse::<gpuplane_api::job::Dependency>() else {
            continue; // validation named it already
        };
        let project: Option<String> = sql!(db, |pool| {
            sqlx::query_scalar("SELECT project FROM jobs WHERE id = $1")
                .bind(&dependency.job_id)
                .fetch_optional(pool)
                .await
        })?;
        let visible = match project {
            Some(project) => access::role_in(db, principal, &project).await?.is_some(),
            None => false,
        };
        if !visible {
            return Err(Error::field(
                format!("after[{at}]"),
                format!("no job {} that you can see", dependency.job_id),
            ));
        }
    }
    Ok(())
}

/// Inserts a validated spec as a QUEUED job with its run, in the caller's
/// transaction; returns the job id.
pub async fn insert(
    conn: &mut Tx,
    secret: &SecretKey,
    spec: &JobSpec,
    user_id: Option<&str>,
) -> Result<String, Error> {
    crate::jobs::node_policies::check(conn, spec).await?;
    let now = now_ms();
    let job_id = new_id("job");
    let run_id = new_id("run");
    // Secret values are stored sealed, bound to this job and their name.
    let mut stored = spec.clone();
    for (name, value) in stored.secret_env.iter_mut() {
        *value = secret.seal(&job_id, name, value);
    }
    let spec_json = serde_json::to_string(&stored).map_err(anyhow::Error::from)?;
    let selector = serde_json::to_string(&spec.node_selector).map_err(anyhow::Error::from)?;
    let after = if spec.after.is_empty() {
        None
    } else {
        Some(serde_json::to_string(&spec.after).map_err(anyhow::Error::from)?)
    };
    sql!(conn, |conn| {
        sqlx::query(
        "INSERT INTO jobs (id, project, name, kind, spec, gpus, node_selector, priority, max_attempts, status,
                           queued_reason, queued_at, run_id, submitted_by, created_at, updated_at, after_jobs, runner,
                           nodes, colocate)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'QUEUED', $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)",
    )
    .bind(&job_id)
    .bind(&spec.project)
    .bind(&spec.name)
    .bind(spec.kind.as_str())
    .bind(spec_json)
    .bind(spec.resources.gpu)
    .bind(selector)
    .bind(spec.priority)
    .bind(spec.max_attempts)
    .bind(WAITING_FOR_SCHEDULER)
    .bind(now)
    .bind(&run_id)
    .bind(user_id)
    .bind(now)
    .bind(now)
    .bind(after)
    .bind(spec.runner.as_str())
    .bind(spec.resources.nodes)
    .bind(&spec.resources.colocate)
    .execute(conn)
    .await.map(|_| ())
    })?;
    sql!(conn, |conn| {
        sqlx::query(
            "INSERT INTO runs (id, job_id, project, name, created_at, tags) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&run_id)
        .bind(&job_id)
        .bind(&spec.project)
        .bind(&spec.name)
        .bind(now)
        .bind(crate::runs::details::tags_json(&spec.tags))
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    Ok(job_id)
}

#[derive(sqlx::FromRow)]
struct JobRow {
    seq: i64,
    id: String,
    project: String,
    name: String,
    spec: String,
    status: String,
    failure_reason: Option<String>,
    failure_detail: Option<String>,
    queued_reason: Option<String>,
    held: bool,
    run_id: String,
    priority: i64,
    max_attempts: i64,
    submitted_by: Option<String>,
    created_at: i64,
    updated_at: i64,
    array_id: Option<String>,
    array_index: Option<i64>,
    array_tasks: Option<i64>,
    array_limit: Option<i64>,
    sweep_id: Option<String>,
    sweep_trial: Option<i64>,
    #[sqlx(flatten)]
    primary: primary::Columns,
}

#[derive(sqlx::FromRow)]
struct AttemptRow {
    job_id: String,
    n: i64,
    node_id: String,
    node_name: String,
    gpus: String,
    status: String,
    dispatched_at: i64,
    started_at: Option<i64>,
    ended_at: Option<i64>,
    exit_code: Option<i64>,
    signal: Option<i64>,
    failure_reason: Option<String>,
    failure_detail: Option<String>,
    git_commit: Option<String>,
    resume_path: Option<String>,
    resume_step: Option<i64>,
}

/// What job queries select from: jobs `j`, their submitter `u`, their
/// array `ja`, their sweep trial `st`, their run `r` and its primary
/// metric ([`primary::JOIN`]).
fn jobs_from() -> String {
    format!(
        "SELECT {JOB_COLUMNS}, {} FROM jobs j LEFT JOIN users u ON u.id = j.submitted_by
         LEFT JOIN job_arrays ja ON ja.id = j.array_id LEFT JOIN sweep_trials st ON st.job_id = j.id
         JOIN runs r ON r.id = j.run_id {}",
        primary::COLUMNS,
        primary::JOIN
    )
}

/// Stores the experiment folder shipped with a job (`spec.recipe.shipped`),
/// checked by `gpuplane_api::recipe::check_folder`; it goes with each dispatch.
pub async fn insert_folder(tx: &mut Tx, job_id: &str, files: &[FolderFile]) -> Result<(), Error> {
    if files.is_empty() {
        return Ok(());
    }
    let files = serde_json::to_string(files).map_err(anyhow::Error::from)?;
    sql!(tx, |conn| {
        sqlx::query("INSERT INTO experiment_folders (job_id, files) VALUES ($1, $2)")
            .bind(job_id)
            .bind(&files)
            .execute(conn)
            .await
            .map(|_| ())
    })?;
    Ok(())
}

/// The experiment folder shipped with a job (empty: none was).
pub async fn folder(db: &Db, job_id: &str) -> Result<Vec<FolderFile>, Error> {
    let files: Option<String> = sql!(db, |pool| {
        sqlx::query_scalar("SELECT files FROM experiment_folders WHERE job_id = $1")
            .bind(job_id)
            .fetch_optional(pool)
            .await
    })?;
    match files {
        Some(files) => Ok(serde_json::from_str(&files).map_err(anyhow::Error::from)?),
        None => Ok(Vec::new()),
    }
}

const JOB_COLUMNS: &str = "j.seq, j.id, j.project, j.name, j.spec, j.status, j.failure_reason, j.failure_detail,
    j.queued_reason, j.held_at IS NOT NULL AS held, j.run_id, j.priority, j.max_attempts, u.name AS submitted_by, j.created_at, j.updated_at,
    j.array_id, j.array_index, ja.tasks AS array_tasks, ja.max_running AS array_limit,
    st.sweep_id, st.number AS sweep_trial";

/// One job the principal may see, checked for at least `needed`; a job of
/// another project is "not found", exactly like one that does not exist.
pub async fn get_for(db: &Db, principal: &Principal, job_id: &str, needed: Role) -> Result<Job, Error> {
    let job = get(db, job_id).await?;
    access::require(db, principal, &job.project, needed, || {
        Error::NotFound(format!("no job {job_id}"))
    })
    .await?;
    Ok(job)
}

/// One job with its attempts (no access check: see [`get_for`]). Job and
/// attempts are read in one transaction, so they agree (a job is never
/// seen QUEUED with the attempt that dispatched it).
pub async fn get(db: &Db, job_id: &str) -> Result<Job, Error> {
    let mut read = crate::store::read(db).await?;
    let row: Option<JobRow> = sql!(read, |conn| {
        sqlx::query_as(&format!("{} WHERE j.id = $1", jobs_from()))
            .bind(job_id)
            .fetch_optional(conn)
            .await
    })?;
    let row = row.ok_or_else(|| Error::NotFound(format!("no job {job_id}")))?;
    let mut attempts = attempts_of(&mut read, std::slice::from_ref(&row.id)).await?;
    job_from_row(row, attempts.remove(job_id).unwrap_or_default())
}

/// Jobs of the visible projects, optionally of one status and project:
/// newest first, `limit` per page, or their runs' best primary metric first
/// (then only the top `limit`).
pub struct ListFilter<'a> {
    pub status: Option<JobStatus>,
    pub project: Option<&'a str>,
    /// The name of the user who submitted it.
    pub user: Option<&'a str>,
    /// Text found in the job's id or name (case-insensitive).
    pub text: Option<&'a str>,
    /// Jobs of archived runs only, else only the others.
    pub archived: bool,
    /// The tasks of one job array.
    pub array: Option<&'a str>,
    pub sort: Sort,
    pub limit: i64,
    pub before: Option<i64>,
}

pub async fn list(db: &Db, visible: &Visible, filter: ListFilter<'_>) -> Result<Page<Job>, Error> {
    let order = match filter.sort {
        Sort::Newest => "j.seq DESC".to_string(),
        Sort::PrimaryMetric => primary::best_first("j.seq"),
    };
    // One transaction: jobs and their attempts read from the same snapshot.
    let dialect = db.dialect();
    let visible_projects = dialect.json_values("$5");
    let text_matches = dialect.contains("lower(j.id || ' ' || j.name)", "lower($7)");
    let mut read = crate::store::read(db).await?;
    let rows: Vec<JobRow> = sql!(read, |conn| {
        sqlx::query_as(&format!(
        "{} WHERE ($1 IS NULL OR j.status = $1) AND ($2 IS NULL OR j.project = $2) AND ($3 IS NULL OR j.seq < $3)
           AND ($5 IS NULL OR j.project IN (SELECT value FROM {visible_projects}))
           AND ($6 IS NULL OR u.name = $6)
           AND ($7 IS NULL OR {text_matches})
           AND (j.archived_at IS NOT NULL) = $8
           AND ($9 IS NULL OR j.array_id = $9)
         ORDER BY {order} LIMIT $4",
        jobs_from()
    ))
    .bind(filter.status.map(JobStatus::as_str))
    .bind(filter.project)
    .bind(filter.before.filter(|_| filter.sort == Sort::Newest))
    .bind(filter.limit + 1)
    .bind(visible.as_json())
    .bind(filter.user)
    .bind(filter.text.filter(|text| !text.is_empty()))
    .bind(filter.archived)
    .bind(filter.array)
    .fetch_all(conn)
    .await
    })?;
    let (rows, next_before) = crate::paging::split(rows, filter.limit, |row| row.seq);
    let next_before = next_before.filter(|_| filter.sort == Sort::Newest);
    let ids: Vec<String> = rows.iter().map(|row| row.id.clone()).collect();
    let mut attempts = attempts_of(&mut read, &ids).await?;
    let items = rows
        .into_iter()
        .map(|row| {
            let attempts = attempts.remove(&row.id).unwrap_or_default();
            job_from_row(row, attempts)
        })
        .collect::<Result<_, _>>()?;
    Ok(Page { items, next_before })
}

async fn attempts_of(db: &mut Tx, job_ids: &[String]) -> Result<HashMap<String, Vec<Attempt>>, Error> {
    let mut by_job: HashMap<String, Vec<Attempt>> = HashMap::new();
    if job_ids.is_empty() {
        return Ok(by_job);
    }
    let ids = serde_json::to_string(job_ids).map_err(anyhow::Error::from)?;
    let job_ids = db.dialect().json_values("$1");
    let rows: Vec<AttemptRow> = sql!(db, |conn| {
        sqlx::query_as(&format!(
        "SELECT a.job_id, a.n, a.node_id, n.name AS node_name, a.gpus, a.status, a.dispatched_at,
                a.started_at, a.ended_at, a.exit_code, a.signal, a.failure_reason, a.failure_detail, a.git_commit,
                a.resume_path, a.resume_step
         FROM attempts a JOIN nodes n ON n.id = a.node_id
         WHERE a.job_id IN (SELECT value FROM {job_ids})
         ORDER BY a.job_id, a.n"
    ))
    .bind(&ids)
    .fetch_all(conn)
    .await
    })?;
    let mut members = crate::jobs::members::of_jobs(db, &ids).await?;
    for row in rows {
        let signal = row.signal.map(|s| s as i32);
        let members = members.remove(&(row.job_id.clone(), row.n)).unwrap_or_default();
        by_job.entry(row.job_id).or_default().push(Attempt {
            n: row.n,
            node: row.node_name,
            node_id: row.node_id,
            gpus: serde_json::from_str(&row.gpus).unwrap_or_default(),
            status: parse_status(&row.status)?,
            dispatched_at: rfc3339(row.dispatched_at),
            started_at: row.started_at.map(rfc3339),
            ended_at: row.ended_at.map(rfc3339),
            exit_code: row.exit_code.map(|c| c as i32),
            signal,
            signal_name: signal.and_then(signal_name).map(str::to_string),
            failure_reason: row.failure_reason.as_deref().and_then(FailureReason::parse),
            failure_detail: row.failure_detail,
            git_commit: row.git_commit,
            resume_from: row.resume_path,
            resume_step: row.resume_step,
            members,
        });
    }
    Ok(by_job)
}

fn parse_status(text: &str) -> Result<JobStatus, Error> {
    text.parse()
        .map_err(|error: String| Error::Internal(anyhow::anyhow!("bad status in database: {error}")))
}

fn job_from_row(row: JobRow, attempts: Vec<Attempt>) -> Result<Job, Error> {
    let mut spec: JobSpec = serde_json::from_str(&row.spec)
        .map_err(|error| Error::Internal(anyhow::anyhow!("bad spec of {} in database: {error}", row.id)))?;
    // Secret values never leave the server except to the job's agent.
    let secret_env: Vec<String> = std::mem::take(&mut spec.secret_env).into_keys().collect();
    let status = parse_status(&row.status)?;
    Ok(Job {
        primary_metric: row.primary.metric(),
        id: row.id,
        name: row.name,
        project: row.project,
        kind: spec.kind,
        status,
        failure_reason: row.failure_reason.as_deref().and_then(FailureReason::parse),
        failure_detail: row.failure_detail,
        // A dispatched job that an engine holds queued (Slurm) has one too.
        queued_reason: if matches!(status, JobStatus::Queued | JobStatus::Dispatching) {
            row.queued_reason
        } else {
            None
        },
        held: status == JobStatus::Queued && row.held,
        run_id: row.run_id,
        priority: row.priority,
        resources: spec.resources.clone(),
        max_attempts: row.max_attempts,
        preemptions: attempts
            .iter()
            .filter(|attempt| attempt.failure_reason == Some(FailureReason::Preempted))
            .count() as i64,
        attempts,
        spec,
        secret_env,
        sweep: row.sweep_id.map(|id| gpuplane_api::sweep::TrialOf {
            id,
            trial: row.sweep_trial.unwrap_or(0).max(0) as u64,
        }),
        array: row.array_id.map(|id| ArrayTask {
            id,
            index: row.array_index.unwrap_or(0).clamp(0, u32::MAX as i64) as u32,
            tasks: row.array_tasks.unwrap_or(0).clamp(0, u32::MAX as i64) as u32,
            limit: row.array_limit.map(|n| n.clamp(0, u32::MAX as i64) as u32),
        }),
        submitted_by: row.submitted_by,
        created_at: rfc3339(row.created_at),
        updated_at: rfc3339(row.updated_at),
    })
}

/// Changes a QUEUED job's priority (and its spec's, so both agree); the
/// next scheduling pass orders the queue by it.
pub async fn set_priority(db: &Db, job_id: &str, priority: i64) -> Result<(), Error> {
    if !gpuplane_api::valid_priority(priority) {
        return Err(Error::Invalid(vec![FieldError {
            field: "priority".into(),
            message: "must be between -2^62 and 2^62 (MAX_I64_SAFE)".into(),
        }]));
    }
    let mut tx = crate::store::write(db).await?;
    require_queued(&mut tx, job_id, "given a new priority").await?;
    let spec = tx.dialect().pick(
        "json_set(spec, '$.priority', $2)",
        "CAST(jsonb_set(CAST(spec AS JSONB), '{priority}', to_jsonb($2)) AS TEXT)",
    );
    sql!(tx, |conn| {
        sqlx::query(&format!(
            "UPDATE jobs SET priority = $1, spec = {spec}, updated_at = $3 WHERE id = $4"
        ))
        .bind(priority)
        .bind(priority)
        .bind(now_ms())
        .bind(job_id)
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    tx.commit().await?;
    Ok(())
}

/// Holds a QUEUED job (`by` says who): it stays QUEUED and is not scheduled
/// until [`release`]; its reason says so.
pub async fn hold(db: &Db, job_id: &str, by: Option<&str>) -> Result<(), Error> {
    let now = now_ms();
    let mut tx = crate::store::write(db).await?;
    require_queued(&mut tx, job_id, "held").await?;
    let reason = format!(
        "held by {} since {}: `gpuctl job release {job_id}` lets it start",
        by.unwrap_or("an admin"),
        rfc3339(now)
    );
    sql!(tx, |conn| {
        sqlx::query(
        "UPDATE jobs SET held_by = $1, held_at = coalesce(held_at, $2), queued_reason = $3, updated_at = $4 WHERE id = $5",
    )
    .bind(by)
    .bind(now)
    .bind(reason)
    .bind(now)
    .bind(job_id)
    .execute(conn)
    .await.map(|_| ())
    })?;
    tx.commit().await?;
    Ok(())
}

/// Lets a held job be scheduled again.
pub async fn release(db: &Db, job_id: &str) -> Result<(), Error> {
    let mut tx = crate::store::write(db).await?;
    require_queued(&mut tx, job_id, "released").await?;
    sql!(tx, |conn| {
        sqlx::query(
            "UPDATE jobs SET held_by = NULL, held_at = NULL, queued_reason = $1, updated_at = $2
         WHERE id = $3 AND held_at IS NOT NULL",
        )
        .bind(WAITING_FOR_SCHEDULER)
        .bind(now_ms())
        .bind(job_id)
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    tx.commit().await?;
    Ok(())
}

/// A 409 naming what could not be done unless the job is QUEUED.
async fn require_queued(conn: &mut Tx, job_id: &str, what: &str) -> Result<(), Error> {
    match current_status(conn, job_id).await? {
        JobStatus::Queued => Ok(()),
        other => Err(Error::Conflict(format!(
            "job {job_id} is {other}: only QUEUED jobs can be {what}"
        ))),
    }
}

/// Queues a FAILED, LOST or CANCELLED job for a new attempt (beyond
/// max_attempts if need be), with the requested changes to its spec. A job
/// that ran out of memory is not retried unchanged unless forced.
pub async fn retry(
    db: &Db,
    job_id: &str,
    request: &RetryRequest,
    policy: &gpuplane_api::spec::Policy,
) -> Result<(), Error> {
    let job = get(db, job_id).await?;
    let mut spec = job.spec.clone();
    gpuplane_api::spec::apply_changes(&mut spec, &request.set).map_err(Error::Invalid)?;
    // Checked with the names of its secrets (their values are not shown), so
    // a change cannot put one of them in `env` too.
    let mut checked = spec.clone();
    checked.secret_env = job
        .secret_env
        .iter()
        .map(|name| (name.clone(), String::new()))
        .collect();
    gpuplane_api::spec::validate(&checked, policy).map_err(Error::Invalid)?;
    let changed = spec != job.spec;
    if job.failure_reason == Some(FailureReason::Oom) && !changed && !request.force {
        return Err(Error::Conflict(format!(
            "job {job_id} ran out of memory ({}); retrying unchanged will fail the same way: lower the batch size or \
             enable gradient checkpointing, then retry with changes (gpuctl job retry {job_id} --set env.BATCH_SIZE=16), \
             or add --force",
            job.failure_detail.as_deref().unwrap_or("OOM")
        )));
    }
    let now = now_ms();
    let mut tx = crate::store::write(db).await?;
    // Under the policy as it is now, changed or not.
    crate::jobs::node_policies::check(&mut tx, &spec).await?;
    if changed {
        // Keep the sealed secrets the shown spec leaves out.
        let secret_env = tx.dialect().json_field("spec", "secret_env");
        let sealed: Option<String> = sql!(tx, |conn| {
            sqlx::query_scalar(&format!("SELECT {secret_env} FROM jobs WHERE id = $1"))
                .bind(job_id)
                .fetch_one(conn)
                .await
        })?;
        spec.secret_env = sealed
            .and_then(|json| serde_json::from_str(&json).ok())
            .unwrap_or_default();
        sql!(tx, |conn| {
            sqlx::query("UPDATE jobs SET spec = $1, gpus = $2, node_selector = $3, priority = $4, max_attempts = $5, runner = $6,
                         nodes = $7 WHERE id = $8")
            .bind(serde_json::to_string(&spec).map_err(anyhow::Error::from)?)
            .bind(spec.resources.gpu)
            .bind(serde_json::to_string(&spec.node_selector).map_err(anyhow::Error::from)?)
            .bind(spec.priority)
            .bind(spec.max_attempts)
            .bind(spec.runner.as_str())
            .bind(spec.resources.nodes)
            .bind(job_id)
            .execute(conn)
            .await.map(|_| ())
        })?;
    }
    match current_status(&mut tx, job_id).await? {
        JobStatus::Failed | JobStatus::Lost | JobStatus::Cancelled => {}
        JobStatus::Succeeded => {
            return Err(Error::Conflict(format!(
                "job {job_id} succeeded; submit a new job to run it again"
            )));
        }
        other => {
            return Err(Error::Conflict(format!(
                "job {job_id} is {other}; only ended jobs can be retried"
            )));
        }
    }
    super::resume::prepare(&mut tx, job_id).await?;
    let max_attempts = tx.dialect().greatest("max_attempts", "attempt_count + 1");
    sql!(tx, |conn| {
        sqlx::query(&format!(
            "UPDATE jobs SET status = 'QUEUED', failure_reason = NULL, failure_detail = NULL,
             queued_reason = $1, queued_at = $2, not_before = NULL, cancel_requested_at = NULL,
             cancel_reason = NULL, cancel_detail = NULL,
             max_attempts = {max_attempts}, updated_at = $3
         WHERE id = $4"
        ))
        .bind(WAITING_FOR_SCHEDULER)
        .bind(now)
        .bind(now)
        .bind(job_id)
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    tx.commit().await?;
    Ok(())
}

/// The id of a job's run.
pub async fn run_of(conn: &mut Tx, job_id: &str) -> Result<String, Error> {
    Ok(sql!(conn, |conn| {
        sqlx::query_scalar("SELECT run_id FROM jobs WHERE id = $1")
            .bind(job_id)
            .fetch_one(conn)
            .await
    })?)
}

pub async fn current_status(conn: &mut Tx, job_id: &str) -> Result<JobStatus, Error> {
    let status: Option<String> = sql!(conn, |conn| {
        sqlx::query_scalar("SELECT status FROM jobs WHERE id = $1")
            .bind(job_id)
            .fetch_optional(conn)
            .await
    })?;
    parse_status(&status.ok_or_else(|| Error::NotFound(format!("no job {job_id}")))?)
}

/// The GPUs that active attempts hold.
pub async fn gpus_in_use(db: &Db) -> Result<i64, Error> {
    let gpus = db.dialect().json_length("gpus");
    Ok(sql!(db, |pool| {
        sqlx::query_scalar(&format!(
            "SELECT CAST(coalesce(sum({gpus}), 0) AS BIGINT) FROM attempts WHERE status IN ('DISPATCHING', 'RUNNING')"
        ))
        .fetch_one(pool)
        .await
    })?)
}

/// How many jobs are in each status that has any.
pub async fn counts_by_status(db: &Db) -> Result<Vec<(String, i64)>, Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_as("SELECT status, count(*) FROM jobs GROUP BY status")
            .fetch_all(pool)
            .await
    })?)
}

/// The id, name and status of the node that ran the job's attempt `attempt`.
pub async fn attempt_node(
    db: &Db,
    job_id: &str,
    attempt: i64,
) -> Result<Option<(String, String, String)>, Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_as(
            "SELECT n.id, n.name, n.status FROM attempts a JOIN nodes n ON n.id = a.node_id WHERE a.job_id = $1 AND a.n = $2",
        )
        .bind(job_id)
        .bind(attempt)
        .fetch_optional(pool)
        .await
    })?)
}
