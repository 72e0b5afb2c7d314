//! The agent protocol (see `gpuplane_api::agent`): hello, long poll, reports,
//! and full-log uploads.

use crate::api::error::{ApiError, ApiJson, AuthErrors};
use crate::api::extract::{Agent, Authed};
use crate::identity::access::Caller;
use crate::jobs::{Handles, dispatch, reports};
use crate::nodes;
use crate::nodes::log_relay;
use crate::state::AppState;
use crate::store::time::now_ms;
use crate::wake::Wake;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use gpuplane_api::agent::{AgentHello, AgentWelcome, Poll, PollAnswer, Report};
use gpuplane_api::auth::ClientAddress;
use gpuplane_api::error::{ErrorBody, FieldError};
use gpuplane_api::telemetry::TelemetryBatch;
use std::collections::HashSet;

/// Registers the agent's node (by name) with its labels and GPUs, and tells
/// it, for each attempt it still has, where to resume or whether to drop it.
#[utoipa::path(post, path = "/agent/hello", tag = "agent",
    security(("bearer" = ["agent"])),
    request_body = AgentHello,
    responses((status = 200, body = AgentWelcome), AuthErrors, (status = 422, body = ErrorBody)))]
pub async fn hello(
    auth: Authed<Agent>,
    State(state): State<AppState>,
    client: Option<Extension<ClientAddress>>,
    ApiJson(hello): ApiJson<AgentHello>,
) -> Result<Json<AgentWelcome>, ApiError> {
    validate_hello(&hello)?;
    // Where other members of a multi-node job reach this node.
    let address = hello.advertise_addr.clone().or_else(|| {
        client
            .map(|Extension(ClientAddress(ip))| ip)
            .filter(|ip| !ip.is_unspecified())
            .map(|ip| ip.to_string())
    });
    let mut tx = crate::store::write(&state.db).await?;
    crate::identity::tokens::bind_to_node(&mut tx, &auth.caller.token_id, &hello.name).await?;
    let (node_id, was_offline) = nodes::register(&mut tx, &hello, address.as_deref()).await?;
    if was_offline {
        nodes::record_reconnect(&mut tx, &node_id, &hello.name, now_ms()).await?;
    }
    let resume = dispatch::reconcile(&mut tx, &state.secret, &node_id, &hello.name, &hello.attempts).await?;
    tx.commit().await?;
    state.wakes.wake(Wake::Nodes);
    state.wakes.jobs_changed();
    tracing::info!(
        node_id,
        name = hello.name,
        gpus = hello.gpus.len(),
        attempts = hello.attempts.len(),
        "agent connected"
    );
    Ok(Json(AgentWelcome {
        node_id,
        server_id: state.secret.server_id(),
        heartbeat_interval_ms: state.config.heartbeat_interval.as_millis() as u64,
        resume,
    }))
}

