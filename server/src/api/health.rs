//! `GET /api/v1/health` and `GET /api/v1/ready`: answer without a token.
//!
//! For a load balancer: `health` says the process answers and its database
//! is reachable (500 if not); `ready` says it should get traffic now, and
//! answers 503 when the database fails or does not answer within
//! [`READY_TIMEOUT`], so a probe never hangs on a slow database. (A server
//! shutting down stops accepting connections, which probes see at once.)

use crate::api::error::ApiError;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use gpuplane_api::health::Health;
use std::time::Duration;

/// How long a readiness probe waits for the database.
pub const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Is the server up and its database reachable?
#[utoipa::path(get, path = "/health", tag = "server",
    responses((status = 200, body = Health), (status = 500, body = gpuplane_api::error::ErrorBody)))]
pub async fn health(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    Ok(Json(check(&state).await?))
}

/// The health answer, shared with the console.
pub async fn check(state: &AppState) -> Result<Health, ApiError> {
    state.db.ping().await.map_err(crate::store::Error::from)?;
    Ok(Health {
        status: "ok".to_string(),
        version: gpuplane_api::VERSION.to_string(),
        leader: state.is_leading(),
    })
}

/// Should a load balancer send this server requests now?
#[utoipa::path(get, path = "/ready", tag = "server",
    responses((status = 200, body = Health),
        (status = 503, description = "the database failed or did not answer in time",
         body = gpuplane_api::error::ErrorBody)))]
pub async fn ready(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    match tokio::time::timeout(READY_TIMEOUT, async { state.db.ping().await }).await {
        Ok(Ok(_)) => Ok(Json(Health {
            status: "ready".to_string(),
            version: gpuplane_api::VERSION.to_string(),
            leader: state.is_leading(),
        })),
        Ok(Err(error)) => {
            // Anyone may ask: the database's own words (paths, hosts) go to the log only.
            tracing::warn!(%error, "readiness: the database is not reachable");
            Err(ApiError::Unavailable("the database is not reachable".into()))
        }
        Err(_) => Err(ApiError::Unavailable(format!(
            "the database did not answer within {} s",
            READY_TIMEOUT.as_secs()
        ))),
    }
}
