//! `/api/v1/runs`: create (SDK), list, show, follow, checkpoints, finish,
//! primary metric. Metric ingest, queries and charts are in `metrics.rs`.

use crate::api::error::{ApiError, ApiJson, ApiQuery, AuthErrors};
use crate::identity::access;
use crate::identity::auth::{Authed, Ingest, Read, Write};
use crate::paging::{cursor, page_limit, sort_order};
use crate::runs;
use crate::runs::primary;
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use gpuplane_api::Page;
use gpuplane_api::error::{ErrorBody, FieldError};
use gpuplane_api::experiment::{ConfigFilter, ConfigUpdate, RunChanges};
use gpuplane_api::metric::{Checkpoint, NewRun, Run, SetPrimaryMetric};
use gpuplane_api::project::Role;
use serde::Deserialize;
use std::convert::Infallible;
use std::time::Duration;

/// Creates a run outside jobs, for the SDK (`gpuplane.init(project=…, name=…)`).
#[utoipa::path(post, path = "/runs", tag = "runs",
    security(("bearer" = ["sdk", "write"])),
    request_body = NewRun,
    responses((status = 201, body = Run), AuthErrors,
        (status = 422, body = ErrorBody)))]
pub async fn create_run(
    auth: Authed<Ingest>,
    State(state): State<AppState>,
    ApiJson(new): ApiJson<NewRun>,
) -> Result<(StatusCode, Json<Run>), ApiError> {
    if auth.caller.run_id.is_some() {
        return Err(ApiError::Forbidden(
            "a job's token writes only to its job's run".into(),
        ));
    }
    let run_id = runs::create(&state.db, &auth.caller.principal(), &new).await?;
    Ok((StatusCode::CREATED, Json(runs::get(&state.db, &run_id).await?)))
}

/// Also `config.KEY=VALUE` filters: `config.lr=>0.001`, `config.optimizer=adam`,
/// with `=`, `!=`, `<`, `<=`, `>`, `>=` (ordering compares numbers).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    project: Option<String>,
    /// Only runs with this tag.
    tag: Option<String>,
    /// Only runs whose name, notes or tags contain this text (any case).
    q: Option<String>,
    /// `newest` (default) or `primary_metric`: best value first, the top `limit` only.
    sort: Option<String>,
    /// Page size, 1–500 (default 50).
    limit: Option<i64>,
    /// `next_before` of the previous page.
    before: Option<i64>,
}

/// Runs of the projects the caller can see, with their latest metrics and primary metric.
#[utoipa::path(get, path = "/runs", tag = "runs",
    security(("bearer" = ["read"])),
    params(ListQuery),
    responses((status = 200, body = Page<Run>), AuthErrors,
        (status = 422, body = ErrorBody)))]
pub async fn list_runs(
    auth: Authed<Read>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ListQuery>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Page<Run>>, ApiError> {
    let mut errors = Vec::new();
    let limit = page_limit(query.limit, &mut errors);
    let before = cursor(query.before, &mut errors);
    let sort = sort_order(query.sort.as_deref(), &mut errors);
    let mut config = Vec::new();
    for (key, value) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
        match key.strip_prefix("config.") {
            Some(name) => match ConfigFilter::parse(name, &value) {
                Ok(filter) => config.push(filter),
                Err(message) => errors.push(FieldError {
                    field: key.to_string(),
                    message,
                }),
            },
            None if LIST_PARAMETERS.contains(&key.as_ref()) => {}
            None => errors.push(FieldError {
                field: key.to_string(),
                message: format!(
                    "unknown parameter; use {} or config.KEY",
                    LIST_PARAMETERS.join(", ")
                ),
            }),
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let filters = runs::details::Filters {
        tag: query.tag.filter(|tag| !tag.is_empty()),
        text: query.q.filter(|text| !text.trim().is_empty()),
        config,
    };
    let visible = access::visible_projects(&state.db, &auth.caller.principal()).await?;
    let page = runs::list(
        &state.db,
        &visible,
        query.project.as_deref(),
        &filters,
        sort,
        limit,
        before,
    )
    .await?;
    Ok(Json(page))
}

/// Sets the metric that ranks the run, and whether larger or smaller is
/// better; the key need not have points yet.
#[utoipa::path(post, path = "/runs/{run_id}/primary-metric", tag = "runs",
    security(("bearer" = ["write"])),
    params(("run_id" = String, Path)),
    request_body = SetPrimaryMetric,
    responses((status = 200, body = Run), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set_primary_metric(
    auth: Authed<Write>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    ApiJson(request): ApiJson<SetPrimaryMetric>,
) -> Result<Json<Run>, ApiError> {
    runs::check(&state.db, &auth.caller, &run_id, Role::Editor).await?;
    primary::set_for_run(&state.db, &run_id, &request).await?;
    Ok(Json(runs::get(&state.db, &run_id).await?))
}

/// A run with its latest value per metric (non-finite ones flagged).
#[utoipa::path(get, path = "/runs/{run_id}", tag = "runs",
    security(("bearer" = ["read"])),
    params(("run_id" = String, Path)),
    responses((status = 200, body = Run), AuthErrors,
        (status = 404, body = ErrorBody)))]
pub async fn get_run(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Json<Run>, ApiError> {
    runs::check(&state.db, &auth.caller, &run_id, Role::Viewer).await?;
    Ok(Json(runs::get(&state.db, &run_id).await?))
}

/// A `changed` event whenever the run gets points or checkpoints or its
/// job changes state (at most one a second), for live pages.
#[utoipa::path(get, path = "/runs/{run_id}/stream", tag = "runs",
    security(("bearer" = ["read"])),
    params(("run_id" = String, Path)),
    responses((status = 200, description = "`changed` events", content_type = "text/event-stream"),
        AuthErrors, (status = 404, body = ErrorBody)))]
