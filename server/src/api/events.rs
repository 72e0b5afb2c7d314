//! `/api/v1/events`: list with filters, and follow as server-sent events.

use crate::api::error::{ApiError, ApiQuery, AuthErrors};
use crate::api::extract::{Authed, Read};
use crate::events::{self, Filter};
use crate::identity::access;
use crate::paging::{cursor, page_limit};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use gpuplane_api::Page;
use gpuplane_api::error::{ErrorBody, FieldError};
use gpuplane_api::event::{Event, EventKind, Severity};
use serde::Deserialize;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventQuery {
    run_id: Option<String>,
    job_id: Option<String>,
    /// `info`, `warning` or `critical`.
    severity: Option<String>,
    /// e.g. `OOM`, `JOB_LOST`, `DISK_LOW`.
    kind: Option<String>,
    /// Page size, 1–500 (default 50).
    limit: Option<i64>,
    before: Option<i64>,
}

fn filter(query: &EventQuery, errors: &mut Vec<FieldError>) -> Filter {
    let severity = query.severity.as_deref().and_then(|s| {
        let parsed = Severity::parse(s);
        if parsed.is_none() {
            errors.push(FieldError {
                field: "severity".into(),
                message: format!("unknown severity `{s}`; expected info, warning or critical"),
            });
        }
        parsed
    });
    let kind = query.kind.as_deref().and_then(|k| {
        let parsed = EventKind::parse(k);
        if parsed.is_none() {
            let kinds: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
            errors.push(FieldError {
                field: "kind".into(),
                message: format!("unknown kind `{k}`; expected one of {}", kinds.join(", ")),
            });
        }
        parsed
    });
    Filter {
        run_id: query.run_id.clone(),
        job_id: query.job_id.clone(),
        severity,
        kind,
        after: None,
        projects: None,
    }
}

/// Events, newest first.
#[utoipa::path(get, path = "/events", tag = "events",
    security(("bearer" = ["read"])),
    params(EventQuery),
    responses((status = 200, body = Page<Event>), AuthErrors,
        (status = 422, body = ErrorBody)))]
pub async fn list_events(
    auth: Authed<Read>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<EventQuery>,
) -> Result<Json<Page<Event>>, ApiError> {
    let mut errors = Vec::new();
    let mut filter = filter(&query, &mut errors);
    filter.projects = access::visible_projects(&state.db, &auth.caller.principal())
        .await?
        .as_json();
    let limit = page_limit(query.limit, &mut errors);
    let before = cursor(query.before, &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    Ok(Json(events::list(&state.db, &filter, limit, before).await?))
}

/// New events as server-sent `event` events (same filters); resume with `Last-Event-ID`.
#[utoipa::path(get, path = "/events/stream", tag = "events",
    security(("bearer" = ["read"])),
    params(EventQuery),
    responses((status = 200, description = "`event` events carrying an Event", content_type = "text/event-stream"),
        AuthErrors, (status = 422, body = ErrorBody)))]
pub async fn follow_events(
    auth: Authed<Read>,
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<EventQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let mut errors = Vec::new();
    let mut filter = filter(&query, &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    filter.projects = access::visible_projects(&state.db, &auth.caller.principal())
        .await?
        .as_json();
    let permit = super::stream_permit(&state, &auth.caller)?;
    let resume = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<i64>().ok());
    filter.after = Some(match resume {
        Some(seq) => seq,
        None => crate::events::latest_seq(&state.db).await?,
    });
    let stream_max = state.config.stream_max;
    let follow = (
        state.wakes.subscribe_events(),
        state,
        filter,
        VecDeque::<SseEvent>::new(),
    );
    let stream = futures_util::stream::unfold(
        follow,
        |(mut receiver, state, mut filter, mut pending)| async move {
            loop {
                if let Some(event) = pending.pop_front() {
                    return Some((Ok(event), (receiver, state, filter, pending)));
                }
                if let Ok(found) = events::since(&state.db, &filter, 200).await {
                    for (seq, event) in found {
                        filter.after = Some(seq);
                        let data = serde_json::to_string(&event).unwrap_or_default();
                        pending.push_back(SseEvent::default().event("event").id(seq.to_string()).data(data));
                    }
                    if !pending.is_empty() {
                        continue;
                    }
                }
                let mut shutdown = state.shutdown.clone();
                tokio::select! {
                    _ = receiver.recv() => {}
                    () = tokio::time::sleep(Duration::from_secs(5)) => {}
                    _ = shutdown.wait_for(|stop| *stop) => return None,
                }
            }
        },
    );
    Ok(Sse::new(super::bounded(stream_max, permit, stream))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
