//! The agent protocol: an agent says hello when it connects, then sends heartbeats.

use crate::auth::{Agent, Authed};
use crate::error::{ApiError, ApiJson};
use crate::nodes;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use gpuplane_api::error::{ErrorBody, FieldError};
use gpuplane_api::node::{AgentHello, AgentWelcome, Heartbeat};
use std::collections::HashSet;

/// Registers the agent's node (by name) with its labels and GPUs.
#[utoipa::path(post, path = "/agent/hello", tag = "agent",
    security(("bearer" = ["agent"])),
    request_body = AgentHello,
    responses((status = 200, body = AgentWelcome), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn hello(
    _auth: Authed<Agent>,
    State(state): State<AppState>,
    ApiJson(hello): ApiJson<AgentHello>,
) -> Result<Json<AgentWelcome>, ApiError> {
    validate_hello(&hello)?;
    let node_id = nodes::register(&state.db, &hello).await?;
    state.nodes_changed.notify_one();
    tracing::info!(
        node_id,
        name = hello.name,
        gpus = hello.gpus.len(),
        "agent connected"
    );
    Ok(Json(AgentWelcome {
        node_id,
        heartbeat_interval_ms: state.config.heartbeat_interval.as_millis() as u64,
    }))
}

/// Keeps the node ONLINE and refreshes its GPU readings; 404 tells the agent to say hello again.
#[utoipa::path(post, path = "/agent/heartbeat", tag = "agent",
    security(("bearer" = ["agent"])),
    request_body = Heartbeat,
    responses((status = 204), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn heartbeat(
    _auth: Authed<Agent>,
    State(state): State<AppState>,
    ApiJson(beat): ApiJson<Heartbeat>,
) -> Result<http::StatusCode, ApiError> {
    nodes::heartbeat(&state.db, &beat.node_id, &beat.gpus)
        .await
        .map_err(|error| match error {
            crate::db::DbError::NotFound => ApiError::NotFound(format!(
                "node {} is not registered; send hello first",
                beat.node_id
            )),
            other => other.into(),
        })?;
    state.nodes_changed.notify_one();
    Ok(http::StatusCode::NO_CONTENT)
}

fn validate_hello(hello: &AgentHello) -> Result<(), ApiError> {
    let mut problems = Vec::new();
    let mut problem = |field: &str, message: String| {
        problems.push(FieldError {
            field: field.to_string(),
            message,
        })
    };
    if !valid_name(&hello.name) {
        problem(
            "name",
            "must be 1-128 characters of letters, digits, '.', '_' or '-'".into(),
        );
    }
    for key in hello.labels.keys() {
        if !valid_name(key) {
            problem(
                "labels",
                format!("label key `{key}` must be letters, digits, '.', '_' or '-'"),
            );
        }
    }
    let mut seen = HashSet::new();
    for gpu in &hello.gpus {
        if !seen.insert(gpu.index) {
            problem("gpus", format!("GPU index {} appears twice", gpu.index));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ApiError::Validation(problems))
    }
}

/// Node names and label keys: what fits in a URL and a shell without quoting.
pub fn valid_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}
