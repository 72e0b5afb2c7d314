//! `GET /api/v1/usage`: GPU-hours allocated and used, by project, user,
//! node or GPU model (`jobs::usage`). Each caller sees the projects they
//! can see (server admins every one).

use crate::api::error::{ApiError, ApiQuery, AuthErrors};
use crate::api::extract::{Authed, Read};
use crate::identity::access::visible_projects;
use crate::state::AppState;
use crate::store::time::now_ms;
use axum::Json;
use axum::extract::State;
use gpuplane_api::duration::parse_seconds;
use gpuplane_api::error::{ErrorBody, FieldError};
use gpuplane_api::usage::{UsageBy, UsageReport};
use serde::Deserialize;

/// The longest span a report covers (the telemetry kept is shorter anyway).
const MAX_SINCE_S: i64 = 366 * 86_400;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    /// project (default), user, node or gpu_model.
    by: Option<String>,
    /// How far back: `30d` (default), `12h`, `90m`; at most 366 days.
    since: Option<String>,
}

/// GPU-hours allocated to jobs and GPU-hours their GPUs worked (from
/// telemetry) over a span, grouped one way, largest first.
#[utoipa::path(get, path = "/usage", tag = "projects",
    security(("bearer" = ["read"])),
    params(UsageQuery),
    responses((status = 200, body = UsageReport), AuthErrors,
        (status = 422, body = ErrorBody)))]
pub async fn usage(
    auth: Authed<Read>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<UsageQuery>,
) -> Result<Json<UsageReport>, ApiError> {
    let mut errors = Vec::new();
    let by = match query.by.as_deref() {
        None => UsageBy::Project,
        Some(text) => UsageBy::parse(text).unwrap_or_else(|| {
            errors.push(FieldError {
                field: "by".into(),
                message: "must be project, user, node or gpu_model".into(),
            });
            UsageBy::Project
        }),
    };
    let since_s = match parse_seconds(query.since.as_deref().unwrap_or("30d")) {
        Ok(seconds) if (1..=MAX_SINCE_S).contains(&seconds) => seconds,
        _ => {
            errors.push(FieldError {
                field: "since".into(),
                message: "must be a span such as 30d, 12h or 90m, at most 366d".into(),
            });
            0
        }
    };
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let principal = auth.caller.principal();
    let visible = visible_projects(&state.db, &principal).await?;
    let now = now_ms();
    let report = crate::jobs::usage::report(&state.db, &visible, by, now - since_s * 1000, now).await?;
    Ok(Json(report))
}
