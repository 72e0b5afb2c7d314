//! `/api/v1/runs`: create (SDK), show, ingest metrics, query metrics, finish.

use crate::access;
use crate::api::jobs::{cursor, page_limit, sort_order};
use crate::auth::{Authed, Ingest, Read, Write};
use crate::error::{ApiError, ApiJson, ApiQuery, parse_json};
use crate::metrics::{self, Axis, Query};
use crate::primary;
use crate::runs;
use crate::state::AppState;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use gpuplane_api::Page;
use gpuplane_api::error::{ErrorBody, FieldError};
use gpuplane_api::metric::{Batch, Checkpoint, IngestResult, NewRun, Run, Series, SetPrimaryMetric};
use gpuplane_api::project::Role;
use serde::Deserialize;

/// The largest ingest body (a batch of 100,000 points fits).
pub const MAX_INGEST_BYTES: usize = 8 * 1024 * 1024;

/// Creates a run outside jobs, for the SDK (`gpuplane.init(project=…, name=…)`).
#[utoipa::path(post, path = "/runs", tag = "runs",
    security(("bearer" = ["sdk", "write"])),
    request_body = NewRun,
    responses((status = 201, body = Run), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
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

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    project: Option<String>,
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
    responses((status = 200, body = Page<Run>), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn list_runs(
    auth: Authed<Read>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<Page<Run>>, ApiError> {
    let mut errors = Vec::new();
    let limit = page_limit(query.limit, &mut errors);
    let before = cursor(query.before, &mut errors);
    let sort = sort_order(query.sort.as_deref(), &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let visible = access::visible_projects(&state.db, &auth.caller.principal()).await?;
    let page = runs::list(&state.db, &visible, query.project.as_deref(), sort, limit, before).await?;
    Ok(Json(page))
}

/// Sets the metric that ranks the run, and whether larger or smaller is
/// better; the key need not have points yet.
#[utoipa::path(post, path = "/runs/{run_id}/primary-metric", tag = "runs",
    security(("bearer" = ["write"])),
    params(("run_id" = String, Path)),
    request_body = SetPrimaryMetric,
    responses((status = 200, body = Run), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
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
    responses((status = 200, body = Run), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn get_run(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Json<Run>, ApiError> {
    runs::check(&state.db, &auth.caller, &run_id, Role::Viewer).await?;
    Ok(Json(runs::get(&state.db, &run_id).await?))
}

/// Stores a batch of points. Values are numbers or the strings "NaN",
/// "Infinity", "-Infinity"; a batch id seen before adds nothing; an
/// acknowledged batch is on disk.
#[utoipa::path(post, path = "/runs/{run_id}/metrics", tag = "runs",
    security(("bearer" = ["sdk", "write"])),
    params(("run_id" = String, Path)),
    request_body = Batch,
    responses((status = 200, body = IngestResult), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn ingest(
    auth: Authed<Ingest>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<Json<IngestResult>, ApiError> {
    runs::check(&state.db, &auth.caller, &run_id, Role::Editor).await?;
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !json {
        return Err(ApiError::BadRequest(
            "expected a JSON body with `Content-Type: application/json`".into(),
        ));
    }
    let body = read_limited(body).await?;
    // A body that is not JSON at all (a bare NaN, say) is refused as a
    // validation error naming the rule, never read as zero.
    let batch: Batch = parse_json(&body).map_err(|error| match error {
        ApiError::BadRequest(message) => ApiError::field(
            "body",
            format!("{message}; NaN and infinities must be the strings \"NaN\", \"Infinity\", \"-Infinity\""),
        ),
        other => other,
    })?;
    metrics::validate(&batch)?;
    let mut tx = state.db.begin_with("BEGIN IMMEDIATE").await?;
    let result = metrics::ingest(&mut tx, &run_id, &batch, &state.config.loss_pattern).await?;
    tx.commit().await?;
    if !result.duplicate {
        let _ = state.event_recorded.send(());
    }
    Ok(Json(result))
}

/// Reads a body of at most [`MAX_INGEST_BYTES`]. A larger one is read to its
/// end (up to 8× the limit) and refused with 413, so the client, still
/// sending, gets the answer instead of a broken connection.
async fn read_limited(body: axum::body::Body) -> Result<Bytes, ApiError> {
    use futures_util::StreamExt;
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    let mut total = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::BadRequest(format!("cannot read the request body: {e}")))?;
        total += chunk.len();
        if total <= MAX_INGEST_BYTES {
            bytes.extend_from_slice(&chunk);
        } else if total > 8 * MAX_INGEST_BYTES {
            break;
        }
    }
    if total > MAX_INGEST_BYTES {
        return Err(ApiError::PayloadTooLarge(format!(
            "a batch may have at most {} MiB of JSON (about 100,000 points); split it into several batches",
            MAX_INGEST_BYTES / (1024 * 1024)
        )));
    }
    Ok(Bytes::from(bytes))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct MetricQuery {
    /// The metric, e.g. `train/loss`.
    key: String,
    /// At most this many points, else this many buckets (1–100000, default 2000).
    max_points: Option<usize>,
    /// `step` (default) or `time` (wall time, seconds).
    x: Option<String>,
    /// Range on the x axis (inclusive).
    from: Option<f64>,
    to: Option<f64>,
}

/// One metric over a range: raw points, or buckets (min, max, last, count, non-finite).
#[utoipa::path(get, path = "/runs/{run_id}/metrics", tag = "runs",
    security(("bearer" = ["read"])),
    params(("run_id" = String, Path), MetricQuery),
    responses((status = 200, body = Series), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn query_metrics(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    ApiQuery(query): ApiQuery<MetricQuery>,
) -> Result<Json<Series>, ApiError> {
    let mut errors = Vec::new();
    let max_points = query.max_points.unwrap_or(2000);
    if !(1..=100_000).contains(&max_points) {
        errors.push(FieldError {
            field: "max_points".into(),
            message: "must be between 1 and 100000".into(),
        });
    }
    let axis = match query.x.as_deref() {
        None | Some("step") => Axis::Step,
        Some("time") => Axis::Time,
        Some(other) => {
            errors.push(FieldError {
                field: "x".into(),
                message: format!("must be `step` or `time`, not `{other}`"),
            });
            Axis::Step
        }
    };
    if let (Some(from), Some(to)) = (query.from, query.to)
        && from > to
    {
        errors.push(FieldError {
            field: "from".into(),
            message: "must not be after `to`".into(),
        });
    }
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    runs::check(&state.db, &auth.caller, &run_id, Role::Viewer).await?;
    let query = Query {
        key: query.key,
        max_points,
        axis,
        from: query.from,
        to: query.to,
    };
    Ok(Json(metrics::query(&state.db, &run_id, &query).await?))
}

/// The checkpoint files a run wrote, each with the other runs that wrote the same path.
#[utoipa::path(get, path = "/runs/{run_id}/checkpoints", tag = "runs",
    security(("bearer" = ["read"])),
    params(("run_id" = String, Path)),
    responses((status = 200, body = Page<Checkpoint>), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
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

/// Marks an SDK run finished (`run.finish()`).
#[utoipa::path(post, path = "/runs/{run_id}/finish", tag = "runs",
    security(("bearer" = ["sdk", "write"])),
    params(("run_id" = String, Path)),
    responses((status = 200, body = Run), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
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
