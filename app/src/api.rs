//! Server functions: the console's calls into the server. Each one is a
//! public HTTP endpoint and checks its caller itself.

use gpuplane_api::health::Health;
use leptos::prelude::*;

/// Server health for the dashboard; public, like `GET /api/v1/health`.
#[server(prefix = "/console/fn", endpoint = "server_health")]
pub async fn server_health() -> Result<Health, ServerFnError> {
    let backend = crate::backend::use_backend()?;
    backend.health().await.map_err(ServerFnError::new)
}
