//! Job output: the kept tail, a live SSE follow that resumes from
//! `Last-Event-ID`, and the full file fetched from the agent.

use crate::api::error::{ApiError, ApiQuery, AuthErrors};
use crate::api::extract::{Authed, Read};
use crate::jobs::store;
use crate::logs;
use crate::nodes::log_relay;
use crate::state::AppState;
use crate::store::ids::new_id;
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use gpuplane_api::agent::AgentCommand;
use gpuplane_api::error::{ErrorBody, FieldError};
use gpuplane_api::log::{LogStream, Logs};
use gpuplane_api::project::Role;
use serde::Deserialize;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

pub const DEFAULT_TAIL: i64 = 200;
const MAX_TAIL: i64 = 10_000;
/// How long the server waits for an agent to start uploading a full log.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct LogQuery {
    /// `stdout` or `stderr` (default: both, in arrival order).
    stream: Option<LogStream>,
    /// The newest N lines, 1–10000 (default 200).
    tail: Option<i64>,
    /// Attempt number (default: the latest).
    attempt: Option<i64>,
    /// A multi-node job's member (its `GPUCTL_NODE_RANK`; default: every member's lines).
    rank: Option<i64>,
}

impl LogQuery {
    fn only(&self) -> logs::Only {
        logs::Only {
            stream: self.stream,
            rank: self.rank,
        }
    }
}

fn check_log_query(query: &LogQuery) -> Result<i64, ApiError> {
    let mut errors = Vec::new();
    let tail = query.tail.unwrap_or(DEFAULT_TAIL);
    if !(1..=MAX_TAIL).contains(&tail) {
        errors.push(FieldError {
            field: "tail".into(),
            message: format!("must be between 1 and {MAX_TAIL} (use /logs/full for everything)"),
        });
    }
    if query.attempt.is_some_and(|a| a < 1) {
        errors.push(FieldError {
            field: "attempt".into(),
            message: "must be 1 or more".into(),
        });
    }
    if query
        .rank
        .is_some_and(|rank| !(0..gpuplane_api::job::MAX_NODES_PER_JOB).contains(&rank))
    {
        errors.push(FieldError {
            field: "rank".into(),
            message: format!(
                "must be between 0 and {}",
                gpuplane_api::job::MAX_NODES_PER_JOB - 1
            ),
        });
    }
    if errors.is_empty() {
        Ok(tail)
    } else {
        Err(ApiError::Validation(errors))
    }
}

/// The newest lines the server keeps (the newest 2000 per stream by default).
#[utoipa::path(get, path = "/jobs/{job_id}/logs", tag = "logs",
    security(("bearer" = ["read"])),
    params(("job_id" = String, Path), LogQuery),
    responses((status = 200, body = Logs), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn job_logs(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(job_id): Path<String>,
    ApiQuery(query): ApiQuery<LogQuery>,
) -> Result<Json<Logs>, ApiError> {
    let tail = check_log_query(&query)?;
    store::get_for(&state.db, &auth.caller.principal(), &job_id, Role::Viewer).await?;
    let attempt = logs::resolve_attempt(&state.db, &job_id, query.attempt).await?;
    let (_, logs) = logs::tail(&state.db, &job_id, attempt, query.only(), tail).await?;
    Ok(Json(logs))
}

/// Follows a job's output as server-sent events: `line` events (id = a
/// cursor; send it back as `Last-Event-ID` to resume without gaps or
/// repeats), then one `end` event when the job has ended. Without
/// `attempt`, follows every attempt, retries included.
#[utoipa::path(get, path = "/jobs/{job_id}/logs/stream", tag = "logs",
    security(("bearer" = ["read"])),
    params(("job_id" = String, Path), LogQuery),
    responses((status = 200, description = "`line` events carrying a LogLine, then `end`", content_type = "text/event-stream"),
        AuthErrors, (status = 404, body = ErrorBody)))]
