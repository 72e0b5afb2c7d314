//! `GET /api/v1/health`: answers without a token.

use crate::api::error::ApiError;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use gpuplane_api::health::Health;

/// Is the server up and its database reachable?
#[utoipa::path(get, path = "/health", tag = "server",
    responses((status = 200, body = Health), (status = 500, body = gpuplane_api::error::ErrorBody)))]
pub async fn health(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    Ok(Json(check(&state).await?))
}

/// The health answer, shared with the console.
pub async fn check(state: &AppState) -> Result<Health, ApiError> {
    sqlx::query("SELECT 1").execute(&state.db).await?;
    Ok(Health {
        status: "ok".to_string(),
        version: gpuplane_api::VERSION.to_string(),
    })
}
