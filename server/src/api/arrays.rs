//! `/api/v1/arrays/{id}`: a job array's tasks by state, and cancelling
//! every task that has not ended. Its tasks are jobs (`/jobs?array=ID`);
//! the array belongs to their project: a viewer reads it, an editor
//! cancels it, anyone else gets 404.

use crate::api::error::{ApiError, AuthErrors, OptionalJson};
use crate::api::extract::{Authed, Read, Write};
use crate::audit;
use crate::jobs::arrays;
use crate::state::AppState;
use crate::wake::Wake;
use axum::Json;
use axum::extract::{Path, State};
use gpuplane_api::array::{ArrayCancelled, JobArray};
use gpuplane_api::audit::AuditAction;
use gpuplane_api::error::ErrorBody;
use gpuplane_api::job::CancelRequest;
use gpuplane_api::project::Role;

/// A job array: its tasks, its `%` limit and how many tasks are in each state.
#[utoipa::path(get, path = "/arrays/{array_id}", tag = "jobs",
    security(("bearer" = ["read"])),
    params(("array_id" = String, Path)),
    responses((status = 200, body = JobArray), AuthErrors,
        (status = 404, body = ErrorBody)))]
pub async fn get_array(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(array_id): Path<String>,
) -> Result<Json<JobArray>, ApiError> {
    Ok(Json(
        arrays::get_for(&state.db, &auth.caller.principal(), &array_id, Role::Viewer).await?,
    ))
}

/// Cancels every task of the array that has not ended. Needs `{"confirm":
/// true}`: running tasks are stopped (SIGTERM, then SIGKILL after the
/// grace period). One task is cancelled as a job (`/jobs/{id}/cancel`).
#[utoipa::path(post, path = "/arrays/{array_id}/cancel", tag = "jobs",
    security(("bearer" = ["write"])),
    params(("array_id" = String, Path)),
    request_body = CancelRequest,
    responses((status = 200, body = ArrayCancelled), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn cancel_array(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(array_id): Path<String>,
    OptionalJson(request): OptionalJson<CancelRequest>,
) -> Result<Json<ArrayCancelled>, ApiError> {
    let principal = auth.caller.principal();
    // Unknown (or invisible) arrays are 404 before anything else.
    arrays::get_for(&state.db, &principal, &array_id, Role::Editor).await?;
    if !request.confirm {
        return Err(ApiError::field(
            "confirm",
            "must be true: cancelling stops every task of the array (gpuctl job cancel ID --confirm)",
        ));
    }
    let (cancelled, stopping) = arrays::cancel(&state.db, &array_id).await?;
    state.wakes.wake(Wake::Scheduler);
    for node_id in stopping {
        state.wakes.wake(Wake::Agent(node_id));
    }
    let detail = format!("{cancelled} tasks");
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::JobCancel,
        &array_id,
        &detail,
    )
    .await?;
    state.wakes.wake(Wake::Events);
    let array = arrays::get_for(&state.db, &principal, &array_id, Role::Viewer).await?;
    Ok(Json(ArrayCancelled { cancelled, array }))
}
