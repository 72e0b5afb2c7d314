//! The end of a run's life (`/api/v1/runs/{run_id}/archive`, `unarchive`,
//! `DELETE /api/v1/runs/{run_id}`; project admins), and what each project
//! keeps (`/api/v1/projects/usage`).

use crate::api::error::{ApiError, AuthErrors};
use crate::api::extract::{Authed, Read, Write};
use crate::audit;
use crate::identity::access;
use crate::runs::{self, lifecycle};
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, State};
use gpuplane_api::Page;
use gpuplane_api::audit::AuditAction;
use gpuplane_api::error::ErrorBody;
use gpuplane_api::experiment::{DeletedRun, ProjectUsage};
use gpuplane_api::metric::Run;
use gpuplane_api::project::Role;
use std::time::{Duration, Instant};

/// How long a measurement of the projects' usage is reused.
const USAGE_FRESH: Duration = Duration::from_secs(60);

async fn set_archived(
    auth: &Authed<Write>,
    state: &AppState,
    run_id: &str,
    archive: bool,
) -> Result<Json<Run>, ApiError> {
    runs::check(&state.db, &auth.caller, run_id, Role::Admin).await?;
    lifecycle::set_archived(&state.db, run_id, archive, auth.caller.user_name.as_deref()).await?;
    let action = if archive {
        AuditAction::RunArchive
    } else {
        AuditAction::RunUnarchive
    };
    audit::by_caller(&state.db, &auth.caller, action, run_id, "").await?;
    Ok(Json(runs::get(&state.db, run_id).await?))
}

/// Archives a run and its job (project admins): out of the default lists
/// (`archived=true` lists them), kept whole. A job still queued or running
/// is refused (409).
#[utoipa::path(post, path = "/runs/{run_id}/archive", tag = "runs",
    security(("bearer" = ["write"])),
    params(("run_id" = String, Path)),
    responses((status = 200, body = Run), AuthErrors,
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn archive_run(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Json<Run>, ApiError> {
    set_archived(&auth, &state, &run_id, true).await
}

/// Brings an archived run and its job back into the lists (project admins).
#[utoipa::path(post, path = "/runs/{run_id}/unarchive", tag = "runs",
    security(("bearer" = ["write"])),
    params(("run_id" = String, Path)),
    responses((status = 200, body = Run), AuthErrors, (status = 404, body = ErrorBody)))]
pub async fn unarchive_run(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Json<Run>, ApiError> {
    set_archived(&auth, &state, &run_id, false).await
}

/// Deletes a run and its job with their metrics, texts, config, output,
/// events, checkpoint records, evaluations, share links and MLflow
/// artifacts (project admins).
/// A job still queued or running, or one a queued job waits for, is refused
/// (409).
#[utoipa::path(delete, path = "/runs/{run_id}", tag = "runs",
    security(("bearer" = ["write"])),
    params(("run_id" = String, Path)),
    responses((status = 200, body = DeletedRun), AuthErrors,
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn delete_run(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Json<DeletedRun>, ApiError> {
    runs::check(&state.db, &auth.caller, &run_id, Role::Admin).await?;
    let label = runs::label(&state.db, &run_id).await?;
    let deleted = lifecycle::delete(&state.db, &run_id).await?;
    // Its MLflow artifacts too (a failure here is swept up later).
    if let Err(error) = state.artifacts.remove_run(&run_id).await {
        tracing::warn!(%error, run_id, "the deleted run's artifacts stay until the next sweep");
    }
    let detail = format!(
        "{label}: {} points, {} log lines, {} events",
        deleted.metric_points, deleted.log_lines, deleted.events
    );
    audit::by_caller(&state.db, &auth.caller, AuditAction::RunDelete, &run_id, &detail).await?;
    Ok(Json(deleted))
}

/// What each project the caller can see keeps on the server: runs
/// (archived ones too), metric points and bytes, output lines and bytes,
/// text bytes. Measured at most once a minute.
#[utoipa::path(get, path = "/projects/usage", tag = "projects",
    security(("bearer" = ["read"])),
    responses((status = 200, body = Page<ProjectUsage>), AuthErrors))]
pub async fn project_usage(
    auth: Authed<Read>,
    State(state): State<AppState>,
) -> Result<Json<Page<ProjectUsage>>, ApiError> {
    let all = {
        let mut cached = state.usage.lock().await;
        match &*cached {
            Some((at, usage)) if at.elapsed() < USAGE_FRESH => usage.clone(),
            _ => {
                let usage = lifecycle::usage(&state.db).await?;
                *cached = Some((Instant::now(), usage.clone()));
                usage
            }
        }
    };
    let visible = access::visible_projects(&state.db, &auth.caller.principal()).await?;
    Ok(Json(Page {
        items: all
            .into_iter()
            .filter(|usage| visible.contains(&usage.project))
            .collect(),
        next_before: None,
    }))
}
