//! `/api/v1/evaluations`: evaluate a checkpoint of a run, list and show evaluations.

use crate::api::error::{ApiError, ApiJson, ApiQuery, AuthErrors};
use crate::api::extract::{Authed, Read, Write};
use crate::identity::access;
use crate::jobs::evaluations;
use crate::jobs::store;
use crate::paging::{cursor, page_limit};
use crate::runs;
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use gpuplane_api::Page;
use gpuplane_api::error::ErrorBody;
use gpuplane_api::evaluation::{Evaluation, NewEvaluation};
use gpuplane_api::project::Role;
use serde::Deserialize;

/// Queues an EVALUATE job on a checkpoint the run recorded. Its result
/// becomes `eval/` metrics of the run at the checkpoint's step. A checkpoint
/// path that another run also wrote is refused with 409.
#[utoipa::path(post, path = "/evaluations", tag = "evaluations",
    security(("bearer" = ["write"])),
    request_body = NewEvaluation,
    responses((status = 201, body = Evaluation), AuthErrors,
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_evaluation(
    auth: Authed<Write>,
    State(state): State<AppState>,
    ApiJson(new): ApiJson<NewEvaluation>,
) -> Result<(StatusCode, Json<Evaluation>), ApiError> {
    runs::check(&state.db, &auth.caller, &new.run_id, Role::Editor)
        .await
        .map_err(|error| match error {
            crate::store::Error::NotFound(_) => {
                ApiError::field("run_id", format!("no run {} that you can write to", new.run_id))
            }
            other => other.into(),
        })?;
    let job_id = evaluations::create(&state.db, &state.secret, &auth.caller.principal(), &new).await?;
    state.wakes.wake(crate::wake::Wake::Scheduler);
    tracing::info!(
        job_id,
        run_id = new.run_id,
        checkpoint = new.checkpoint,
        "evaluation queued"
    );
    Ok((
        StatusCode::CREATED,
        Json(evaluations::get(&state.db, &job_id).await?),
    ))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only evaluations of this run.
    run_id: Option<String>,
    /// Page size, 1–500 (default 50).
    limit: Option<i64>,
    /// `next_before` of the previous page.
    before: Option<i64>,
}

/// Evaluations, newest first.
#[utoipa::path(get, path = "/evaluations", tag = "evaluations",
    security(("bearer" = ["read"])),
    params(ListQuery),
    responses((status = 200, body = Page<Evaluation>), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn list_evaluations(
    auth: Authed<Read>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<Page<Evaluation>>, ApiError> {
    let mut errors = Vec::new();
    let limit = page_limit(query.limit, &mut errors);
    let before = cursor(query.before, &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    if let Some(run_id) = &query.run_id {
        runs::check(&state.db, &auth.caller, run_id, Role::Viewer).await?;
    }
    let visible = access::visible_projects(&state.db, &auth.caller.principal()).await?;
    let page = evaluations::list(&state.db, &visible, query.run_id.as_deref(), limit, before).await?;
    Ok(Json(page))
}

/// One evaluation, by its job id.
#[utoipa::path(get, path = "/evaluations/{job_id}", tag = "evaluations",
    security(("bearer" = ["read"])),
    params(("job_id" = String, Path)),
    responses((status = 200, body = Evaluation), AuthErrors,
        (status = 404, body = ErrorBody)))]
pub async fn get_evaluation(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(job_id): Path<String>,
) -> Result<Json<Evaluation>, ApiError> {
    store::get_for(&state.db, &auth.caller.principal(), &job_id, Role::Viewer)
        .await
        .map_err(|_| ApiError::NotFound(format!("no evaluation {job_id}")))?;
    Ok(Json(evaluations::get(&state.db, &job_id).await?))
}
