//! `/api/v1/jobs`: submit, validate, list, show, cancel, retry, priority, hold, release.

use crate::api::error::{ApiError, ApiJson, ApiQuery, AuthErrors, OptionalJson};
use crate::api::extract::{Authed, Read, Write};
use crate::audit;
use crate::identity::access::{self, Principal};
use crate::jobs::cancel::{self, Cancelled};
use crate::jobs::plan::{QueuedJob, plan};
use crate::jobs::store;
use crate::paging::{cursor, page_limit, sort_order};
use crate::state::AppState;
use crate::store::time::now_ms;
use crate::wake::Wake;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use gpuplane_api::Page;
use gpuplane_api::audit::AuditAction;
use gpuplane_api::error::{ErrorBody, FieldError};
use gpuplane_api::job::{CancelRequest, Job, JobSpec, JobStatus, RetryRequest, SetPriority};
use gpuplane_api::project::Role;
use gpuplane_api::spec;
use gpuplane_api::spec::SpecCheck;
use serde::Deserialize;

/// Queues a job; the answer carries its id and its run's id. With
/// `array`, queues a task per index (a job array) and answers with the
/// first task, whose `array` names the array.
#[utoipa::path(post, path = "/jobs", tag = "jobs",
    security(("bearer" = ["write"])),
    request_body = JobSpec,
    responses((status = 201, body = Job), AuthErrors,
        (status = 422, body = ErrorBody)))]
pub async fn submit_job(
    auth: Authed<Write>,
    State(state): State<AppState>,
    ApiJson(spec): ApiJson<JobSpec>,
) -> Result<(StatusCode, Json<Job>), ApiError> {
    refuse_recipe(&spec)?;
    spec::validate(&spec, &state.config.job_policy()).map_err(ApiError::Validation)?;
    check_priority(&state, &auth.caller.principal(), &spec.project, spec.priority).await?;
    let job_id = match spec.array {
        Some(_) => {
            crate::jobs::arrays::submit(&state.db, &state.secret, &spec, &auth.caller.principal()).await?
        }
        None => store::submit(&state.db, &state.secret, &spec, &auth.caller.principal()).await?,
    };
    state.wakes.wake(Wake::Scheduler);
    tracing::info!(
        job_id,
        name = spec.name,
        gpus = spec.resources.gpu,
        "job submitted"
    );
    Ok((StatusCode::CREATED, Json(store::get(&state.db, &job_id).await?)))
}

/// Checks a spec exactly as a submit would (fields, the server's image
/// allowlist, the project and the jobs it waits for) and says what would
/// keep it waiting now; stores nothing. `gpuctl validate --server` uses it.
#[utoipa::path(post, path = "/jobs/validate", tag = "jobs",
    security(("bearer" = ["write"])),
    request_body = JobSpec,
    responses((status = 200, body = SpecCheck), AuthErrors,
        (status = 422, body = ErrorBody)))]
pub async fn validate_job(
    auth: Authed<Write>,
    State(state): State<AppState>,
    ApiJson(spec): ApiJson<JobSpec>,
) -> Result<Json<SpecCheck>, ApiError> {
    refuse_recipe(&spec)?;
    spec::validate(&spec, &state.config.job_policy()).map_err(ApiError::Validation)?;
    let principal = auth.caller.principal();
    check_priority(&state, &principal, &spec.project, spec.priority).await?;
    store::check_references(&state.db, &spec, &principal).await?;
    let mut tx = crate::store::read(&state.db)
        .await
        .map_err(crate::store::Error::from)?;
    crate::jobs::node_policies::check(&mut tx, &spec).await?;
    drop(tx);
    Ok(Json(SpecCheck {
        notes: would_wait(&state, &spec, &principal).await?,
    }))
}

/// A plain spec may not claim a recipe: only the server, having checked
/// the experiment, records one (`POST /recipes/{name}/{version}/jobs`).
fn refuse_recipe(spec: &JobSpec) -> Result<(), ApiError> {
    match spec.recipe {
        Some(_) => Err(ApiError::field(
            "recipe",
            "is recorded by the server for jobs of an experiment: submit those with \
             `gpuctl job submit --exp DIR` (POST /api/v1/recipes/{name}/{version}/jobs)",
        )),
        None => Ok(()),
    }
}

