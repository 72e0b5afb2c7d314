//! Share links of a run (`/api/v1/runs/{run_id}/shares`): editors make and
//! revoke them, viewers list them and their views. What a link opens is
//! served by `api/shared.rs`.

use crate::api::error::{ApiError, ApiJson, ApiQuery, AuthErrors};
use crate::api::extract::{Authed, Read, Write};
use crate::audit;
use crate::paging::{cursor, page_limit};
use crate::runs::{self, shares};
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use gpuplane_api::Page;
use gpuplane_api::audit::AuditAction;
use gpuplane_api::error::ErrorBody;
use gpuplane_api::project::Role;
use gpuplane_api::share::{CreatedShareLink, NewShareLink, ShareLink, ShareView};
use serde::Deserialize;

/// Makes a read-only link to the run (editors), unless its project forbids
/// them (403). The URL carries the link's secret and is answered only now.
#[utoipa::path(post, path = "/runs/{run_id}/shares", tag = "runs",
    security(("bearer" = ["write"])),
    params(("run_id" = String, Path)),
    request_body = NewShareLink,
    responses((status = 201, body = CreatedShareLink), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_share(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    ApiJson(new): ApiJson<NewShareLink>,
) -> Result<(StatusCode, Json<CreatedShareLink>), ApiError> {
    runs::check(&state.db, &auth.caller, &run_id, Role::Editor).await?;
    let by = auth.caller.user_name.as_deref();
    let (link, secret) = shares::create(&state.db, &run_id, new.expires_in_days, by).await?;
    let detail = format!("{} until {}", link.id, link.expires_at);
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::ShareLinkCreate,
        &run_id,
        &detail,
    )
    .await?;
    let url = format!("{}/s/{secret}", state.config.public_url());
    Ok((StatusCode::CREATED, Json(CreatedShareLink { link, url })))
}

/// The run's share links, newest first, with their views (never their secrets).
#[utoipa::path(get, path = "/runs/{run_id}/shares", tag = "runs",
    security(("bearer" = ["read"])),
    params(("run_id" = String, Path)),
    responses((status = 200, body = Page<ShareLink>), AuthErrors, (status = 404, body = ErrorBody)))]
pub async fn list_shares(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Json<Page<ShareLink>>, ApiError> {
    runs::check(&state.db, &auth.caller, &run_id, Role::Viewer).await?;
    Ok(Json(Page {
        items: shares::list(&state.db, &run_id).await?,
        next_before: None,
    }))
}

/// Revokes a share link (editors): it never opens again.
#[utoipa::path(delete, path = "/runs/{run_id}/shares/{share_id}", tag = "runs",
    security(("bearer" = ["write"])),
    params(("run_id" = String, Path), ("share_id" = String, Path)),
    responses((status = 200, body = ShareLink), AuthErrors, (status = 404, body = ErrorBody)))]
pub async fn revoke_share(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path((run_id, share_id)): Path<(String, String)>,
) -> Result<Json<ShareLink>, ApiError> {
    runs::check(&state.db, &auth.caller, &run_id, Role::Editor).await?;
    let link = shares::revoke(&state.db, &run_id, &share_id).await?;
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::ShareLinkRevoke,
        &run_id,
        &share_id,
    )
    .await?;
    Ok(Json(link))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ViewQuery {
    /// Page size, 1–500 (default 50).
    limit: Option<i64>,
    before: Option<i64>,
}

/// Every request made through a share link, newest first.
#[utoipa::path(get, path = "/runs/{run_id}/shares/{share_id}/views", tag = "runs",
    security(("bearer" = ["read"])),
    params(("run_id" = String, Path), ("share_id" = String, Path), ViewQuery),
    responses((status = 200, body = Page<ShareView>), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn share_views(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path((run_id, share_id)): Path<(String, String)>,
    ApiQuery(query): ApiQuery<ViewQuery>,
) -> Result<Json<Page<ShareView>>, ApiError> {
    runs::check(&state.db, &auth.caller, &run_id, Role::Viewer).await?;
    let mut errors = Vec::new();
    let limit = page_limit(query.limit, &mut errors);
    let before = cursor(query.before, &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    shares::get(&state.db, &run_id, &share_id).await?;
    Ok(Json(shares::views(&state.db, &share_id, limit, before).await?))
}
