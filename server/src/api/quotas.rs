//! Quotas (`/api/v1/quotas`): everyone reads the quotas they may see (their
//! projects' and their own); server admins set and remove them.

use crate::api::error::{ApiError, ApiJson, AuthErrors};
use crate::api::extract::{Authed, Read, Write};
use crate::audit;
use crate::identity::access::{Principal, require_server_admin, visible_projects};
use crate::jobs::quotas;
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use gpuplane_api::Page;
use gpuplane_api::audit::AuditAction;
use gpuplane_api::error::{ErrorBody, FieldError};
use gpuplane_api::quota::{Quota, QuotaKind, SetQuota};

/// The quotas `principal` may see: all for admins; else those of its
/// projects and its own user quota.
pub async fn visible(state: &AppState, principal: &Principal) -> Result<Vec<Quota>, ApiError> {
    let all = quotas::list(&state.db).await?;
    if principal.is_server_admin() {
        return Ok(all);
    }
    let projects = visible_projects(&state.db, principal).await?;
    Ok(all
        .into_iter()
        .filter(|quota| match quota.kind {
            QuotaKind::Project => projects.contains(&quota.name),
            QuotaKind::User => principal.user_name.as_deref() == Some(quota.name.as_str()),
        })
        .collect())
}

/// Quotas with what each project or user has running now.
#[utoipa::path(get, path = "/quotas", tag = "quotas",
    security(("bearer" = ["read"])),
    responses((status = 200, body = Page<Quota>), AuthErrors))]
pub async fn list_quotas(
    auth: Authed<Read>,
    State(state): State<AppState>,
) -> Result<Json<Page<Quota>>, ApiError> {
    Ok(Json(Page {
        items: visible(&state, &auth.caller.principal()).await?,
        next_before: None,
    }))
}

fn kind(text: &str) -> Result<QuotaKind, ApiError> {
    QuotaKind::parse(text).ok_or_else(|| {
        ApiError::Validation(vec![FieldError {
            field: "kind".into(),
            message: format!("`{text}` is not a quota kind; use project or user"),
        }])
    })
}

/// Sets a project's or a user's quota (server admins). Jobs over it wait in
/// the queue with the reason; none is refused.
#[utoipa::path(put, path = "/quotas/{kind}/{name}", tag = "quotas",
    security(("bearer" = ["write"])),
    params(("kind" = String, Path, description = "project or user"),
        ("name" = String, Path, description = "The project's or the user's name")),
    request_body = SetQuota,
    responses((status = 200, body = Quota), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set_quota(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path((kind_text, name)): Path<(String, String)>,
    ApiJson(limits): ApiJson<SetQuota>,
) -> Result<Json<Quota>, ApiError> {
    require_server_admin(&auth.caller, "setting quotas")?;
    let quota = quotas::set(
        &state.db,
        kind(&kind_text)?,
        &name,
        &limits,
        auth.caller.user_name.as_deref(),
    )
    .await?;
    let target = format!("{} {name}", quota.kind);
    let limit = |max: Option<i64>| max.map_or_else(|| "none".to_string(), |max| max.to_string());
    let detail = format!(
        "max_gpus {}, max_running_jobs {}",
        limit(quota.max_gpus),
        limit(quota.max_running_jobs)
    );
    audit::by_caller(&state.db, &auth.caller, AuditAction::QuotaSet, &target, &detail).await?;
    state.wakes.jobs_changed();
    Ok(Json(quota))
}

/// Removes a quota (server admins); jobs it held back start.
#[utoipa::path(delete, path = "/quotas/{kind}/{name}", tag = "quotas",
    security(("bearer" = ["write"])),
    params(("kind" = String, Path, description = "project or user"),
        ("name" = String, Path, description = "The project's or the user's name")),
    responses((status = 204), AuthErrors, (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn clear_quota(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path((kind_text, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    require_server_admin(&auth.caller, "removing quotas")?;
    let kind = kind(&kind_text)?;
    quotas::clear(&state.db, kind, &name).await?;
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::QuotaClear,
        &format!("{kind} {name}"),
        "",
    )
    .await?;
    state.wakes.jobs_changed();
    Ok(StatusCode::NO_CONTENT)
}