/// Passes when the principal may give a job of `project` this priority
/// (`jobs::priorities`: preempting ones are for server admins, a project's
/// `max_priority` caps the rest).
pub(super) async fn check_priority(
    state: &AppState,
    principal: &Principal,
    project: &str,
    priority: i64,
) -> Result<(), ApiError> {
    let preempt = state.config.settings.preempt_priority;
    Ok(crate::jobs::priorities::check(&state.db, preempt, principal, project, priority).await?)
}

/// What would keep a job with `spec` waiting if it were submitted now: the
/// scheduler's own pass (`plan`) over this one job, the nodes and quotas as
/// they are, so the words are the reason the queued job would carry.
pub(super) async fn would_wait(
    state: &AppState,
    spec: &JobSpec,
    principal: &Principal,
) -> Result<Vec<String>, ApiError> {
    let maintenance = crate::jobs::maintenance::current(&state.db).await?;
    if maintenance.on {
        return Ok(vec![crate::jobs::maintenance::queued_reason(&maintenance)]);
    }
    let nodes = spec.resources.nodes.clamp(1, u32::MAX as i64) as u32;
    let (gpus, nodes) = crate::jobs::plan::shape(spec.runner, spec.resources.gpu.max(0) as u32, nodes);
    let job = QueuedJob {
        id: "job_new".into(),
        gpus,
        priority: spec.priority,
        node_selector: spec.node_selector.clone(),
        runner: spec.runner,
        not_before: None,
        next_attempt: 1,
        max_attempts: spec.max_attempts,
        project: spec.project.clone(),
        user: principal.user_id.clone(),
        after: Vec::new(),
        queued_at: now_ms(),
        fair_share_note: None,
        time_limit_ms: spec.time_limit_s.map(|s| s.saturating_mul(1000)),
        resume_node: None,
        nodes,
        colocate: spec.resources.colocate.clone(),
        array: None,
    };
    let jobs = state.jobs();
    let mut nodes = crate::jobs::scheduler::load_nodes(&jobs).await?;
    crate::jobs::scheduler::judge_windows(&jobs, &mut nodes, now_ms());
    let quotas = crate::jobs::quotas::for_plan(&state.db).await?;
    let rules = crate::jobs::scheduler::rules(&jobs);
    let access = crate::jobs::scheduler::node_access(&jobs).await?;
    let plan = plan(&[job], &nodes, &quotas, &access, rules, now_ms());
    Ok(plan.reasons.into_iter().map(|(_, reason)| reason).collect())
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only jobs in this state (QUEUED, RUNNING, ...).
    status: Option<String>,
    project: Option<String>,
    /// Only jobs this user (by name) submitted.
    user: Option<String>,
    /// Text found in the job's id or name (case-insensitive).
    q: Option<String>,
    /// `newest` (default) or `primary_metric`: the best value of each job's
    /// run's primary metric first, the top `limit` only.
    sort: Option<String>,
    /// Page size, 1–500 (default 50).
    limit: Option<i64>,
    /// `next_before` of the previous page.
    before: Option<i64>,
    /// `true`: jobs of archived runs only; left out or `false`: the others.
    archived: Option<bool>,
    /// Only the tasks of this job array (`arr_…`).
    array: Option<String>,
}

/// Jobs, newest first (or best primary metric first).
#[utoipa::path(get, path = "/jobs", tag = "jobs",
    security(("bearer" = ["read"])),
    params(ListQuery),
    responses((status = 200, body = Page<Job>), AuthErrors,
        (status = 422, body = ErrorBody)))]
