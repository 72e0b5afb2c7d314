//! `GET /api/v1/nodes`; draining a node and changing its labels (server admins).

use crate::api::error::{ApiError, ApiJson, AuthErrors};
use crate::api::extract::{Authed, Read, Write};
use crate::audit;
use crate::identity::access::require_server_admin;
use crate::nodes;
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, State};
use gpuplane_api::Page;
use gpuplane_api::audit::AuditAction;
use gpuplane_api::error::ErrorBody;
use gpuplane_api::node::{LabelChanges, Node};

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

/// Drains a node (server admins): it takes no new jobs, its running jobs
/// finish (DRAINING), then it is DRAINED.
#[utoipa::path(post, path = "/nodes/{name}/drain", tag = "nodes",
    security(("bearer" = ["write"])),
    params(("name" = String, Path, description = "The node's name")),
    responses((status = 200, body = Node), AuthErrors, (status = 404, body = ErrorBody)))]
pub async fn drain_node(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Node>, ApiError> {
    require_server_admin(&auth.caller, "draining a node")?;
    nodes::drain(&state.db, &name, auth.caller.user_name.as_deref()).await?;
    audit::by_caller(&state.db, &auth.caller, AuditAction::NodeDrain, &name, "").await?;
    state.wakes.jobs_changed();
    Ok(Json(node_named(&state, &name).await?))
}

/// Lets a drained node take jobs again (server admins).
#[utoipa::path(post, path = "/nodes/{name}/undrain", tag = "nodes",
    security(("bearer" = ["write"])),
    params(("name" = String, Path, description = "The node's name")),
    responses((status = 200, body = Node), AuthErrors, (status = 404, body = ErrorBody)))]
pub async fn undrain_node(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Node>, ApiError> {
    require_server_admin(&auth.caller, "undraining a node")?;
    nodes::undrain(&state.db, &name).await?;
    audit::by_caller(&state.db, &auth.caller, AuditAction::NodeUndrain, &name, "").await?;
    state.wakes.jobs_changed();
    Ok(Json(node_named(&state, &name).await?))
}

/// Changes a node's labels (server admins) without restarting its agent:
/// set some, remove some (the agent's too), or reset to the agent's. The
/// changes outlive agent restarts; queued jobs are planned again at once.
#[utoipa::path(post, path = "/nodes/{name}/labels", tag = "nodes",
    security(("bearer" = ["write"])),
    params(("name" = String, Path, description = "The node's name")),
    request_body = LabelChanges,
    responses((status = 200, body = Node), AuthErrors, (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn change_node_labels(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiJson(changes): ApiJson<LabelChanges>,
) -> Result<Json<Node>, ApiError> {
    require_server_admin(&auth.caller, "changing a node's labels")?;
    nodes::change_labels(&state.db, &name, &changes).await?;
    let mut detail: Vec<String> = changes.set.iter().map(|(k, v)| format!("{k}={v}")).collect();
    detail.extend(changes.remove.iter().map(|k| format!("{k}-")));
    if changes.reset {
        detail.insert(0, "reset".into());
    }
    audit::by_caller(
        &state.db,
        &auth.caller,
        AuditAction::NodeLabels,
        &name,
        &detail.join(" "),
    )
    .await?;
    state.wakes.jobs_changed();
    Ok(Json(node_named(&state, &name).await?))
}

async fn node_named(state: &AppState, name: &str) -> Result<Node, ApiError> {
    nodes::list(&state.db)
        .await?
        .into_iter()
        .find(|node| node.name == name)
        .ok_or_else(|| ApiError::NotFound(format!("no node {name}")))
}
