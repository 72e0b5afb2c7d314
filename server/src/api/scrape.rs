//! `GET /metrics` for Prometheus (`scrape.rs` makes the text). On the main
//! address it takes a bearer token of scope `metrics` whose owner is still a
//! server admin (the figures span every project); on `metrics_bind` it takes
//! none, since only the network the operator chose reaches that address.

use crate::api::error::ApiError;
use crate::api::extract::{Access, Authed};
use crate::state::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use gpuplane_api::auth::Scope;
use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Scraping: `metrics` tokens only (no other scope opens it, and a
/// `metrics` token opens nothing else).
pub struct Scrape;
impl Access for Scrape {
    const NEEDED: Scope = Scope::Metrics;
}

/// `GET /metrics` on the main address.
pub async fn with_token(auth: Authed<Scrape>, State(state): State<AppState>) -> Result<Response, ApiError> {
    if !auth.caller.is_server_admin() {
        return Err(ApiError::Forbidden(
            "this metrics token's owner is no longer a server admin".into(),
        ));
    }
    unauthenticated(State(state)).await
}

/// `GET /metrics` on `metrics_bind`.
pub async fn unauthenticated(State(state): State<AppState>) -> Result<Response, ApiError> {
    let text = crate::scrape::render(&state).await?;
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response())
}