pub async fn follow_logs(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(job_id): Path<String>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<LogQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let tail = check_log_query(&query)?;
    store::get_for(&state.db, &auth.caller.principal(), &job_id, Role::Viewer).await?;
    let permit = super::stream_permit(&state, &auth.caller)?;
    let resume = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<i64>().ok());
    let last_id = match resume {
        Some(id) => id,
        None => {
            // Start with the newest `tail` lines of the latest attempt.
            let attempt = logs::resolve_attempt(&state.db, &job_id, query.attempt).await?;
            let (lines, _) = logs::tail(&state.db, &job_id, attempt, query.only(), tail).await?;
            match lines.first() {
                Some((id, _)) => id - 1,
                None => logs::start_of_attempt(&state.db, &job_id, attempt).await?,
            }
        }
    };
    let stream_max = state.config.stream_max;
    let follow = Follow {
        receiver: state.wakes.subscribe_log(),
        state,
        job_id,
        attempt: query.attempt,
        only: query.only(),
        last_id,
        pending: VecDeque::new(),
        done: false,
    };
    let events = futures_util::stream::unfold(follow, |mut follow| async move {
        let event = follow.next().await?;
        Some((Ok(event), follow))
    });
    Ok(Sse::new(super::bounded(stream_max, permit, events))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

struct Follow {
    state: AppState,
    receiver: tokio::sync::broadcast::Receiver<String>,
    job_id: String,
    attempt: Option<i64>,
    only: logs::Only,
    last_id: i64,
    pending: VecDeque<Event>,
    done: bool,
}

impl Follow {
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if self.done {
                return None;
            }
            // The job's state is read before its lines: lines committed
            // with (or before) its end are then never missed.
            let status = match store::get(&self.state.db, &self.job_id).await {
                Ok(job) => job.status,
                Err(_) => {
                    self.done = true;
                    continue;
                }
            };
            let lines = match logs::after(
                &self.state.db,
                &self.job_id,
                self.attempt,
                self.only,
                self.last_id,
                500,
            )
            .await
            {
                Ok(lines) => lines,
                Err(error) => {
                    tracing::warn!(%error, job_id = self.job_id, "log follow failed");
                    self.done = true;
                    return Some(
                        Event::default()
                            .event("error")
                            .data("the server could not read the log"),
                    );
                }
            };
            if !lines.is_empty() {
                for (id, line) in lines {
                    self.last_id = id;
                    let data = serde_json::to_string(&line).unwrap_or_default();
                    self.pending
                        .push_back(Event::default().event("line").id(id.to_string()).data(data));
                }
                continue;
            }
            if status.is_terminal() {
                self.done = true;
                return Some(Event::default().event("end").data(status.as_str()));
            }
            if !self.wait_for_lines().await {
                self.done = true;
            }
        }
    }

    /// Waits until this job may have new lines; false on shutdown.
    async fn wait_for_lines(&mut self) -> bool {
        let mut shutdown = self.state.shutdown.clone();
        loop {
            tokio::select! {
                received = self.receiver.recv() => match received {
                    Ok(job_id) if job_id == self.job_id => return true,
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return true,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return false,
                },
                // The job may end without writing more.
                () = tokio::time::sleep(Duration::from_secs(2)) => return true,
                _ = shutdown.wait_for(|stop| *stop) => return false,
            }
        }
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct FullLogQuery {
    /// `stdout` (default) or `stderr`.
    stream: Option<LogStream>,
    /// Attempt number (default: the latest).
    attempt: Option<i64>,
    /// A multi-node job's member, whose node has the file (default: rank 0).
    rank: Option<i64>,
}

/// The whole log file of an attempt, streamed from its agent as plain text.
/// 503 when the agent is offline (the server's kept lines are still at /logs).
#[utoipa::path(get, path = "/jobs/{job_id}/logs/full", tag = "logs",
    security(("bearer" = ["read"])),
    params(("job_id" = String, Path), FullLogQuery),
    responses((status = 200, description = "The file", content_type = "text/plain"),
        AuthErrors, (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn full_log(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(job_id): Path<String>,
    ApiQuery(query): ApiQuery<FullLogQuery>,
) -> Result<Response, ApiError> {
    store::get_for(&state.db, &auth.caller.principal(), &job_id, Role::Viewer).await?;
    let stream = query.stream.unwrap_or(LogStream::Stdout);
    let attempt = logs::resolve_attempt(&state.db, &job_id, query.attempt).await?;
    let node = match query.rank {
        Some(rank) => crate::jobs::members::node_of(&state.db, &job_id, attempt, rank)
            .await?
            .ok_or_else(|| {
                ApiError::NotFound(format!("attempt {attempt} of job {job_id} has no rank {rank}"))
            })?,
        None => store::attempt_node(&state.db, &job_id, attempt)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("job {job_id} has no attempt {attempt}")))?,
    };
    let (node_id, node_name, node_status) = node;
    let path = format!("~/.gpuctl/jobs/{job_id}/attempt-{attempt}/{}", stream.file_name());
    if node_status != "ONLINE" {
        return Err(ApiError::Unavailable(format!(
            "the agent on {node_name} is offline, and the full log is on that host at {path}; \
             the server keeps the newest {} lines per stream (gpuctl logs -n {})",
            state.config.settings.log_tail_lines, state.config.settings.log_tail_lines
        )));
    }
    let request_id = new_id("fetch");
    let command = AgentCommand::FetchLog {
        request_id: request_id.clone(),
        job_id: job_id.clone(),
        attempt,
        stream,
        mask: Vec::new(),
    };
    // An upload to this server comes straight to the reader; with replicas,
    // one to another comes in parts through the database (`log_relay`).
    let upload = state.agents.expect_upload(&request_id, &node_name);
    if state.wakes.may_have_replicas() {
        log_relay::ask(
            &state.db,
            &state.wakes,
            &request_id,
            &node_id,
            &node_name,
            &command,
        )
        .await?;
    } else {
        state.agents.push(&node_id, command);
    }
    let relayed_here = async {
        if state.wakes.may_have_replicas() {
            log_relay::first_part(&state.db, &request_id).await
        } else {
            std::future::pending().await
        }
    };
    let arrived = tokio::time::timeout(FETCH_TIMEOUT, async {
        tokio::select! {
            upload = upload => upload.map(Arrived::Here).map_err(|_| ()),
            relayed = relayed_here => relayed.map(|()| Arrived::Relayed).map_err(|_| ()),
        }
    })
    .await;
    let body = match arrived {
        Ok(Ok(Arrived::Here((body, done)))) => {
            if state.wakes.may_have_replicas() {
                let _ = log_relay::forget(&state.db, &request_id).await;
            }
            // `done` lives as long as the relayed stream, so the agent's upload
            // request stays open until the reader has everything (or goes away).
            Body::from_stream(body.into_data_stream().map(move |chunk| {
                let _ = &done;
                chunk
            }))
        }
        Ok(Ok(Arrived::Relayed)) => {
            state.agents.abandon_upload(&request_id);
            Body::from_stream(log_relay::parts(state.db.clone(), request_id, FETCH_TIMEOUT))
        }
        _ => {
            state.agents.abandon_upload(&request_id);
            if state.wakes.may_have_replicas() {
                let _ = log_relay::forget(&state.db, &request_id).await;
            }
            return Err(ApiError::Unavailable(format!(
                "the agent on {node_name} did not send {path} within {}s",
                FETCH_TIMEOUT.as_secs()
            )));
        }
    };
    let file_name = format!("{job_id}-attempt-{attempt}-{}", stream.file_name());
    Ok((
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_string()),
            // A download, never a page the browser renders.
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file_name}\""),
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_string()),
        ],
        body,
    )
        .into_response())
}

/// Where the agent's upload of a full log arrived.
enum Arrived {
    /// At this server: the body and the signal to send when it is read.
    Here(crate::nodes::agent_link::Upload),
    /// At another replica, which writes it in parts (`log_relay`).
    Relayed,
}
