//! `/api/v1/sweeps`: create a sweep from a W&B-style sweep file, list and
//! show sweeps (a show has every trial), and pause, resume or stop one.
//! A sweep belongs to its project: viewers read it, editors create and
//! change it, anyone else gets 404. Its trials are jobs of the project
//! (`/jobs/{id}`), made by the controller as the sweep's creator.

use crate::api::error::{ApiError, ApiJson, ApiQuery, AuthErrors, OptionalJson};
use crate::api::extract::{Authed, Read, Write};
use crate::audit;
use crate::paging::{cursor, page_limit};
use crate::state::AppState;
use crate::sweeps::{self, store};
use crate::wake::Wake;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use gpuplane_api::Page;
use gpuplane_api::audit::AuditAction;
use gpuplane_api::error::ErrorBody;
use gpuplane_api::job::CancelRequest;
use gpuplane_api::project::Role;
use gpuplane_api::sweep::{Sweep, SweepAction, SweepSpec};
use serde::Deserialize;

/// Creates a sweep: checks the file and its first trial's job as a submit
/// would, then the controller makes trials within a second.
#[utoipa::path(post, path = "/sweeps", tag = "sweeps",
    security(("bearer" = ["write"])),
    request_body = SweepSpec,
    responses((status = 201, body = Sweep), AuthErrors,
        (status = 422, body = ErrorBody)))]
pub async fn create_sweep(
    auth: Authed<Write>,
    State(state): State<AppState>,
    ApiJson(spec): ApiJson<SweepSpec>,
) -> Result<(StatusCode, Json<Sweep>), ApiError> {
    let principal = auth.caller.principal();
    let (checked, trial) = sweeps::check(&state.db, &state.config.job_policy(), &spec, &principal).await?;
    super::jobs::check_priority(&state, &principal, &checked.project, trial.priority).await?;
    let id = store::create(&state.db, &checked, &spec, &principal).await?;
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::SweepCreate,
        &id,
        &checked.name,
    )
    .await?;
    tracing::info!(
        sweep = id,
        name = checked.name,
        project = checked.project,
        "sweep created"
    );
    let sweep = store::get_for(&state.db, &principal, &id, Role::Viewer).await?;
    Ok((StatusCode::CREATED, Json(sweep)))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SweepQuery {
    /// Only this project's sweeps.
    project: Option<String>,
    /// Page size, 1–500 (default 50).
    limit: Option<i64>,
    /// `next_before` of the previous page.
    before: Option<i64>,
}

/// The sweeps of the projects the caller sees, newest first, without
/// their trials.
#[utoipa::path(get, path = "/sweeps", tag = "sweeps",
    security(("bearer" = ["read"])),
    params(SweepQuery),
    responses((status = 200, body = Page<Sweep>), AuthErrors,
        (status = 422, body = ErrorBody)))]
pub async fn list_sweeps(
    auth: Authed<Read>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<SweepQuery>,
) -> Result<Json<Page<Sweep>>, ApiError> {
    let mut errors = Vec::new();
    let limit = page_limit(query.limit, &mut errors);
    let before = cursor(query.before, &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let principal = auth.caller.principal();
    Ok(Json(
        store::list(&state.db, &principal, query.project.as_deref(), limit, before).await?,
    ))
}

/// One sweep with every trial (parameters, state, metric, rungs reached)
/// and its best trial.
#[utoipa::path(get, path = "/sweeps/{sweep_id}", tag = "sweeps",
    security(("bearer" = ["read"])),
    params(("sweep_id" = String, Path)),
    responses((status = 200, body = Sweep), AuthErrors,
        (status = 404, body = ErrorBody)))]
pub async fn get_sweep(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(sweep_id): Path<String>,
) -> Result<Json<Sweep>, ApiError> {
    Ok(Json(
        store::get_for(&state.db, &auth.caller.principal(), &sweep_id, Role::Viewer).await?,
    ))
}

/// `pause` (no new trials; running ones go on and are still stopped
/// early), `resume`, or `stop` (ends it and cancels its open trials; needs
/// `{"confirm": true}`).
#[utoipa::path(post, path = "/sweeps/{sweep_id}/{action}", tag = "sweeps",
    security(("bearer" = ["write"])),
    params(("sweep_id" = String, Path), ("action" = String, Path, description = "pause, resume or stop")),
    request_body = CancelRequest,
    responses((status = 200, body = Sweep), AuthErrors,
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn act_on_sweep(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path((sweep_id, action)): Path<(String, String)>,
    OptionalJson(request): OptionalJson<CancelRequest>,
) -> Result<Json<Sweep>, ApiError> {
    let principal = auth.caller.principal();
    // Unknown (or invisible) sweeps are 404 before anything else.
    store::get_for(&state.db, &principal, &sweep_id, Role::Editor).await?;
    let Some(action) = SweepAction::parse(&action) else {
        return Err(ApiError::NotFound(format!(
            "no action `{action}` on sweeps: pause, resume or stop"
        )));
    };
    if action == SweepAction::Stop && !request.confirm {
        return Err(ApiError::field(
            "confirm",
            "must be true: stopping a sweep cancels its queued and running trials (gpuctl sweep stop ID --confirm)",
        ));
    }
    let by = auth
        .caller
        .user_name
        .clone()
        .unwrap_or_else(|| auth.caller.token_name.clone());
    let stopping = store::act(&state.db, &sweep_id, action, &by).await?;
    for node_id in stopping {
        state.wakes.wake(Wake::Agent(node_id));
    }
    state.wakes.wake(Wake::Scheduler);
    let audited = match action {
        SweepAction::Pause => AuditAction::SweepPause,
        SweepAction::Resume => AuditAction::SweepResume,
        SweepAction::Stop => AuditAction::SweepStop,
    };
    audit::by_caller(&state.db, &auth.caller, audited, &sweep_id, action.as_str()).await?;
    Ok(Json(
        store::get_for(&state.db, &principal, &sweep_id, Role::Viewer).await?,
    ))
}
