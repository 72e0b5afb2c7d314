//! Metric history: `get-history`, and the bulk endpoints the MLflow UI's
//! charts use.

use super::runs::{RunQuery, checked};
use super::{Answer, MlflowError, caller, int64, page, paged, query, required};
use crate::api::error::ApiError;
use crate::api::extract::{Authed, Tracking};
use crate::metrics::{self, Axis, Query};
use crate::runs;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::Uri;
use gpuplane_api::metric::Value as MetricValue;
use gpuplane_api::project::Role;
use serde::Deserialize;
use serde_json::json;

/// The most runs, and points a run, one bulk-interval request reads, as MLflow's.
const MAX_BULK_RUNS: usize = 100;
const MAX_BULK_POINTS: i64 = 2500;

/// The most points `get-history-bulk` answers, and the most runs it takes, as MLflow.
const MAX_BULK_HISTORY: usize = 25_000;

/// The older MLflow UI's history of one metric of several runs: every
/// point (up to `max_results` in all), run by run, in time order.
pub(super) async fn get_history_bulk(
    auth: Result<Authed<Tracking>, ApiError>,
    State(state): State<AppState>,
    uri: Uri,
) -> Answer {
    let auth = caller(auth)?;
    let mut run_ids = Vec::new();
    let (mut key, mut max_results) = (None, MAX_BULK_HISTORY);
    for (name, value) in form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
        match name.as_ref() {
            "run_id" => run_ids.push(value.into_owned()),
            "metric_key" => key = Some(value.into_owned()),
            "max_results" => {
                max_results = value.parse::<usize>().map_err(|_| {
                    MlflowError::invalid(format!(
                        "Invalid value {value} for parameter 'max_results' supplied"
                    ))
                })?
            }
            _ => {}
        }
    }
    if run_ids.is_empty() {
        return Err(MlflowError::invalid(
            "GetMetricHistoryBulk request must specify at least one run_id.",
        ));
    }
    if run_ids.len() > MAX_BULK_RUNS {
        return Err(MlflowError::invalid(format!(
            "GetMetricHistoryBulk request cannot specify more than {MAX_BULK_RUNS} run_ids. Received {} run_ids.",
            run_ids.len()
        )));
    }
    let key =
        key.ok_or_else(|| MlflowError::invalid("GetMetricHistoryBulk request must specify a metric_key."))?;
    let max_results = max_results.min(MAX_BULK_HISTORY);
    run_ids.sort();
    run_ids.dedup();
    let mut listed = Vec::new();
    for run_id in &run_ids {
        let asked = RunQuery {
            run_id: Some(run_id.clone()),
            run_uuid: None,
        };
        checked(&state, &auth.caller, &asked, Role::Viewer).await?;
        let all = Query {
            key: key.clone(),
            max_points: usize::MAX,
            axis: Axis::Step,
            from: None,
            to: None,
        };
        let mut points = metrics::query(&state.db, run_id, &all)
            .await?
            .points
            .unwrap_or_default();
        points.truncate(max_results);
        points.sort_by(|a, b| {
            a.wall_time
                .total_cmp(&b.wall_time)
                .then(a.step.cmp(&b.step))
                .then(a.value.0.total_cmp(&b.value.0))
        });
        listed.extend(points.iter().map(|point| {
            json!({
                "key": key,
                "value": point.value,
                "timestamp": (point.wall_time * 1000.0).round() as i64,
                "step": point.step,
                "run_id": run_id,
            })
        }));
    }
    listed.truncate(max_results);
    Ok(Json(json!({ "metrics": listed })))
}

