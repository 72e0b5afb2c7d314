//! `GET /api/v1/runs/{id}/failure` and `GET /api/v1/runs/{id}/diagnosis`.

use crate::api::error::{ApiError, AuthErrors};
use crate::api::extract::{Authed, Read};
use crate::diagnosis::facts;
use crate::runs;
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, State};
use gpuplane_api::diagnosis::{Diagnosis, FailureExplanation};
use gpuplane_api::error::ErrorBody;
use gpuplane_api::project::Role;

/// Why a failed run failed: category, summary, evidence (log lines, events,
/// metric points), likely causes, ordered actions, retry advice.
#[utoipa::path(get, path = "/runs/{run_id}/failure", tag = "diagnosis",
    security(("bearer" = ["read"])),
    params(("run_id" = String, Path)),
    responses((status = 200, body = FailureExplanation), AuthErrors,
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn explain_failure(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Json<FailureExplanation>, ApiError> {
    runs::check(&state.db, &auth.caller, &run_id, Role::Viewer).await?;
    Ok(Json(facts::failure(&state.db, &state.config, &run_id).await?))
}

/// What is wrong or suspicious with a run, running or not: NaN or diverging
/// or flat loss, silence, idle GPUs, an offline node, and the failure.
#[utoipa::path(get, path = "/runs/{run_id}/diagnosis", tag = "diagnosis",
    security(("bearer" = ["read"])),
    params(("run_id" = String, Path)),
    responses((status = 200, body = Diagnosis), AuthErrors,
        (status = 404, body = ErrorBody)))]
pub async fn diagnose_run(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Json<Diagnosis>, ApiError> {
    runs::check(&state.db, &auth.caller, &run_id, Role::Viewer).await?;
    Ok(Json(facts::diagnose(&state.db, &state.config, &run_id).await?))
}
