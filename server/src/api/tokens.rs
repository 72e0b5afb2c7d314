//! `/api/v1/tokens`: the caller's own tokens.

use crate::api::error::{ApiError, ApiJson, AuthErrors};
use crate::api::extract::{Authed, Read, Write};
use crate::identity::tokens;
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use gpuplane_api::Page;
use gpuplane_api::auth::{CreateToken, CreatedToken, TokenInfo};
use gpuplane_api::error::ErrorBody;

fn user_id(caller: &crate::identity::access::Caller) -> Result<&str, ApiError> {
    caller
        .user_id
        .as_deref()
        .ok_or_else(|| ApiError::Forbidden("only users have tokens".into()))
}

/// The caller's tokens: name, scope, project, last use, revocation.
#[utoipa::path(get, path = "/tokens", tag = "auth",
    security(("bearer" = ["read"])),
    responses((status = 200, body = Page<TokenInfo>), AuthErrors))]
pub async fn list_tokens(
    auth: Authed<Read>,
    State(state): State<AppState>,
) -> Result<Json<Page<TokenInfo>>, ApiError> {
    Ok(Json(Page {
        items: tokens::list(&state.db, user_id(&auth.caller)?).await?,
        next_before: None,
    }))
}

/// Creates a token; its secret is in this answer only.
#[utoipa::path(post, path = "/tokens", tag = "auth",
    security(("bearer" = ["write"])),
    request_body = CreateToken,
    responses((status = 201, body = CreatedToken), AuthErrors,
        (status = 422, body = ErrorBody)))]
pub async fn create_token(
    auth: Authed<Write>,
    State(state): State<AppState>,
    ApiJson(request): ApiJson<CreateToken>,
) -> Result<(StatusCode, Json<CreatedToken>), ApiError> {
    let caller = &auth.caller;
    let created = tokens::create(
        &state.db,
        &caller.principal(),
        caller.scope,
        caller.expires_at,
        &request,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// Revokes one of the caller's tokens; it fails with 401 from now on.
#[utoipa::path(delete, path = "/tokens/{token_id}", tag = "auth",
    security(("bearer" = ["write"])),
    params(("token_id" = String, Path)),
    responses((status = 200, body = TokenInfo), AuthErrors,
        (status = 404, body = ErrorBody)))]
pub async fn revoke_token(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(token_id): Path<String>,
) -> Result<Json<TokenInfo>, ApiError> {
    Ok(Json(
        tokens::revoke(&state.db, user_id(&auth.caller)?, &token_id).await?,
    ))
}
