//! `GET /api/v1/audit`: the audit log, newest first (server admins).

use crate::api::error::{ApiError, ApiQuery, AuthErrors};
use crate::api::extract::{Authed, Read};
use crate::audit::{self, Filter};
use crate::identity::access::require_server_admin;
use crate::paging::{cursor, page_limit};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use gpuplane_api::Page;
use gpuplane_api::audit::{AuditAction, AuditEntry};
use gpuplane_api::error::{ErrorBody, FieldError};
use serde::Deserialize;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only what this user did (their name; `server CLI` for the host's admin commands).
    actor: Option<String>,
    /// Only this action, e.g. `job.cancel`, `quota.set`, `maintenance.on`.
    action: Option<String>,
    /// Only what was done to this job, node, project or user.
    target: Option<String>,
    /// Page size, 1–500 (default 50).
    limit: Option<i64>,
    before: Option<i64>,
}

/// Who did what, when and from where: admin actions, and every job cancel,
/// retry, priority change, hold and release. Newest first.
#[utoipa::path(get, path = "/audit", tag = "audit",
    security(("bearer" = ["read"])),
    params(AuditQuery),
    responses((status = 200, body = Page<AuditEntry>), AuthErrors,
        (status = 422, body = ErrorBody)))]
pub async fn list_audit(
    auth: Authed<Read>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> Result<Json<Page<AuditEntry>>, ApiError> {
    require_server_admin(&auth.caller, "the audit log")?;
    let mut errors = Vec::new();
    // An unknown name is named with every known one (`names!`'s FromStr).
    let action = query.action.as_deref().and_then(|text| {
        text.parse::<AuditAction>()
            .map_err(|message| {
                errors.push(FieldError {
                    field: "action".into(),
                    message,
                })
            })
            .ok()
    });
    let limit = page_limit(query.limit, &mut errors);
    let before = cursor(query.before, &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let filter = Filter {
        actor: query.actor,
        action,
        target: query.target,
    };
    Ok(Json(audit::list(&state.db, &filter, limit, before).await?))
}