/// The agent's heartbeat and command channel: answers at once when there
/// are commands, else waits up to the heartbeat interval for some.
#[utoipa::path(post, path = "/agent/poll", tag = "agent",
    security(("bearer" = ["agent"])),
    request_body = Poll,
    responses((status = 200, body = PollAnswer), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn poll(
    auth: Authed<Agent>,
    State(state): State<AppState>,
    State(jobs): State<Handles>,
    ApiJson(mut poll): ApiJson<Poll>,
) -> Result<Json<PollAnswer>, ApiError> {
    require_own_node(&state, &auth.caller, &poll.node_id).await?;
    // Counted as a connected agent while it waits (`/metrics`).
    let _open = state.observed.open_poll();
    dispatch::forgotten(&jobs, &poll.node_id, &poll.forgotten).await?;
    // Written with other nodes' heartbeats within a moment (`nodes::heartbeats`).
    state
        .heartbeats
        .record(&poll.node_id, std::mem::take(&mut poll.gpus));
    let waker = state.wakes.agent(&poll.node_id);
    let deadline = tokio::time::Instant::now() + state.config.heartbeat_interval;
    let mut shutdown = state.shutdown.clone();
    loop {
        let commands = dispatch::commands_for(&jobs, &poll.node_id, &poll.running).await?;
        if !commands.is_empty() {
            return Ok(Json(PollAnswer { commands }));
        }
        tokio::select! {
            () = waker.notified() => {}
            () = tokio::time::sleep_until(deadline) => return Ok(Json(PollAnswer { commands })),
            _ = shutdown.wait_for(|stop| *stop) => return Ok(Json(PollAnswer { commands })),
        }
    }
}

/// What the agent saw: starts, output lines, exits, disk readings. Applied
/// in one transaction; replays change nothing.
#[utoipa::path(post, path = "/agent/report", tag = "agent",
    security(("bearer" = ["agent"])),
    request_body = Report,
    responses((status = 204), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn report(
    auth: Authed<Agent>,
    State(state): State<AppState>,
    State(jobs): State<Handles>,
    ApiJson(report): ApiJson<Report>,
) -> Result<StatusCode, ApiError> {
    require_own_node(&state, &auth.caller, &report.node_id).await?;
    let applied = reports::apply_report(&jobs, &report).await?;
    for job_id in applied.logs_for {
        state.wakes.wake(Wake::Log(job_id));
    }
    if applied.jobs_changed {
        state.wakes.jobs_changed();
    }
    for node_id in applied.wake_agents {
        state.wakes.wake(Wake::Agent(node_id));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// GPU and process samples since the agent's last batch, stored with the
/// node's telemetry, and GPU faults, recorded as `GPU_ERROR` events; a batch
/// id seen before adds nothing.
#[utoipa::path(post, path = "/agent/telemetry", tag = "agent",
    security(("bearer" = ["agent"])),
    request_body = TelemetryBatch,
    responses((status = 204), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn telemetry(
    auth: Authed<Agent>,
    State(state): State<AppState>,
    ApiJson(batch): ApiJson<TelemetryBatch>,
) -> Result<StatusCode, ApiError> {
    require_own_node(&state, &auth.caller, &batch.node_id).await?;
    nodes::telemetry::validate(&batch)?;
    let ingested = state
        .telemetry_writer
        .store((batch.node_id.clone(), batch))
        .await?;
    if ingested.faults > 0 {
        state.wakes.wake(Wake::Events);
    }
    Ok(StatusCode::NO_CONTENT)
}

/// The body of a full log file the server asked for (`fetch_log` command),
/// relayed to the waiting reader; answers once the reader has it all.
#[utoipa::path(post, path = "/agent/log-fetch/{request_id}", tag = "agent",
    security(("bearer" = ["agent"])),
    params(("request_id" = String, Path)),
    request_body(content = String, content_type = "application/octet-stream"),
    responses((status = 204), AuthErrors,
        (status = 404, body = ErrorBody)))]
pub async fn log_upload(
    auth: Authed<Agent>,
    State(state): State<AppState>,
    Path(request_id): Path<String>,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let node = auth.caller.node.as_deref().unwrap_or_default();
    let gone = || ApiError::NotFound(format!("nobody is waiting for {request_id} any more"));
    match state.agents.take_upload(&request_id, node) {
        Some(reader) => {
            let done = crate::nodes::agent_link::hand_over(reader, body).ok_or_else(gone)?;
            let _ = done.await;
        }
        // With replicas, the reader may be on the one the user asked.
        None if state.wakes.may_have_replicas() => {
            if !log_relay::relay_upload(&state.db, &request_id, node, body).await? {
                return Err(gone());
            }
        }
        None => return Err(gone()),
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Passes when `node_id` is the node the caller's agent token speaks for;
/// 404 when no such node is registered (the agent then says hello again).
async fn require_own_node(state: &AppState, caller: &Caller, node_id: &str) -> Result<(), ApiError> {
    let name = state
        .agents
        .node_name(&state.db, node_id)
        .await
        .map_err(crate::store::Error::from)?;
    let name = name
        .ok_or_else(|| ApiError::NotFound(format!("node {node_id} is not registered; send hello first")))?;
    match &caller.node {
        Some(bound) if *bound == name => Ok(()),
        Some(bound) => Err(ApiError::Forbidden(format!(
            "this agent token speaks only for node `{bound}`; {node_id} is node `{name}`"
        ))),
        None => Err(ApiError::Forbidden(
            "this agent token has not said hello as any node yet; send hello first".into(),
        )),
    }
}

fn validate_hello(hello: &AgentHello) -> Result<(), ApiError> {
    let mut problems = Vec::new();
    let mut problem = |field: &str, message: String| {
        problems.push(FieldError {
            field: field.to_string(),
            message,
        })
    };
    if !gpuplane_api::node::valid_name(&hello.name) {
        problem(
            "name",
            "must be 1-128 characters of letters, digits, '.', '_' or '-'".into(),
        );
    }
    if let Some(address) = &hello.advertise_addr
        && !gpuplane_api::node::valid_address(address)
    {
        problem(
            "advertise_addr",
            "must be a host name or IP address (1-253 letters, digits, '.', '-', ':', '_')".into(),
        );
    }
    if let Some(isolation) = &hello.isolation
        && (isolation.len() > 512 || isolation.chars().any(char::is_control))
    {
        problem(
            "isolation",
            "must be at most 512 characters, without control characters".into(),
        );
    }
    for key in hello.labels.keys() {
        if !gpuplane_api::node::valid_name(key) {
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
