//! `GET /api/v1/nodes`.

use crate::api::error::{ApiError, AuthErrors};
use crate::identity::auth::{Authed, Read};
use crate::nodes;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use gpuplane_api::Page;
use gpuplane_api::node::Node;

/// Every node with its GPUs and their latest readings.
#[utoipa::path(get, path = "/nodes", tag = "nodes",
    security(("bearer" = ["read"])),
    responses((status = 200, body = Page<Node>), AuthErrors))]
pub async fn list_nodes(
    _auth: Authed<Read>,
    State(state): State<AppState>,
) -> Result<Json<Page<Node>>, ApiError> {
    Ok(Json(Page {
        items: nodes::list(&state.db).await?,
        next_before: None,
    }))
}