pub async fn list_jobs(
    auth: Authed<Read>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<Page<Job>>, ApiError> {
    let mut errors = Vec::new();
    let status = match query.status.as_deref().map(str::parse::<JobStatus>) {
        Some(Err(message)) => {
            errors.push(FieldError {
                field: "status".into(),
                message,
            });
            None
        }
        Some(Ok(status)) => Some(status),
        None => None,
    };
    let limit = page_limit(query.limit, &mut errors);
    let before = cursor(query.before, &mut errors);
    let sort = sort_order(query.sort.as_deref(), &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let visible = access::visible_projects(&state.db, &auth.caller.principal()).await?;
    let filter = store::ListFilter {
        status,
        project: query.project.as_deref(),
        user: query.user.as_deref(),
        text: query.q.as_deref(),
        archived: query.archived.unwrap_or(false),
        array: query.array.as_deref(),
        sort,
        limit,
        before,
    };
    Ok(Json(store::list(&state.db, &visible, filter).await?))
}

/// One job with its attempts and, while QUEUED, why it waits.
#[utoipa::path(get, path = "/jobs/{job_id}", tag = "jobs",
    security(("bearer" = ["read"])),
    params(("job_id" = String, Path)),
    responses((status = 200, body = Job), AuthErrors,
        (status = 404, body = ErrorBody)))]
pub async fn get_job(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(job_id): Path<String>,
) -> Result<Json<Job>, ApiError> {
    Ok(Json(
        store::get_for(&state.db, &auth.caller.principal(), &job_id, Role::Viewer).await?,
    ))
}

/// Cancels a job. Needs `{"confirm": true}`: a running job is stopped
/// (SIGTERM, then SIGKILL after the grace period).
#[utoipa::path(post, path = "/jobs/{job_id}/cancel", tag = "jobs",
    security(("bearer" = ["write"])),
    params(("job_id" = String, Path)),
    request_body = CancelRequest,
    responses((status = 200, body = Job), AuthErrors,
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn cancel_job(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(job_id): Path<String>,
    OptionalJson(request): OptionalJson<CancelRequest>,
) -> Result<Json<Job>, ApiError> {
    // Unknown (or invisible) jobs are 404 before anything else.
    let job = store::get_for(&state.db, &auth.caller.principal(), &job_id, Role::Editor).await?;
    if !request.confirm {
        return Err(ApiError::field(
            "confirm",
            "must be true: cancelling stops the job (gpuctl job cancel ID --confirm)",
        ));
    }
    match cancel::cancel(&state.db, &job_id).await? {
        Cancelled::Now => state.wakes.wake(Wake::Scheduler),
        Cancelled::Stopping { node_ids } => {
            for node_id in node_ids {
                state.wakes.wake(Wake::Agent(node_id));
            }
        }
    }
    let detail = format!("was {}", job.status);
    audit::by_caller(&state.db, &auth.caller, AuditAction::JobCancel, &job_id, &detail).await?;
    state.wakes.wake(Wake::Events);
    Ok(Json(store::get(&state.db, &job_id).await?))
}

/// Queues a FAILED, LOST or CANCELLED job for another attempt, with
/// `set` changes to its spec. An OOM failure is not retried unchanged
/// unless `force` (409 with the advice). Changes by anyone but the job's
/// submitter make a new job of theirs instead, without the job's secrets
/// (the answer is that job: its `id` differs).
#[utoipa::path(post, path = "/jobs/{job_id}/retry", tag = "jobs",
    security(("bearer" = ["write"])),
    params(("job_id" = String, Path)),
    request_body = RetryRequest,
    responses((status = 200, body = Job), AuthErrors,
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn retry_job(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(job_id): Path<String>,
    OptionalJson(request): OptionalJson<RetryRequest>,
) -> Result<Json<Job>, ApiError> {
    let principal = auth.caller.principal();
    let job = store::get_for(&state.db, &principal, &job_id, Role::Editor).await?;
    let mut changed = job.spec.clone();
    let applied = spec::apply_changes(&mut changed, &request.set).is_ok();
    let submitters = job.submitted_by.is_some() && job.submitted_by == principal.user_name;
    if applied && changed != job.spec && !submitters {
        return retry_as_new_job(auth, state, job, changed).await;
    }
    if applied && changed.priority != job.spec.priority {
        check_priority(&state, &principal, &job.project, changed.priority).await?;
    }
    store::retry(&state.db, &job_id, &request, &state.config.job_policy()).await?;
    let mut detail: Vec<String> = request
        .set
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    if detail.is_empty() {
        detail.push("unchanged".into());
    }
    if request.force {
        detail.push("forced".into());
    }
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::JobRetry,
        &job_id,
        &detail.join(", "),
    )
    .await?;
    state.wakes.wake(Wake::Scheduler);
    Ok(Json(store::get(&state.db, &job_id).await?))
}

/// A retry with changes by anyone but the submitter: the changed spec
/// becomes a new job of the caller's, checked as a new submission (its
/// priority too), without the original's secrets, which belong to whoever
/// set them. The original job stays as it ended.
async fn retry_as_new_job(
    auth: Authed<Write>,
    state: AppState,
    original: Job,
    mut spec: JobSpec,
) -> Result<Json<Job>, ApiError> {
    let principal = auth.caller.principal();
    spec.secret_env.clear();
    spec::validate(&spec, &state.config.job_policy()).map_err(ApiError::Validation)?;
    check_priority(&state, &principal, &spec.project, spec.priority).await?;
    let job_id = store::submit(&state.db, &state.secret, &spec, &principal).await?;
    let secrets = if original.secret_env.is_empty() {
        String::new()
    } else {
        format!(" without its secrets ({})", original.secret_env.join(", "))
    };
    let detail = format!("retried with changes as new job {job_id}{secrets}");
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::JobRetry,
        &original.id,
        &detail,
    )
    .await?;
    state.wakes.wake(Wake::Scheduler);
    tracing::info!(
        job_id,
        retried = original.id,
        "a retry with changes became a new job"
    );
    Ok(Json(store::get(&state.db, &job_id).await?))
}

