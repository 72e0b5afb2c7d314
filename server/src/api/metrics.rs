//! `/api/v1/runs/{run_id}/metrics` and charts: ingest points, query a
//! range (points or buckets), draw SVG and PNG charts.

use crate::api::error::{ApiError, ApiQuery, AuthErrors, parse_json};
use crate::api::extract::{Authed, Ingest, Read};
use crate::metrics::chart::axis_and_range;
use crate::metrics::wire::WireBatch;
use crate::metrics::{self, Query, texts};
use crate::paging;
use crate::runs;
use crate::runs::charts::{self, ChartQuery, ChartRequest};
use crate::state::AppState;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use gpuplane_api::error::{ErrorBody, FieldError};
use gpuplane_api::metric::{Batch, IngestResult, SeriesAnswer, TextPage};
use gpuplane_api::project::Role;
use serde::Deserialize;

/// The largest ingest body (a batch of 100,000 points fits).
pub const MAX_INGEST_BYTES: usize = 8 * 1024 * 1024;

/// Stores a batch of points. Values are numbers or the strings "NaN",
/// "Infinity", "-Infinity"; a batch id seen before adds nothing; an
/// acknowledged batch is on disk.
#[utoipa::path(post, path = "/runs/{run_id}/metrics", tag = "runs",
    security(("bearer" = ["sdk", "write"])),
    params(("run_id" = String, Path)),
    request_body = Batch,
    responses((status = 200, body = IngestResult), AuthErrors,
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
    let batch: WireBatch = parse_json(&body).map_err(|error| match error {
        ApiError::BadRequest(message) => ApiError::field(
            "body",
            format!("{message}; NaN and infinities must be the strings \"NaN\", \"Infinity\", \"-Infinity\""),
        ),
        other => other,
    })?;
    // Decoded, checked and encoded here, by as many requests at once as
    // there are cores; stored with the batches of other requests waiting at
    // the same moment, in one transaction (`metrics::group`).
    let prepared = batch.prepare()?;
    let bytes = prepared.encoded_bytes() as u64;
    let result = state.metric_writer.store((run_id, prepared)).await?;
    if !result.duplicate {
        state.observed.ingested(result.accepted, bytes);
        state.wakes.wake(crate::wake::Wake::Events);
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
        let chunk = chunk.map_err(|e| super::error::body_read_failed(&e))?;
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

/// Most points (or buckets) in one answer of an object per point.
const MAX_POINTS: usize = 100_000;
/// Most in one answer of columns or Arrow, which cost a fraction as much a point.
const MAX_POINTS_AS_COLUMNS: usize = 1_000_000;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct MetricQuery {
    /// The metric, e.g. `train/loss`.
    key: String,
    /// At most this many points, else this many buckets (default 2000; 1–100000,
    /// or 1–1000000 as columns or Arrow).
    max_points: Option<usize>,
    /// `step` (default) or `time` (wall time, seconds).
    x: Option<String>,
    /// Range on the x axis (inclusive).
    from: Option<f64>,
    to: Option<f64>,
    /// `points` (default: an object per point or bucket) or `columns` (an
    /// array per field). `Accept: application/vnd.apache.arrow.stream`
    /// answers an Arrow IPC stream instead of JSON.
    format: Option<String>,
}

/// One metric over a range: raw points, or buckets (min, max, last, count,
/// non-finite); as JSON objects, JSON columns or an Arrow IPC stream.
#[utoipa::path(get, path = "/runs/{run_id}/metrics", tag = "runs",
    security(("bearer" = ["read"])),
    params(("run_id" = String, Path), MetricQuery),
    responses((status = 200, content((SeriesAnswer = "application/json"), ("application/vnd.apache.arrow.stream"))),
        AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn query_metrics(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<MetricQuery>,
) -> Result<Response, ApiError> {
    let mut errors = Vec::new();
    let arrow = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains(metrics::arrow::MEDIA_TYPE));
    let columns = match query.format.as_deref() {
        None | Some("points") => false,
        Some("columns") => true,
        Some(other) => {
            errors.push(FieldError {
                field: "format".into(),
                message: format!("must be `points` or `columns`, not `{other}`"),
            });
            false
        }
    };
    let limit = if arrow || columns {
        MAX_POINTS_AS_COLUMNS
    } else {
        MAX_POINTS
    };
    let max_points = query.max_points.unwrap_or(2000);
    if !(1..=limit).contains(&max_points) {
        errors.push(FieldError {
            field: "max_points".into(),
            message: format!("must be between 1 and {limit}"),
        });
    }
    let axis = axis_and_range(query.x.as_deref(), query.from, query.to, &mut errors);
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
    let series = metrics::query(&state.db, &run_id, &query).await?;
    if arrow {
        let stream = metrics::arrow::encode(&series).map_err(anyhow::Error::from)?;
        return Ok(([(header::CONTENT_TYPE, metrics::arrow::MEDIA_TYPE)], stream).into_response());
    }
    let answer = if columns {
        SeriesAnswer::Columns(Box::new(series.into()))
    } else {
        SeriesAnswer::Points(series)
    };
    Ok(Json(answer).into_response())
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct TextQuery {
    /// Only this key's texts.
    key: Option<String>,
    /// Page size (1–500, default 50).
    limit: Option<i64>,
    /// The `next_before` of the previous page.
    before: Option<i64>,
}

/// A run's texts (generated samples, prompts), highest step first.
#[utoipa::path(get, path = "/runs/{run_id}/texts", tag = "runs",
    security(("bearer" = ["read"])),
    params(("run_id" = String, Path), TextQuery),
    responses((status = 200, body = TextPage), AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn list_texts(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    ApiQuery(query): ApiQuery<TextQuery>,
) -> Result<Json<TextPage>, ApiError> {
    let mut errors = Vec::new();
    let limit = paging::page_limit(query.limit, &mut errors);
    let before = paging::cursor(query.before, &mut errors);
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    runs::check(&state.db, &auth.caller, &run_id, Role::Viewer).await?;
    let (items, next_before) = texts::list(&state.db, &run_id, query.key.as_deref(), before, limit).await?;
    let keys = texts::keys(&state.db, &run_id).await?;
    Ok(Json(TextPage {
        items,
        next_before,
        keys,
    }))
}

/// One metric as an SVG chart (of this run and the compared ones): by step
/// or wall time, smoothed on request, downsampled to the width; NaN and
/// infinities break the line and are marked and named.
#[utoipa::path(get, path = "/runs/{run_id}/chart.svg", tag = "runs",
    security(("bearer" = ["read"])),
    params(("run_id" = String, Path), ChartQuery),
    responses((status = 200, description = "The chart", content_type = "image/svg+xml"),
        AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn chart_svg(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    ApiQuery(query): ApiQuery<ChartQuery>,
) -> Result<([(header::HeaderName, &'static str); 2], String), ApiError> {
    let svg = draw_chart(&state, &auth, run_id, query).await?;
    Ok((
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "private, no-store"),
        ],
        svg,
    ))
}

/// The same chart as a PNG image, for pasting where SVG is not shown.
#[utoipa::path(get, path = "/runs/{run_id}/chart.png", tag = "runs",
    security(("bearer" = ["read"])),
    params(("run_id" = String, Path), ChartQuery),
    responses((status = 200, description = "The chart", content_type = "image/png"),
        AuthErrors,
        (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn chart_png(
    auth: Authed<Read>,
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    ApiQuery(query): ApiQuery<ChartQuery>,
) -> Result<([(header::HeaderName, &'static str); 2], Vec<u8>), ApiError> {
    let png = charts::png(draw_chart(&state, &auth, run_id, query).await?).await?;
    Ok((
        [
            (header::CONTENT_TYPE, "image/png"),
            (header::CACHE_CONTROL, "private, no-store"),
        ],
        png,
    ))
}

async fn draw_chart(
    state: &AppState,
    auth: &Authed<Read>,
    run_id: String,
    query: ChartQuery,
) -> Result<String, ApiError> {
    let chart = ChartRequest::check(run_id, query)?;
    for id in &chart.run_ids {
        runs::check(&state.db, &auth.caller, id, Role::Viewer).await?;
    }
    Ok(charts::svg(&state.db, &chart).await?)
}