pub async fn follow_run(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    runs::check(&state.db, &auth.caller, &run_id, Role::Viewer).await?;
    let permit = super::stream_permit(&state, &auth.caller)?;
    // Each event's id is the version it announces. A client that reconnects
    // hears at once if the run changed meanwhile; a new client hears the
    // current version first, so nothing between its page load and the
    // stream's start goes unnoticed.
    let seen = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_string)
        .unwrap_or_default();
    let stream_max = state.config.stream_max;
    let follow = (state.event_recorded.subscribe(), state, run_id, seen);
    let stream = futures_util::stream::unfold(follow, |(mut receiver, state, run_id, seen)| async move {
        loop {
            if let Ok(now) = runs::version(&state.db, &run_id).await
                && now != seen
            {
                let event = SseEvent::default()
                    .event("changed")
                    .id(now.clone())
                    .data(now.clone());
                return Some((Ok(event), (receiver.resubscribe(), state, run_id, now)));
            }
            let mut shutdown = state.shutdown.clone();
            tokio::select! {
                _ = receiver.recv() => {}
                () = tokio::time::sleep(Duration::from_secs(5)) => {}
                _ = shutdown.wait_for(|stop| *stop) => return None,
            }
            // Batches arrive many a second: one look a second is enough for a page.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    Ok(Sse::new(super::bounded(stream_max, permit, stream))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// The checkpoint files a run wrote, each with the other runs that wrote the same path.
#[utoipa::path(get, path = "/runs/{run_id}/checkpoints", tag = "runs",
    security(("bearer" = ["read"])),
    params(("run_id" = String, Path)),
    responses((status = 200, body = Page<Checkpoint>), AuthErrors,
        (status = 404, body = ErrorBody)))]
pub async fn list_checkpoints(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Json<Page<Checkpoint>>, ApiError> {
    runs::check(&state.db, &auth.caller, &run_id, Role::Viewer).await?;
    Ok(Json(Page {
        items: runs::checkpoints(&state.db, &run_id).await?,
        next_before: None,
    }))
}

/// The list parameters besides `config.KEY`.
const LIST_PARAMETERS: [&str; 6] = ["project", "tag", "q", "sort", "limit", "before"];

/// Sets config keys of a run (`gpuplane.init(config=…)`, `run.config.update(…)`);
/// other keys stay. A job's sdk token reaches only its job's run.
#[utoipa::path(post, path = "/runs/{run_id}/config", tag = "runs",
    security(("bearer" = ["sdk", "write"])),
    params(("run_id" = String, Path)),
    request_body = ConfigUpdate,
    responses((status = 200, body = Run), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn update_config(
    auth: Authed<Ingest>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    ApiJson(update): ApiJson<ConfigUpdate>,
) -> Result<Json<Run>, ApiError> {
    runs::check(&state.db, &auth.caller, &run_id, Role::Editor).await?;
    let mut tx = state.db.begin_with("BEGIN IMMEDIATE").await?;
    runs::details::update_config(&mut tx, &run_id, &update.config).await?;
    tx.commit().await?;
    Ok(Json(runs::get(&state.db, &run_id).await?))
}

/// Changes a run's tags (replace, add, remove) and notes (editors, or the
/// job's own sdk token).
#[utoipa::path(patch, path = "/runs/{run_id}", tag = "runs",
    security(("bearer" = ["sdk", "write"])),
    params(("run_id" = String, Path)),
    request_body = RunChanges,
    responses((status = 200, body = Run), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn change_run(
    auth: Authed<Ingest>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    ApiJson(changes): ApiJson<RunChanges>,
) -> Result<Json<Run>, ApiError> {
    runs::check(&state.db, &auth.caller, &run_id, Role::Editor).await?;
    let mut tx = state.db.begin_with("BEGIN IMMEDIATE").await?;
    runs::details::change(&mut tx, &run_id, &changes).await?;
    tx.commit().await?;
    Ok(Json(runs::get(&state.db, &run_id).await?))
}

/// Marks an SDK run finished (`run.finish()`).
#[utoipa::path(post, path = "/runs/{run_id}/finish", tag = "runs",
    security(("bearer" = ["sdk", "write"])),
    params(("run_id" = String, Path)),
    responses((status = 200, body = Run), AuthErrors,
        (status = 404, body = ErrorBody)))]
pub async fn finish_run(
    auth: Authed<Ingest>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Json<Run>, ApiError> {
    runs::check(&state.db, &auth.caller, &run_id, Role::Editor).await?;
    runs::finish(&state.db, &run_id).await?;
    Ok(Json(runs::get(&state.db, &run_id).await?))
}