/// Changes a QUEUED job's priority (editors): higher runs first.
#[utoipa::path(post, path = "/jobs/{job_id}/priority", tag = "jobs",
    security(("bearer" = ["write"])),
    params(("job_id" = String, Path)),
    request_body = SetPriority,
    responses((status = 200, body = Job), AuthErrors,
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set_priority(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(job_id): Path<String>,
    ApiJson(request): ApiJson<SetPriority>,
) -> Result<Json<Job>, ApiError> {
    let principal = auth.caller.principal();
    let job = store::get_for(&state.db, &principal, &job_id, Role::Editor).await?;
    check_priority(&state, &principal, &job.project, request.priority).await?;
    store::set_priority(&state.db, &job_id, request.priority).await?;
    let detail = format!("priority {} → {}", job.priority, request.priority);
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::JobPriority,
        &job_id,
        &detail,
    )
    .await?;
    state.wakes.jobs_changed();
    Ok(Json(store::get(&state.db, &job_id).await?))
}

/// Holds a QUEUED job (editors): it is not scheduled until released.
#[utoipa::path(post, path = "/jobs/{job_id}/hold", tag = "jobs",
    security(("bearer" = ["write"])),
    params(("job_id" = String, Path)),
    responses((status = 200, body = Job), AuthErrors,
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn hold_job(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(job_id): Path<String>,
) -> Result<Json<Job>, ApiError> {
    store::get_for(&state.db, &auth.caller.principal(), &job_id, Role::Editor).await?;
    store::hold(&state.db, &job_id, auth.caller.user_name.as_deref()).await?;
    audit::by_caller(&state.db, &auth.caller, AuditAction::JobHold, &job_id, "").await?;
    state.wakes.jobs_changed();
    Ok(Json(store::get(&state.db, &job_id).await?))
}

/// Releases a held job (editors): the scheduler may start it again.
#[utoipa::path(post, path = "/jobs/{job_id}/release", tag = "jobs",
    security(("bearer" = ["write"])),
    params(("job_id" = String, Path)),
    responses((status = 200, body = Job), AuthErrors,
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn release_job(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(job_id): Path<String>,
) -> Result<Json<Job>, ApiError> {
    store::get_for(&state.db, &auth.caller.principal(), &job_id, Role::Editor).await?;
    store::release(&state.db, &job_id).await?;
    audit::by_caller(&state.db, &auth.caller, AuditAction::JobRelease, &job_id, "").await?;
    state.wakes.jobs_changed();
    Ok(Json(store::get(&state.db, &job_id).await?))
}