/// The MLflow UI's charts: one metric of up to 100 runs, each sampled to
/// `max_results` points over `start_step..=end_step` (our downsampling:
/// each bucket's last point; all points when they fit).
pub(super) async fn get_history_bulk_interval(
    auth: Result<Authed<Tracking>, ApiError>,
    State(state): State<AppState>,
    uri: Uri,
) -> Answer {
    let auth = caller(auth)?;
    let mut run_ids = Vec::new();
    let (mut key, mut start, mut end, mut max_results) = (None, None, None, None);
    let whole = |name: &str, text: &str| {
        text.parse::<i64>()
            .map_err(|_| MlflowError::invalid(format!("`{text}` for {name} is not a whole number")))
    };
    for (name, value) in form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
        match name.as_ref() {
            "run_ids" => run_ids.push(value.into_owned()),
            "metric_key" => key = Some(value.into_owned()),
            "start_step" => start = Some(whole("start_step", &value)?),
            "end_step" => end = Some(whole("end_step", &value)?),
            "max_results" => max_results = Some(whole("max_results", &value)?),
            _ => {}
        }
    }
    let key = required("metric_key", &key)?;
    if run_ids.is_empty() {
        return Err(MlflowError::invalid(
            "Missing value for required parameter 'run_ids'.",
        ));
    }
    if run_ids.len() > MAX_BULK_RUNS {
        return Err(MlflowError::invalid(format!(
            "GetMetricHistoryBulkInterval request must specify at most {MAX_BULK_RUNS} run_ids. Received {} run_ids.",
            run_ids.len()
        )));
    }
    let max_results = max_results.unwrap_or(MAX_BULK_POINTS);
    if !(1..=MAX_BULK_POINTS).contains(&max_results) {
        return Err(MlflowError::invalid(format!(
            "max_results must be between 1 and {MAX_BULK_POINTS}."
        )));
    }
    let (from, to) = match (start, end) {
        (Some(start), Some(end)) if start > end => {
            return Err(MlflowError::invalid(format!(
                "end_step must be greater than start_step. Found start_step={start} and end_step={end}."
            )));
        }
        (Some(start), Some(end)) => (Some(start as f64), Some(end as f64)),
        (None, None) => (None, None),
        _ => {
            return Err(MlflowError::invalid(
                "If either start step or end step are specified, both must be specified.",
            ));
        }
    };
    let mut listed = Vec::new();
    for run_id in &run_ids {
        runs::check(&state.db, &auth.caller, run_id, Role::Viewer).await?;
        let sampled = Query {
            key: key.to_string(),
            max_points: max_results as usize,
            axis: Axis::Step,
            from,
            to,
        };
        let series = metrics::query(&state.db, run_id, &sampled).await?;
        let point = |step: i64, wall_time: f64, value: &MetricValue| json!({"key": key, "value": value, "timestamp": (wall_time * 1000.0).round() as i64, "step": step, "run_id": run_id});
        if let Some(points) = &series.points {
            listed.extend(points.iter().map(|p| point(p.step, p.wall_time, &p.value)));
        }
        if let Some(buckets) = &series.buckets {
            listed.extend(buckets.iter().map(|b| point(b.step_to, b.time_to, &b.last)));
        }
    }
    Ok(Json(json!({"metrics": listed})))
}

#[derive(Debug, Deserialize)]
struct HistoryQuery {
    #[serde(flatten)]
    run: RunQuery,
    metric_key: Option<String>,
    #[serde(default, deserialize_with = "int64")]
    max_results: Option<i64>,
    page_token: Option<String>,
}

/// Every point of one metric, in step order (a page at a time when the
/// client asks for pages).
pub(super) async fn get_history(
    auth: Result<Authed<Tracking>, ApiError>,
    State(state): State<AppState>,
    uri: Uri,
) -> Answer {
    let auth = caller(auth)?;
    let request: HistoryQuery = query(&uri)?;
    let key = required("metric_key", &request.metric_key)?;
    let run_id = &checked(&state, &auth.caller, &request.run, Role::Viewer).await?;
    let all = Query {
        key: key.to_string(),
        max_points: usize::MAX,
        axis: Axis::Step,
        from: None,
        to: None,
    };
    let points = metrics::query(&state.db, run_id, &all)
        .await?
        .points
        .unwrap_or_default();
    let (start, size) = page(request.page_token.as_deref(), request.max_results, i64::MAX)?;
    let metric = |point: &gpuplane_api::metric::SeriesPoint| {
        json!({
            "key": key,
            "value": point.value,
            "timestamp": (point.wall_time * 1000.0).round() as i64,
            "step": point.step,
        })
    };
    Ok(Json(paged("metrics", &points, start, size, metric)))
}
