//! `/api/v1/runs`: create (SDK), list, show, follow, checkpoints, finish,
//! primary metric. Metric ingest, queries and charts are in `metrics.rs`.

use crate::api::error::{ApiError, ApiJson, ApiQuery, AuthErrors};
use crate::api::extract::{Authed, Ingest, Read, Write};
use crate::identity::access;
use crate::metrics::chart;
use crate::metrics::chart::{image_size, log_scale};
use crate::paging::{cursor, page_limit};
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
use gpuplane_api::experiment::{ConfigFilter, ConfigUpdate, RunChanges, RunColumn, RunSort};
use gpuplane_api::metric::{Checkpoint, NewRun, Run, SetPrimaryMetric};
use gpuplane_api::project::Role;
use serde::Deserialize;
use std::collections::HashMap;
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
    /// `newest` (default), `primary_metric` (best value first), or a column,
    /// descending with a leading `-`: `name`, `status`, `created`, `duration`,
    /// `tags`, `primary`, `config.KEY`, or a metric key (its latest value).
    /// Runs without a value come last.
    sort: Option<String>,
    /// Page size, 1–500 (default 50).
    limit: Option<i64>,
    /// `next_before` of the previous page (an opaque cursor).
    before: Option<i64>,
    /// `true`: archived runs only; left out or `false`: the others.
    archived: Option<bool>,
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
    let sort = RunSort::parse(query.sort.as_deref().unwrap_or_default()).unwrap_or_else(|message| {
        errors.push(FieldError {
            field: "sort".into(),
            message,
        });
        RunSort::newest()
    });
    let filters = list_filters(
        raw.as_deref(),
        &LIST_PARAMETERS,
        query.tag.clone(),
        query.q.clone(),
        query.archived.unwrap_or(false),
        &mut errors,
    );
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let visible = access::visible_projects(&state.db, &auth.caller.principal()).await?;
    let page = runs::list(
        &state.db,
        &visible,
        query.project.as_deref(),
        &filters,
        &sort,
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
    let follow = (state.wakes.subscribe_events(), state, run_id, seen);
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
const LIST_PARAMETERS: [&str; 7] = ["project", "tag", "q", "sort", "limit", "before", "archived"];

/// The filters of a run list or plot: `tag`, `q` and every `config.KEY`
/// parameter; any parameter not in `known` is an error.
fn list_filters(
    raw: Option<&str>,
    known: &[&str],
    tag: Option<String>,
    text: Option<String>,
    archived: bool,
    errors: &mut Vec<FieldError>,
) -> runs::details::Filters {
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
            None if known.contains(&key.as_ref()) => {}
            None => errors.push(FieldError {
                field: key.to_string(),
                message: format!("unknown parameter; use {} or config.KEY", known.join(", ")),
            }),
        }
    }
    runs::details::Filters {
        tag: tag.filter(|tag| !tag.is_empty()),
        text: text.filter(|text| !text.trim().is_empty()),
        config,
        archived,
    }
}

/// The runs a scatter plot shows (the list's filters) and its axes.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ScatterQuery {
    project: Option<String>,
    tag: Option<String>,
    q: Option<String>,
    /// `true`: archived runs only.
    archived: Option<bool>,
    /// The horizontal axis: `config.KEY`, a metric key (its latest value), `primary` or `duration`.
    x: String,
    /// The vertical axis, as `x`.
    y: String,
    /// `linear` (default) or `log`.
    x_scale: Option<String>,
    y_scale: Option<String>,
    /// Size in pixels: width 200–4000 (default 720), height 120–3000 (default 440).
    width: Option<u32>,
    height: Option<u32>,
}

const SCATTER_PARAMETERS: [&str; 10] = [
    "project", "tag", "q", "x", "y", "x_scale", "y_scale", "width", "height", "archived",
];

/// One dot per run that passes the filters and has a number on both axes
/// (and a positive one on a log axis); the caption counts the runs left out.
#[utoipa::path(get, path = "/runs/scatter.svg", tag = "runs",
    security(("bearer" = ["read"])),
    params(ScatterQuery),
    responses((status = 200, description = "The plot", content_type = "image/svg+xml"),
        AuthErrors, (status = 422, body = ErrorBody)))]
pub async fn scatter_svg(
    auth: Authed<Read>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ScatterQuery>,
    RawQuery(raw): RawQuery,
) -> Result<([(axum::http::header::HeaderName, &'static str); 2], String), ApiError> {
    let mut errors = Vec::new();
    let mut axis = |field: &str, text: &str| match RunColumn::parse(text) {
        Ok(RunColumn::Name | RunColumn::Status | RunColumn::Tags | RunColumn::Created) => {
            errors.push(FieldError {
                field: field.into(),
                message: "plot config.KEY, a metric key, primary or duration".into(),
            });
            None
        }
        Ok(column) => Some(column),
        Err(message) => {
            errors.push(FieldError {
                field: field.into(),
                message,
            });
            None
        }
    };
    let (x, y) = (axis("x", &query.x), axis("y", &query.y));
    let x_log = log_scale("x_scale", query.x_scale.as_deref(), &mut errors);
    let y_log = log_scale("y_scale", query.y_scale.as_deref(), &mut errors);
    let (width, height) = image_size(query.width, query.height, (720, 440), &mut errors);
    let filters = list_filters(
        raw.as_deref(),
        &SCATTER_PARAMETERS,
        query.tag.clone(),
        query.q.clone(),
        query.archived.unwrap_or(false),
        &mut errors,
    );
    let (Some(x), Some(y)) = (x, y) else {
        return Err(ApiError::Validation(errors));
    };
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let visible = access::visible_projects(&state.db, &auth.caller.principal()).await?;
    let project = query.project.as_deref();
    let xs = runs::column_numbers(&state.db, &visible, project, &filters, &x).await?;
    let ys: HashMap<i64, Option<f64>> = runs::column_numbers(&state.db, &visible, project, &filters, &y)
        .await?
        .into_iter()
        .collect();
    // A log axis shows positive numbers only.
    let usable = |value: Option<f64>, log: bool| value.filter(|v| !log || *v > 0.0);
    let points: Vec<(f64, f64)> = xs
        .iter()
        .filter_map(|(seq, x_value)| {
            let y_value = ys.get(seq).copied().flatten();
            Some((usable(*x_value, x_log)?, usable(y_value, y_log)?))
        })
        .collect();
    let left_out = xs.len() - points.len();
    let mut title = format!("{} by {} ({} runs", y.id(), x.id(), points.len());
    if left_out > 0 {
        title.push_str(&format!(", {left_out} without numbers left out"));
    }
    title.push(')');
    let options = chart::ScatterOptions {
        title,
        x_desc: x.id(),
        y_desc: y.id(),
        x_log,
        y_log,
        width,
        height,
    };
    Ok((
        [
            (axum::http::header::CONTENT_TYPE, "image/svg+xml"),
            (axum::http::header::CACHE_CONTROL, "private, no-store"),
        ],
        chart::scatter_svg(&points, &options),
    ))
}

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
    let mut tx = crate::store::write(&state.db).await?;
    runs::details::update_config(&mut tx, &run_id, &update.config).await?;
    tx.commit().await?;
    Ok(Json(runs::get(&state.db, &run_id).await?))
}

/// Changes a run's tags (replace, add, remove) and notes, or reopens a
/// finished SDK run (editors, or the job's own sdk token).
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
    let mut tx = crate::store::write(&state.db).await?;
    runs::details::change(&mut tx, &run_id, &changes).await?;
    if let Some(finished) = changes.finished {
        runs::set_finished(&mut tx, &run_id, finished).await?;
    }
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
