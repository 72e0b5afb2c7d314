//! `/api/v1/users` and `/api/v1/agent-tokens`: accounts and agent tokens,
//! for server admins. Every change is in the audit log.
//!
//! Trust boundary: users ↔ server admins (SECURITY.md); every route here
//! refuses non-admins with 403 before reading anything.

use crate::admin::agent_token_detail;
use crate::api::error::{ApiError, ApiJson, AuthErrors};
use crate::api::extract::{Authed, Read, Write};
use crate::audit;
use crate::identity::access::require_server_admin;
use crate::identity::users;
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use gpuplane_api::Page;
use gpuplane_api::audit::AuditAction;
use gpuplane_api::error::ErrorBody;
use gpuplane_api::user::{AgentToken, CreatedAgentToken, NewAgentToken, NewUser, User, UserChanges};

/// Every user account, by name (server admins).
#[utoipa::path(get, path = "/users", tag = "admin",
    security(("bearer" = ["read"])),
    responses((status = 200, body = Page<User>), AuthErrors))]
pub async fn list_users(
    auth: Authed<Read>,
    State(state): State<AppState>,
) -> Result<Json<Page<User>>, ApiError> {
    require_server_admin(&auth.caller, "listing users")?;
    Ok(Json(Page {
        items: users::list(&state.db).await?,
        next_before: None,
    }))
}

/// Creates a local account (server admins), with the `default_project_role`
/// setting's role (viewer unless set) in the `default` project.
#[utoipa::path(post, path = "/users", tag = "admin",
    security(("bearer" = ["write"])),
    request_body = NewUser,
    responses((status = 201, body = User), AuthErrors,
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_user(
    auth: Authed<Write>,
    State(state): State<AppState>,
    ApiJson(new): ApiJson<NewUser>,
) -> Result<(StatusCode, Json<User>), ApiError> {
    require_server_admin(&auth.caller, "creating users")?;
    let user = users::create(&state.db, &new, state.config.default_project_role).await?;
    let detail = if user.is_admin { "admin" } else { "" };
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::UserCreate,
        &user.name,
        detail,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(user)))
}

/// Sets a user's admin flag, or disables or enables them (server admins;
/// not on themselves). A disabled user's sessions and tokens stop at once.
#[utoipa::path(patch, path = "/users/{name}", tag = "admin",
    security(("bearer" = ["write"])),
    params(("name" = String, Path)),
    request_body = UserChanges,
    responses((status = 200, body = User), AuthErrors,
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn change_user(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(changes): ApiJson<UserChanges>,
) -> Result<Json<User>, ApiError> {
    require_server_admin(&auth.caller, "changing users")?;
    let before = users::get(&state.db, &name).await?;
    let user = users::change(&state.db, &name, &changes, auth.caller.user_id.as_deref()).await?;
    let mut recorded = Vec::new();
    if before.is_admin != user.is_admin {
        let detail = if user.is_admin { "admin" } else { "not admin" };
        recorded.push((AuditAction::UserAdmin, detail));
    }
    match (before.disabled_at.is_some(), user.disabled_at.is_some()) {
        (false, true) => recorded.push((AuditAction::UserDisable, "")),
        (true, false) => recorded.push((AuditAction::UserEnable, "")),
        _ => {}
    }
    for (action, detail) in recorded {
        audit::by_caller(&state.db, &auth.caller, action, &name, detail).await?;
    }
    Ok(Json(user))
}

/// Every agent token, oldest first (server admins).
#[utoipa::path(get, path = "/agent-tokens", tag = "admin",
    security(("bearer" = ["read"])),
    responses((status = 200, body = Page<AgentToken>), AuthErrors))]
pub async fn list_agent_tokens(
    auth: Authed<Read>,
    State(state): State<AppState>,
) -> Result<Json<Page<AgentToken>>, ApiError> {
    require_server_admin(&auth.caller, "listing agent tokens")?;
    Ok(Json(Page {
        items: users::agent_tokens(&state.db).await?,
        next_before: None,
    }))
}

/// Creates an agent token (server admins); its secret is in this answer only.
#[utoipa::path(post, path = "/agent-tokens", tag = "admin",
    security(("bearer" = ["write"])),
    request_body = NewAgentToken,
    responses((status = 201, body = CreatedAgentToken), AuthErrors,
        (status = 422, body = ErrorBody)))]
pub async fn create_agent_token(
    auth: Authed<Write>,
    State(state): State<AppState>,
    ApiJson(new): ApiJson<NewAgentToken>,
) -> Result<(StatusCode, Json<CreatedAgentToken>), ApiError> {
    require_server_admin(&auth.caller, "creating agent tokens")?;
    let created = users::create_agent_token(&state.db, &new).await?;
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::AgentTokenCreate,
        &created.token.id,
        &agent_token_detail(&created.token),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// Revokes an agent token (server admins): its agent is refused from its next request on.
#[utoipa::path(post, path = "/agent-tokens/{token_id}/revoke", tag = "admin",
    security(("bearer" = ["write"])),
    params(("token_id" = String, Path)),
    responses((status = 200, body = AgentToken), AuthErrors,
        (status = 404, body = ErrorBody)))]
pub async fn revoke_agent_token(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(token_id): Path<String>,
) -> Result<Json<AgentToken>, ApiError> {
    require_server_admin(&auth.caller, "revoking agent tokens")?;
    let token = users::revoke_agent_token(&state.db, &token_id).await?;
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::AgentTokenRevoke,
        &token_id,
        "",
    )
    .await?;
    Ok(Json(token))
}
